"""The labelled error-text corpora under tests/data/corpus, loaded once for the tests that use them."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).parent / "data" / "corpus"


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPUS / name).read_text().splitlines() if line.strip()]


PUBLIC = load("public.jsonl")
LOCAL = load("local.jsonl")
LOCAL_GPU = load("local_gpu.jsonl")
BY_ID = {d["id"]: d for d in PUBLIC + LOCAL + LOCAL_GPU}
TUNING = load("tuning.jsonl")
TRAINING = load("training.jsonl")  # the learned guess learns from it; the rules are not held to it
HELDOUT = load("heldout.jsonl")  # measured only (bench/bench_classify.py), never tuned on
