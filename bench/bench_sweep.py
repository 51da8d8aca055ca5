"""The regression sweep on the planted recipes: samples swept, wall time beside the registered test's, findings.

For each recipe in tests/planted_bugs.py: build (once) a develop-style checkout of the installed torch's
Python sources (as bench/plant_case.py does), reset main to the clean sources and commit the recipe's bug
on it, then
  - plan the case's sweep from the recipe's repro and layer (execution/sweep/plan.py: its ops, backend,
    circumstances and patterns);
  - sweep on main (the bug present), then on a `fix` branch where the bug is reverted, each with the
    engine's plain launcher (shards = usable CPUs);
  - time the registered test's stand-in on the fix: the recipe's repro, run once by the checkout's python;
and print samples swept, ops, both sides' wall time, the repro's, and the comparison: regressions,
also fixed, pre-existing. The sides run one after the other in the one checkout (the server runs them at
once, main in its worktree).

    python bench/bench_sweep.py [--only NAME ...] [--budget-s S] [--max-samples N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "tests")]

from planted_bugs import PLANTED, PlantedBug, plant, unplant  # noqa: E402
from torch_checkout import build_torch_checkout, git  # noqa: E402

from pt2_bug_basher.execution.sweep import Target, compare, plain_launcher, run_sweep  # noqa: E402
from pt2_bug_basher.execution.sweep.plan import CaseSweepInputs, case_spec  # noqa: E402

REPRO_TIMEOUT_S = 600


def measure(bug: PlantedBug, checkout: Path, python: Path, scratch: Path, budget_s: float,
            max_samples: int) -> dict:
    git(checkout, "checkout", "-q", "-f", "main")
    git(checkout, "reset", "-q", "--hard", "clean")
    plant(checkout, bug)
    spec, why = case_spec(CaseSweepInputs(sources=[bug.repro], layer=bug.layer), max_samples_per_op=max_samples)
    target = Target(bug.name, str(python), checkout)
    launch = plain_launcher(scratch)
    main = anyio.run(lambda: run_sweep(spec, Target(f"{bug.name}-main", str(python), checkout),
                                       scratch_dir=scratch / bug.name / "main", launch=launch, budget_s=budget_s))
    git(checkout, "checkout", "-q", "-B", "fix")
    unplant(checkout, bug)
    fix = anyio.run(lambda: run_sweep(spec, target, scratch_dir=scratch / bug.name / "fix", launch=launch,
                                      budget_s=budget_s))
    repro = scratch / bug.name / "repro.py"
    repro.write_text(bug.repro)
    started = time.monotonic()
    ran = subprocess.run([str(python), str(repro)], cwd=checkout, capture_output=True, timeout=REPRO_TIMEOUT_S)
    repro_s = time.monotonic() - started
    git(checkout, "checkout", "-q", "--", ".")
    got = compare(fix, main)
    return {
        "recipe": bug.name, "backend": spec.backends[0], "ops": fix.ops(), "programs": len(spec.programs),
        "samples": sum(r.outcome not in ("skip", "not_run") for r in fix.results), "planned": fix.planned,
        "fix_counts": fix.counts(), "main_counts": main.counts(), "shards": fix.shards,
        "main_wall_s": main.wall_s, "fix_wall_s": fix.wall_s, "repro_on_fix_s": round(repro_s, 2),
        "repro_on_fix_exit": ran.returncode,
        "regressions": [r.key.describe() for r in got.regressions],
        "also_fixed": [r.key.describe() for r in got.also_fixed],
        "pre_existing": [r.key.describe() for r in got.pre_existing],
        "problems": fix.problems + main.problems, "why": why,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(PLANTED))
    parser.add_argument("--budget-s", type=float, default=180.0)
    parser.add_argument("--max-samples", type=int, default=3, help="samples per op, dtype and requires_grad")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    recipes = [PLANTED[name] for name in (args.only or sorted(PLANTED))]
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        root = Path(tmp)
        made = build_torch_checkout(root)
        rows = []
        for bug in recipes:
            row = measure(bug, made.checkout, made.python, root / "scratch", args.budget_s, args.max_samples)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'recipe':20} {'backend':10} {'ops':>3} {'samples':>7} {'main s':>7} {'fix s':>7} {'repro s':>7} "
          f"{'regr':>4} {'fixed':>5} {'pre':>4}")
    for row in rows:
        print(f"{row['recipe']:20} {row['backend']:10} {len(row['ops']):>3} {row['samples']:>7} "
              f"{row['main_wall_s']:>7.1f} {row['fix_wall_s']:>7.1f} {row['repro_on_fix_s']:>7.1f} "
              f"{len(row['regressions']):>4} {len(row['also_fixed']):>5} {len(row['pre_existing']):>4}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
