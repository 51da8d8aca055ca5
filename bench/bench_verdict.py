"""`user_error` precision and recall of `pt2-bug-basher triage --json` on the verdict scripts.

Each script in tests/scripts/verdict/ is labelled below: whether its failure is the program's own (or its own
backend's), which the verdict calls `user_error` and stops the case on, or not. Cases run one at a time through
the console script of the venv in use (bench_triage_realworld.run_case), each with a fresh state directory.

    python bench/bench_verdict.py [--json OUT] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_triage_realworld import console_script, run_case  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = "../../tests/scripts/verdict"  # run_case reads a case's file relative to bench/realworld

# script: True when the failure is the program's own (or its own backend's); None: the script passes
USER_ERROR = {
    "bare_assert_mismatch.py": False,
    "compile_off_prints_tensors.py": False,
    "compile_off_prints_value.py": False,
    "compiled_only_attribute.py": False,
    "mark_dynamic_violation.py": False,
    "own_backend_raises.py": True,
    "passes.py": None,
    "raised_inside_torch.py": False,
    "recompile_warning.py": False,
    "runtime_backend_raises.py": True,
    "torch_assert_backend.py": False,
    "user_error_matmul.py": True,
    "user_error_own_code.py": True,
    "varying_numbers.py": False,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="OUT", help="write the per-script results and the summary to OUT")
    ap.add_argument("--only", nargs="*", help="script names to run")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run of a script")
    args = ap.parse_args()
    names = [n for n in sorted(USER_ERROR) if not args.only or n in args.only]
    exe, python = console_script(), sys.executable
    results = []
    start = time.monotonic()
    for name in names:
        if not (ROOT / "tests" / "scripts" / "verdict" / name).exists():
            print(f"  {name}: missing here, skipped", flush=True)
            continue
        case = {"id": name, "file": f"{SCRIPTS}/{name}", "label": "user_error" if USER_ERROR[name] else "other"}
        result = run_case(case, exe, python, args.timeout, 1200.0)
        result["user_error"] = USER_ERROR[name]
        print(f"  {name}: {result['predicted']} ({result['seconds']} s)", flush=True)
        results.append(result)
    labelled = [r for r in results if r["user_error"] is not None]
    said = [r for r in labelled if r["predicted"] == "user_error"]
    truly = [r for r in labelled if r["user_error"]]
    hits = [r for r in said if r["user_error"]]
    precision = len(hits) / len(said) if said else None
    recall = len(hits) / len(truly) if truly else None
    print(f"\n{'script':<34} {'user error':>10} {'predicted':<24}")
    for r in results:
        print(f"{r['id']:<34} {str(r['user_error']):>10} {r['predicted']:<24}")
    fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
    print(f"\nuser_error: said {len(said)}, right {len(hits)}, true {len(truly)}: precision {fmt(precision)}, "
          f"recall {fmt(recall)}; wall {time.monotonic() - start:.0f} s")
    if args.json:
        summary = {"said": len(said), "right": len(hits), "true": len(truly), "precision": precision,
                   "recall": recall}
        Path(args.json).write_text(json.dumps({"summary": summary, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
