"""Generate the mutation benchmark: coverage of the kill programs, site selection, kill, manifest.

    python bench/mutants/generate.py WORKDIR [--budget-min M] [--seed S] [--gpu] [--workers N]

Builds (once, reused) WORKDIR/ck: a develop-style torch checkout (tests/torch_checkout.py) on the clean
sources; runs every kill program once under coverage.py (one context per program); enumerates the
mutations cosmic-ray's operators make on covered lines inside compiler functions; then, one mutant at a
time, applies it, runs the programs that cover its line (cheapest first, in one interpreter, stopping at
the first failure), reverts it, and appends each killed mutant to manifest.jsonl.

--gpu (a CUDA machine): the programs of kill/gpu/ and sites of the GPU layer only, each mutant with an empty
Inductor cache (a cached kernel or autotuning result must not hide it). --workers N: N checkouts (ck, ck1, ...),
a mutant on each at once, the CPUs shared out as Inductor's compile threads. --skip-files P ...: sites in files
under these paths are left alone (a rerun for the files an earlier run's big ones crowded out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "tests")]

from runner import KILL_DIR, PROGRAM_ENV, run_programs  # noqa: E402
from sites import Site, covered_lines, layer_of, mutate, sites_in  # noqa: E402
from torch_checkout import build_clean_checkout, git, make_checkout_python  # noqa: E402

MANIFEST = HERE / "manifest.jsonl"
IMPORT_S = 10.0  # import torch on a loaded machine
MAX_PROGRAMS = 2  # the cheapest covering programs a mutant gets; a survivor of more costs minutes
QUOTA = {"dynamo": 14, "aotautograd": 12, "decomp": 12, "inductor": 14, "fx": 12, "export": 6,
         "higher_order_ops": 2, "subclasses": 3, "gpu": 40}


@dataclass(frozen=True)
class Mode:
    """Which programs kill, which layers are mutated, and how each mutant runs."""

    kill_dir: Path
    layers: frozenset[str] | None  # None: every layer but the GPU's
    env: dict[str, str]
    fresh_cache: bool
    by_file: bool  # round-robin over files, not layers (one layer: its big files must not crowd out the rest)
    skip_files: tuple[str, ...] = ()  # path prefixes a rerun leaves alone (files an earlier run filled)

    def wants(self, layer: str, rel: str = "") -> bool:
        if rel.startswith(self.skip_files) and self.skip_files:
            return False
        return layer in self.layers if self.layers is not None else layer != "gpu"


def mode_of(gpu: bool, workers: int, skip_files: tuple[str, ...] = ()) -> Mode:
    if not gpu:
        return Mode(KILL_DIR, None, {}, fresh_cache=False, by_file=False, skip_files=skip_files)
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    return Mode(KILL_DIR / "gpu", frozenset({"gpu"}), {"TORCHINDUCTOR_COMPILE_THREADS": threads}, fresh_cache=True,
                by_file=True, skip_files=skip_files)


def torch_version(python: Path) -> str:
    """The release whose sources a mutant edits ("2.11.0" for "2.11.0+cu130"): a mutant applies to it alone."""
    out = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return out.strip().split("+")[0]


def split_of(mutant_id: str) -> str:
    """Fixed before any scoring: the id's hash, never changed after."""
    return "held_out" if int(hashlib.sha256(mutant_id.encode()).hexdigest(), 16) % 2 else "tuning"


def checkout_of(work: Path, name: str = "ck", like: Path | None = None) -> tuple[Path, Path]:
    """A clean checkout and its interpreter, built once; a worker's is a copy of the first (links kept)."""
    root = work / name
    checkout, python = root / "checkout", root / "pyenv" / "bin" / "python"
    if not python.exists():
        if like is None:
            build_clean_checkout(root)
        else:
            shutil.copytree(like, checkout, symlinks=True)
        make_checkout_python(root, checkout)
    git(checkout, "checkout", "-q", "-f", "-B", "mutants", "clean")
    return checkout, python


def coverage_data(python: Path, work: Path, kill_dir: Path) -> tuple[Path, dict[str, float]]:
    """Every program, once, under coverage on clean torch: it must pass; its time orders kill attempts."""
    data, log = work / "coverage.db", work / "coverage.jsonl"
    if not data.exists():
        programs = [str(p) for p in sorted(kill_dir.glob("*.py"))]
        with log.open("w") as out:
            # a private, empty cache: a kernel or autotuning result cached by an earlier run would hide its cost
            env = {**os.environ, **PROGRAM_ENV, "TORCHINDUCTOR_CACHE_DIR": str(work / "coverage-inductor-cache")}
            subprocess.run(["nice", "-n", "10", str(python), str(HERE / "drive.py"), "--coverage", str(data),
                            "--all", *programs], cwd=work, check=True, timeout=3600, stdout=out, env=env)
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


def candidates(checkout: Path, data: Path, seed: int, mode: Mode) -> Iterator[tuple[Site, list[str]]]:
    """Sites of every layer the mode mutates, round-robin over layers (or files), in an order fixed by the seed."""
    covered = covered_lines(data, checkout)
    groups: dict[str, dict[str, dict[int, set[str]]]] = {}
    for rel, lines in covered.items():
        if mode.wants(layer_of(rel) or "", rel):
            groups.setdefault(rel if mode.by_file else layer_of(rel) or "", {})[rel] = lines
    rng = random.Random(seed)
    queues = [layer_queue(checkout, groups[key], rng) for key in sorted(groups)]
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


class Generator:
    """Hands out sites (one per function, within the layers' quotas) to workers, and records what they find."""

    def __init__(self, work: Path, mode: Mode, checkout: Path, data: Path, seed: int, deadline: float, torch: str):
        self.work, self.mode, self.deadline, self.torch = work, mode, deadline, torch
        self.kept = [json.loads(line) for line in MANIFEST.read_text().splitlines()] if MANIFEST.exists() else []
        self.tried_file = work / "tried.jsonl"
        lines = self.tried_file.read_text().splitlines() if self.tried_file.exists() else []
        self.skip = {json.loads(line)["id"] for line in lines} | {m["id"] for m in self.kept}
        self.per_layer = Counter(m["layer"] for m in self.kept)
        self.busy: set[tuple[str, str]] = set()
        self.queue = candidates(checkout, data, seed, mode)
        self.checkout = checkout
        self.lock = threading.Lock()

    def _taken(self, site: Site) -> bool:
        fn, layer = (site.file, site.function), layer_of(site.file) or ""
        return (site.id in self.skip or self.per_layer[layer] >= QUOTA.get(layer, 0) or fn in self.busy
                or any((m["file"], m["function"]) == fn for m in self.kept))

    def next(self) -> tuple[Site, list[str], tuple[str, str]] | None:
        with self.lock:
            for site, programs in self.queue:
                if time.monotonic() > self.deadline:
                    return None
                if self._taken(site):
                    continue
                edit = mutate(self.checkout, site)
                if edit is None:
                    continue
                self.busy.add((site.file, site.function))
                return site, programs, edit
            return None

    def record(self, site: Site, verdict: str, seconds: float, entry: dict | None) -> None:
        with self.lock:
            self.busy.discard((site.file, site.function))
            with self.tried_file.open("a") as fh:
                fh.write(json.dumps({"id": site.id, "verdict": verdict, "seconds": round(seconds, 1)}) + "\n")
            print(f"{site.id} {site.file}:{site.line} {site.operator} -> {verdict} ({seconds:.0f}s)", flush=True)
            if entry is None or self.per_layer[entry["layer"]] >= QUOTA.get(entry["layer"], 0):
                return
            self.kept.append(entry)
            self.per_layer[entry["layer"]] += 1
            with MANIFEST.open("a") as fh:
                fh.write(json.dumps(entry) + "\n")


def kill(gen: Generator, checkout: Path, python: Path, scratch: Path, costs: dict[str, float]) -> None:
    """One worker: apply each site handed out in its own checkout, run its cheapest programs, revert."""
    while (item := gen.next()) is not None:
        site, programs, (original_text, mutated_text) = item
        path = checkout / site.file
        path.write_text(path.read_text().replace(original_text, mutated_text, 1))
        programs = sorted(programs, key=lambda p: costs.get(p, 1e9))[:MAX_PROGRAMS]
        run_dir = scratch / site.id if gen.mode.fresh_cache else scratch
        t0 = time.monotonic()
        try:
            timeout_s = 2 * sum(costs[p] for p in programs) + 60
            results, timed_out = run_programs(python, [str(gen.mode.kill_dir / p) for p in programs], run_dir,
                                              timeout_s=timeout_s, env=gen.mode.env)
        finally:
            git(checkout, "checkout", "-q", "--", site.file)
            if gen.mode.fresh_cache:
                shutil.rmtree(run_dir, ignore_errors=True)
        killer = next((r for r in results if r["outcome"] != "pass"), None)
        verdict = "timeout" if timed_out else ("killed" if killer else "survived")
        entry = None
        if verdict == "killed":
            assert killer is not None
            entry = {"id": site.id, "layer": layer_of(site.file) or "", "file": site.file, "function": site.function,
                     "line": site.line, "function_lines": list(site.span), "operator": site.operator,
                     "occurrence": site.occurrence, "original": original_text, "mutated": mutated_text,
                     "kill_program": Path(killer["program"]).relative_to(HERE.parents[1]).as_posix(),
                     "failure": failure_kind(killer, checkout, site), "error": killer.get("error", ""),
                     "split": split_of(site.id), "torch": gen.torch}
        gen.record(site, verdict, time.monotonic() - t0, entry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--budget-min", type=float, default=60)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--gpu", action="store_true", help="the GPU layer, killed by kill/gpu/ on CUDA")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--skip-files", nargs="*", default=[], help="leave files under these torch paths alone")
    args = parser.parse_args()
    started = time.monotonic()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    mode = mode_of(args.gpu, args.workers, tuple(args.skip_files))
    first = checkout_of(work)
    workers = [first] + [checkout_of(work, f"ck{i}", like=first[0]) for i in range(1, args.workers)]
    data, costs = coverage_data(workers[0][1], work, mode.kill_dir)
    gen = Generator(work, mode, workers[0][0], data, args.seed, started + args.budget_min * 60,
                    torch_version(workers[0][1]))
    with ThreadPoolExecutor(args.workers) as pool:
        done = [pool.submit(kill, gen, checkout, python, work / f"w{i}", costs)
                for i, (checkout, python) in enumerate(workers)]
        for future in done:
            future.result()
    print(f"kept {len(gen.kept)}: {dict(gen.per_layer)} in {time.monotonic() - started:.0f}s", flush=True)


if __name__ == "__main__":
    main()
