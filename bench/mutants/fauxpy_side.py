"""FauxPy's spectrum-based fault localisation on the runs localize makes, for the side-by-side column.

    python bench/mutants/fauxpy_side.py one CHECKOUT PYTHON REPRO --site FAUXPY_SITE [--json OUT]
    python bench/mutants/fauxpy_side.py mutants WORK --site FAUXPY_SITE [--split S] [--per-layer N] [--only ID ...]
                                        [--json OUT]

FauxPy (a pytest plugin) needs tests: the repro at each rung of localize's backend ladder (eager, aot_eager,
aot_eager_decomp_partition, inductor) and each near-miss variant localize generates from it
(`reduce.variants.generate`) at the repro's own backend become one pytest test each, which passes when the
program runs to its end. FauxPy then runs them in CHECKOUT, torch's develop checkout that PYTHON imports,
with `--src torch --family sbfl --granularity function`, and its Ochiai and DStar function rankings are read
from its report. FAUXPY_SITE is a folder FauxPy was installed into (`pip install --target DIR fauxpy`, then
remove the `pathlib` backport it pulls in, which shadows Python 3's own): it pins its own pytest and cosmic-ray,
so it stays off the server's environment. `mutants` plants each mutant of manifest.jsonl in turn in WORK/fx
(a develop checkout like score.py's, copied from WORK/ck when that exists) and scores the rank of the mutated
function in FauxPy's Ochiai and DStar rankings (ties counted against it), as score.py does for localize.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "tests"), str(ROOT / "server")]

from pt2_bug_basher.reduce.variants import generate  # noqa: E402

LAUNCHER_DIR = ROOT / "server" / "pt2_bug_basher" / "_probes"
RUNGS = ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor")
TIMEOUT_S = 1800

TEST_FILE = '''\
"""One test per run of localize's: the repro at each rung, and each near-miss variant (written by fauxpy_side)."""
import json
import os
import runpy
import sys

import coverage
import pytest
import torch
import torch._dynamo

# torch runs code it generated under made-up file names (`subclass_codegen.py:codegen(...)`), which FauxPy
# would open as source files and stop on: its coverage data leaves them out
_measured = coverage.CoverageData.measured_files
coverage.CoverageData.measured_files = lambda self: {{f for f in _measured(self) if os.path.isfile(f)}}

sys.path.insert(0, {launcher!r})
import launcher  # noqa: E402

ORIGINAL = (torch.compile, torch._dynamo.optimize)
CASES = json.loads({cases!r})


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_run(case, monkeypatch):
    torch.compile, torch._dynamo.optimize = ORIGINAL
    torch._dynamo.reset()
    launcher.patch_torch(case["backend"], mark=False)
    monkeypatch.setattr(sys, "argv", [case["path"]])
    monkeypatch.syspath_prepend(case["dir"])
    try:
        runpy.run_path(case["path"], run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), f"exit status {{exc.code}}"
'''


def write_tests(folder: Path, repro: Path) -> int:
    """The test file, and each variant's source beside it; returns how many tests."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = [{"id": f"rung-{rung}", "path": str(repro), "dir": str(repro.parent), "backend": rung} for rung in RUNGS]
    for variant in generate(repro.read_text(errors="replace")):
        path = folder / f"variant_{variant.id}.py"
        path.write_text(variant.source)
        cases.append({"id": f"variant-{variant.id}", "path": str(path), "dir": str(repro.parent), "backend": None})
    (folder / "test_fauxpy_runs.py").write_text(TEST_FILE.format(launcher=str(LAUNCHER_DIR),
                                                                 cases=json.dumps(cases)))
    return len(cases)


def _entity(entity: str) -> tuple[str, str | None, int | None, int | None]:
    """FauxPy's function entity, `path::name::first::last`, as (path relative to torch's parent, name, lines)."""
    parts = entity.split("::")
    path = parts[0].replace(os.sep, "/")
    cut = path.rfind("torch/")
    rel = path[cut:] if cut >= 0 else path
    name = parts[1] if len(parts) > 1 else None
    numbers = [int(p) for p in parts[2:] if p.isdigit()]
    return rel, name, (numbers[0] if numbers else None), (numbers[1] if len(numbers) > 1 else None)


def run_fauxpy(checkout: Path, python: Path, repro: Path, site: Path, work: Path) -> dict:
    """FauxPy's rankings for one planted bug: {"tests", "failing", "seconds", "rankings": {technique: [...]}}."""
    shutil.rmtree(work, ignore_errors=True)
    tests = work / "tests"
    count = write_tests(tests, repro)
    env = {**os.environ, "PYTHONPATH": str(site), "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tests), "--src", "torch",
            "--family", "sbfl", "--granularity", "function", "--top-n", "-1"]
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return {"tests": count, "error": f"FauxPy ran past {TIMEOUT_S} s", "seconds": TIMEOUT_S}
    seconds = round(time.monotonic() - started, 1)
    reports = sorted(checkout.parent.glob(f"FauxPyReport_{checkout.name}_sbfl_function_*"))
    if not reports:
        return {"tests": count, "error": "no FauxPy report: " + out[-800:], "seconds": seconds}
    rankings: dict[str, list[dict]] = {}
    for scores in reports[-1].glob("Scores_*.csv"):
        with scores.open() as fh:
            rows = list(csv.DictReader(fh))
        rankings[scores.stem.removeprefix("Scores_")] = [
            dict(zip(("file", "function", "first", "last"), _entity(r["Entity"]), strict=True)) | {
                "score": float(r["Score"])} for r in rows]
    for report in reports:
        shutil.rmtree(report, ignore_errors=True)
    failing = sum(1 for line in out.splitlines() if line.startswith("FAILED "))  # pytest's short summary
    return {"tests": count, "failing": failing, "seconds": seconds, "rankings": rankings, "tail": out[-300:]}


def rank_of(ranking: list[dict], file: str, function: str, lines: tuple[int, int]) -> int | None:
    """1-based position of the mutated function (same file, and its first line inside the function's; its bare
    name where FauxPy gave no line), ties counted pessimistically: every function scored as high ranks before it."""
    for entry in ranking:
        here = (lines[0] <= entry["first"] <= lines[1] if entry["first"] is not None else
                entry["function"] in (function, function.rsplit(".", 1)[-1]))
        if entry["file"] == file and here:
            return sum(1 for other in ranking if other["score"] >= entry["score"])
    return None


def score_mutants(work: Path, checkout: Path, python: Path, site: Path, mutants: list[dict]) -> list[dict]:
    from planted_bugs import PlantedBug, plant
    from torch_checkout import git

    rows = []
    for mutant in mutants:
        repro = work / f"fauxpy_repro_{mutant['id']}.py"
        repro.write_text((ROOT / mutant["kill_program"]).read_text())
        bug = PlantedBug(name=mutant["id"], file=mutant["file"], old=mutant["original"], new=mutant["mutated"],
                         repro="", layer=mutant["layer"], guilty=mutant["function"], what=mutant["operator"])
        git(checkout, "checkout", "-q", "-f", "-B", f"mutant-{mutant['id']}", "clean")
        plant(checkout, bug)
        try:
            found = run_fauxpy(checkout, python, repro, site, work / "fauxpy-runs")
        finally:
            git(checkout, "checkout", "-q", "-f", "-B", "mutants", "clean")
        lines = tuple(mutant["function_lines"])
        row = {"id": mutant["id"], "layer": mutant["layer"], "split": mutant["split"], "function": mutant["function"],
               "fauxpy_s": found.get("seconds"), "tests": found.get("tests"), "failing": found.get("failing"),
               "error": found.get("error"),
               **{f"rank_{technique.lower()}": rank_of(ranking, mutant["file"], mutant["function"], lines)
                  for technique, ranking in found.get("rankings", {}).items()}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def summary(rows: list[dict]) -> list[str]:
    out = []
    for layer in ["ALL", *sorted({r["layer"] for r in rows})]:
        rs = [r for r in rows if layer in ("ALL", r["layer"])]
        for technique in ("ochiai", "dstar"):
            ranks = [r.get(f"rank_{technique}") for r in rs]
            tops = [sum(1 for k in ranks if k is not None and k <= n) for n in (1, 3, 5)]
            out.append(f"{layer:12} {technique:7} n={len(rs):3}  top1 {tops[0]}/{len(rs)}  top3 {tops[1]}/{len(rs)}  "
                       f"top5 {tops[2]}/{len(rs)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    one = sub.add_parser("one")
    one.add_argument("checkout", type=Path)
    one.add_argument("python", type=Path)
    one.add_argument("repro", type=Path)
    many = sub.add_parser("mutants")
    many.add_argument("work", type=Path)
    many.add_argument("--split", choices=["tuning", "held_out", "all"], default="tuning")
    many.add_argument("--per-layer", type=int, default=0)
    many.add_argument("--only", nargs="*")
    for p in (one, many):
        p.add_argument("--site", type=Path, required=True)
        p.add_argument("--json", type=Path)
    one.add_argument("--work", type=Path, default=Path("fauxpy-work"))
    args = parser.parse_args()
    if args.mode == "one":
        found = run_fauxpy(args.checkout.resolve(), args.python, args.repro.resolve(), args.site.resolve(),
                           args.work.resolve())
        if args.json:
            args.json.write_text(json.dumps(found, indent=1))
        for technique, ranking in found.get("rankings", {}).items():
            print(technique, [(r["file"], r["function"], r["score"]) for r in ranking[:5]])
        print({k: v for k, v in found.items() if k != "rankings"})
        return
    from generate import MANIFEST, checkout_of, torch_version

    work = args.work.resolve()
    first = work / "ck" / "checkout"
    checkout, python = checkout_of(work, "fx", like=first if first.exists() else None)
    version = torch_version(python)
    mutants = [m for m in map(json.loads, MANIFEST.read_text().splitlines()) if m["torch"] == version
               and (args.split == "all" or m["split"] == args.split) and (not args.only or m["id"] in args.only)]
    if args.per_layer:
        kept: dict[str, int] = {}
        mutants = [m for m in mutants if kept.setdefault(m["layer"], 0) < args.per_layer
                   and not kept.__setitem__(m["layer"], kept[m["layer"]] + 1)]
    rows = score_mutants(work, checkout, python, args.site.resolve(), mutants)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
