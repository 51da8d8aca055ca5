"""Generate the mutation benchmark: coverage of the kill programs, site selection, kill, manifest.

    python bench/mutants/generate.py WORKDIR [--budget-min M] [--per-layer N] [--seed S]

Builds (once, reused) WORKDIR/ck: a develop-style torch checkout (tests/torch_checkout.py) on the clean
sources; runs every kill program once under coverage.py (one context per program); enumerates the
mutations cosmic-ray's operators make on covered lines inside compiler functions; then, one mutant at a
time, applies it, runs the programs that cover its line (cheapest first, in one interpreter, stopping at
the first failure), reverts it, and appends each killed mutant to manifest.jsonl.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "tests")]

from runner import KILL_DIR, run_programs  # noqa: E402
from sites import Site, covered_lines, layer_of, mutate, sites_in  # noqa: E402
from torch_checkout import build_torch_checkout, git  # noqa: E402

MANIFEST = HERE / "manifest.jsonl"
IMPORT_S = 10.0  # import torch on a loaded machine
MAX_PROGRAMS = 2  # the cheapest covering programs a mutant gets; a survivor of more costs minutes
QUOTA = {"dynamo": 14, "aotautograd": 12, "decomp": 12, "inductor": 14, "fx": 12, "export": 6,
         "higher_order_ops": 2, "subclasses": 3}


def split_of(mutant_id: str) -> str:
    """Fixed before any scoring: the id's hash, never changed after."""
    return "held_out" if int(hashlib.sha256(mutant_id.encode()).hexdigest(), 16) % 2 else "tuning"


def checkout_of(work: Path) -> tuple[Path, Path]:
    root = work / "ck"
    checkout, python = root / "checkout", root / "pyenv" / "bin" / "python"
    if not python.exists():
        build_torch_checkout(root)
    git(checkout, "checkout", "-q", "-f", "-B", "mutants", "clean")
    return checkout, python


def coverage_data(python: Path, work: Path) -> tuple[Path, dict[str, float]]:
    """Every program, once, under coverage on clean torch: it must pass; its time orders kill attempts."""
    data, log = work / "coverage.db", work / "coverage.jsonl"
    if not data.exists():
        programs = [str(p) for p in sorted(KILL_DIR.glob("*.py"))]
        with log.open("w") as out:
            subprocess.run(["nice", "-n", "10", str(python), str(HERE / "drive.py"), "--coverage", str(data),
                            "--all", *programs], cwd=work, check=True, timeout=3600, stdout=out)
    results = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    failing = [r for r in results if r["outcome"] != "pass"]
    if failing:
        sys.exit(f"kill programs fail on clean torch: {failing}")
    return data, {Path(r["program"]).name: r["seconds"] + IMPORT_S for r in results}


def layer_queue(checkout: Path, files: dict[str, dict[int, set[str]]], rng: random.Random):
    """One layer's sites, file by file in random order (enumerating a big file is slow), one per function."""
    names = sorted(files)
    rng.shuffle(names)
    for rel in names:
        lines = files[rel]
        found = sites_in(checkout, rel, set(lines))
        rng.shuffle(found)
        seen = set()
        for site in found:
            if site.function not in seen:
                seen.add(site.function)
                yield site, sorted(lines[site.line])


def candidates(checkout: Path, data: Path, seed: int):
    """Sites of every layer, round-robin, in an order fixed by the seed."""
    covered = covered_lines(data, checkout)
    by_layer: dict[str, dict[str, dict[int, set[str]]]] = {}
    for rel, lines in covered.items():
        by_layer.setdefault(layer_of(rel) or "", {})[rel] = lines
    rng = random.Random(seed)
    queues = [layer_queue(checkout, by_layer[layer], rng) for layer in sorted(by_layer)]
    while queues:
        for q in list(queues):
            item = next(q, None)
            if item is None:
                queues.remove(q)
            else:
                yield item


def failure_kind(result: dict, checkout: Path, site: Site) -> str:
    if result["outcome"] == "wrong":
        return "wrong_result"
    at_site = f"{checkout / site.file}:{site.line}" in result.get("frames", [])
    return "crash_at_site" if at_site else "crash"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--budget-min", type=float, default=60)
    parser.add_argument("--seed", type=int, default=30)
    args = parser.parse_args()
    started = time.monotonic()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    checkout, python = checkout_of(work)
    data, costs = coverage_data(python, work)
    kept = [json.loads(line) for line in MANIFEST.read_text().splitlines()] if MANIFEST.exists() else []
    done = {m["id"] for m in kept}
    tried_file = work / "tried.jsonl"
    tried = {json.loads(line)["id"] for line in tried_file.read_text().splitlines()} if tried_file.exists() else set()
    per_layer = Counter(m["layer"] for m in kept)
    for site, programs in candidates(checkout, data, args.seed):
        if time.monotonic() - started > args.budget_min * 60:
            break
        layer = layer_of(site.file) or ""
        if site.id in done or site.id in tried or per_layer[layer] >= QUOTA.get(layer, 0):
            continue
        if any(m["file"] == site.file and m["function"] == site.function for m in kept):
            continue
        edit = mutate(checkout, site)
        path = checkout / site.file
        if edit is None:
            continue
        original_text, mutated_text = edit
        source = path.read_text()
        path.write_text(source.replace(original_text, mutated_text, 1))
        programs = sorted(programs, key=lambda p: costs.get(p, 1e9))[:MAX_PROGRAMS]
        t0 = time.monotonic()
        try:
            timeout_s = 2 * sum(costs[p] for p in programs) + 60
            results, timed_out = run_programs(python, programs, work, timeout_s=timeout_s)
        finally:
            git(checkout, "checkout", "-q", "--", site.file)
        killer = next((r for r in results if r["outcome"] != "pass"), None)
        verdict = "timeout" if timed_out else ("killed" if killer else "survived")
        with tried_file.open("a") as fh:
            fh.write(json.dumps({"id": site.id, "verdict": verdict, "seconds": round(time.monotonic() - t0, 1)}) + "\n")
        print(f"{site.id} {site.file}:{site.line} {site.operator} -> {verdict} ({time.monotonic() - t0:.0f}s)",
              flush=True)
        if verdict != "killed":
            continue
        assert killer is not None
        entry = {"id": site.id, "layer": layer, "file": site.file, "function": site.function, "line": site.line,
                 "function_lines": list(site.span), "operator": site.operator, "occurrence": site.occurrence,
                 "original": original_text, "mutated": mutated_text,
                 "kill_program": "bench/mutants/kill/" + Path(killer["program"]).name,
                 "failure": failure_kind(killer, checkout, site), "error": killer.get("error", ""),
                 "split": split_of(site.id)}
        kept.append(entry)
        per_layer[layer] += 1
        with MANIFEST.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")
    print(f"kept {len(kept)}: {dict(per_layer)} in {time.monotonic() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
