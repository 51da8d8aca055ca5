"""A case's first Inductor CPU compile, in a new private cache, with and without the machine's ISA probe builds.

Each round runs the same small `torch.compile` program twice, alternating which goes first, each in a new
TORCHINDUCTOR_CACHE_DIR: the baseline as every case ran it before (Inductor builds its ISA probes), and one
whose cache `seed_isa_builds` filled from the machine's store first (a round before it fills the store).
Prints each pair's seconds and the median ratio (goal: under 1, the probes' builds saved).

    python bench/bench_isa_builds.py [--rounds N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "server")]

from pt2_bug_basher.execution.isa_builds import keep_isa_builds, seed_isa_builds  # noqa: E402

PROGRAM = """\
import torch

def f(x):
    return (x.sin() + x.cos()).sum(1).relu()

print(torch.compile(f)(torch.randn(8, 8)).shape)
"""


def timed(cache_dir: Path, script: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, str(script)], env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)},
                   check=True, capture_output=True, timeout=600)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script, shared = root / "program.py", root / "machine"
        script.write_text(PROGRAM)
        first = root / "fill"
        timed(first, script)
        keep_isa_builds(first, shared=shared)
        rows = []
        for i in range(args.rounds):
            cold, seeded = root / f"cold-{i}", root / f"seeded-{i}"
            seed_isa_builds(seeded, shared=shared)
            order = [("cold", cold), ("seeded", seeded)] if i % 2 == 0 else [("seeded", seeded), ("cold", cold)]
            row = {name: round(timed(path, script), 2) for name, path in order}
            row["ratio"] = round(row["seeded"] / row["cold"], 3)
            rows.append(row)
            print(f"round {i}: baseline {row['cold']:.2f} s, seeded {row['seeded']:.2f} s, ratio {row['ratio']:.3f}")
    median = statistics.median(r["ratio"] for r in rows)
    print(f"median ratio seeded/baseline: {median:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": rows, "median_ratio": median}, indent=1))


if __name__ == "__main__":
    main()
