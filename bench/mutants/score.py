"""Score localize (and PyTorch's compiler bisector beside it) on the mutation benchmark.

    python bench/mutants/score.py WORK [--split tuning|held_out|all] [--per-layer N] [--only ID ...]
                                  [--layer L] [--skip-bisector | --skip-localize] [--json OUT]
                                  [--workers N] [--pushed]

For each mutant of manifest.jsonl: in the develop-style torch checkout WORK/ck (generate.py builds it;
reused, each mutant on its own branch from the clean commit), commit the mutant's one-occurrence edit,
use its kill program as the user's repro, open a case through the real MCP server in-process
(check_env, run_with_logs, localize: bench/bench_bisect.py's `ours`) and read the rank of the mutated
function among localize's suspects; then run the bisector on the same repro. Prints top-1/3/5 and wall
times per layer and split. --workers N: N checkouts (ck, ck1, ...) and case stores, one mutant on each at
once, the CPUs shared out as Inductor's compile threads. Each mutant is a commit on HEAD: by default the
user's own (no remote branch holds it), as in "my change broke this"; --pushed puts a remote-tracking branch on
it, as for a bug already upstream: then only a passing run that did not run the change ties it to the failure.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import statistics
import sys
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "bench"), str(ROOT / "tests"), str(ROOT / "server")]

import bench_bisect  # noqa: E402
from generate import MANIFEST, checkout_of, torch_version  # noqa: E402
from planted_bugs import PlantedBug, plant  # noqa: E402
from torch_checkout import git  # noqa: E402

PUSHED_REF = "refs/remotes/origin/main"
BISECTOR_TIMEOUT_S = int(os.environ.get("BISECTOR_TIMEOUT_S", 900))
# what the bisector's answer names -> the layer it points at
BISECTOR_LAYER = {"eager": "dynamo", "aot_eager": "aotautograd", "aot_eager_decomp_partition": "decomp",
                  "inductor": "inductor"}
BISECTOR_SUBSYSTEM_LAYER = {"decomposition": "decomp", "cudagraphs": "gpu"}
# the bisector has no subsystem for Triton code generation: its `inductor` answer is its best for the GPU layer
BISECTOR_ALSO = {"gpu": {"inductor"}}


def rank(suspects: list[dict], mutant: dict) -> int | None:
    """1-based position of the first suspect in the mutated function (same file, line inside it, or its name)."""
    first, last = mutant["function_lines"]
    name = mutant["function"]
    for i, suspect in enumerate(suspects, 1):
        if suspect.get("file") != mutant["file"]:
            continue
        line = suspect.get("line")
        fn = suspect.get("function") or ""
        if (line is not None and first <= line <= last) or fn == name or name.endswith("." + fn):
            return i
    return None


def bisector_layer(result: object) -> str | None:
    text = str(result)
    backend = re.search(r"backend='([a-z_]+)'", text)
    subsystem = re.search(r"subsystem='([a-z_]+)'", text)
    if subsystem and subsystem.group(1) in BISECTOR_SUBSYSTEM_LAYER:
        return BISECTOR_SUBSYSTEM_LAYER[subsystem.group(1)]
    return BISECTOR_LAYER.get(backend.group(1)) if backend else None


def score_one(work: Path, checkout: Path, python: Path, mutant: dict, skip_bisector: bool, state: Path,
              skip_localize: bool = False, pushed: bool = False) -> dict:
    repro = (ROOT / mutant["kill_program"]).read_text()
    bug = PlantedBug(name=mutant["id"], file=mutant["file"], old=mutant["original"], new=mutant["mutated"],
                     repro=repro, layer=mutant["layer"], guilty=mutant["function"], what=mutant["operator"])
    git(checkout, "checkout", "-q", "-f", "-B", f"mutant-{mutant['id']}", "clean")
    plant(checkout, bug)
    if pushed:  # the mutant as upstream history: a remote-tracking branch holds it
        git(checkout, "update-ref", PUSHED_REF, "HEAD")
    script = work / f"repro_{mutant['id']}.py"
    script.write_text(repro)
    try:
        mine = {} if skip_localize else anyio.run(bench_bisect.ours, work, checkout, python, script, state)
    finally:
        git(checkout, "checkout", "-q", "-f", "-B", "mutants", "clean")
        if pushed:
            git(checkout, "update-ref", "-d", PUSHED_REF)
    row = {"id": mutant["id"], "layer": mutant["layer"], "split": mutant["split"], "failure": mutant["failure"],
           "function": mutant["function"], "localized": not skip_localize, "localize_s": mine.get("seconds"),
           "error": mine.get("error"),
           "localize_layer": mine.get("layer"), "rank": rank(mine.get("raw_suspects", []), mutant),
           "top": [f"{s['function']} ({s['file']}:{s['line']})" for s in mine.get("raw_suspects", [])[:5]]}
    if not skip_bisector:
        git(checkout, "checkout", "-q", "-f", "-B", f"mutant-{mutant['id']}", "clean")
        plant(checkout, bug)
        try:
            bench_bisect.BISECTOR_TIMEOUT_S = BISECTOR_TIMEOUT_S
            theirs = bench_bisect.baseline(work, python, script)
        finally:
            git(checkout, "checkout", "-q", "-f", "-B", "mutants", "clean")
        hits = {mutant["layer"], *BISECTOR_ALSO.get(mutant["layer"], ())}
        row.update(bisector_s=theirs["seconds"], bisector=theirs["result"],
                   bisector_hit=bisector_layer(theirs["result"]) in hits)
    return row


def summary(rows: list[dict]) -> list[str]:
    out = []
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        for split in (r["split"], "all"):
            groups[(split, r["layer"])].append(r)
            groups[(split, "ALL")].append(r)
    for (split, layer), rs in sorted(groups.items()):
        localized = [r for r in rs if r.get("localized", True)]  # a bisector-only pass ranks nothing
        n = len(localized)
        tops = [sum(1 for r in localized if r["rank"] is not None and r["rank"] <= k) for k in (1, 3, 5)]
        times = [r["localize_s"] for r in localized if r["localize_s"] is not None]
        hits = [r["bisector_hit"] for r in rs if "bisector_hit" in r]
        btimes = [r["bisector_s"] for r in rs if "bisector_s" in r]
        out.append(f"{split:9} {layer:16} "
                   + (f"n={n:3}  top1 {tops[0]}/{n}  top3 {tops[1]}/{n}  top5 {tops[2]}/{n}  "
                      f"localize median {statistics.median(times) if times else '-'} s" if n else "localize not run")
                   + (f"  | bisector layer hit {sum(hits)}/{len(hits)}, median {statistics.median(btimes)} s"
                      if hits else ""))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--split", choices=["tuning", "held_out", "all"], default="tuning")
    parser.add_argument("--per-layer", type=int, default=0, help="at most N mutants per layer (0: all)")
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--layer", help="only this layer's mutants (gpu: on a CUDA machine)")
    parser.add_argument("--skip-bisector", action="store_true")
    parser.add_argument("--skip-localize", action="store_true", help="the bisector alone (a second pass)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--pushed", action="store_true",
                        help="score each mutant as a pushed commit (upstream history), not the user's own")
    args = parser.parse_args()
    work = args.work.resolve()
    checkout, python = checkout_of(work)
    here = torch_version(python)
    every = [json.loads(line) for line in MANIFEST.read_text().splitlines()]
    mutants = [m for m in every if m["torch"] == here]
    if len(mutants) < len(every):
        print(f"{len(every) - len(mutants)} mutants edit another torch release than this one ({here}); not scored")
    if args.only:
        mutants = [m for m in mutants if m["id"] in args.only]
    elif args.split != "all":
        mutants = [m for m in mutants if m["split"] == args.split]
    if args.layer:
        mutants = [m for m in mutants if m["layer"] == args.layer]
    if args.per_layer:
        taken: dict[str, int] = defaultdict(int)
        chosen = []
        for m in mutants:
            if taken[m["layer"]] < args.per_layer:
                taken[m["layer"]] += 1
                chosen.append(m)
        mutants = chosen
    if args.workers > 1:
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(max(1, (os.cpu_count() or 1) // args.workers))
    checkouts = [(checkout, python)] + [checkout_of(work, f"ck{i}", like=checkout) for i in range(1, args.workers)]
    todo: queue.SimpleQueue[dict] = queue.SimpleQueue()
    for mutant in mutants:
        todo.put(mutant)
    rows: list[dict] = []
    lock = threading.Lock()

    def worker(i: int, checkout: Path, python: Path) -> None:
        while True:
            try:
                mutant = todo.get_nowait()
            except queue.Empty:
                return
            started = time.monotonic()
            row = score_one(work, checkout, python, mutant, args.skip_bisector, work / f"state{i}", args.skip_localize,
                            args.pushed)
            with lock:
                rows.append(row)
                print(json.dumps(row), f"({time.monotonic() - started:.0f}s)", flush=True)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=1))

    with ThreadPoolExecutor(args.workers) as pool:
        for future in [pool.submit(worker, i, c, p) for i, (c, p) in enumerate(checkouts)]:
            future.result()
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
