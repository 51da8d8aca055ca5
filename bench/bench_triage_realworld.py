"""`pt2-bug-basher triage --json` on real-world failures: top-1 category against hand labels.

Each case in bench/realworld/cases.json is a small script written from the facts of a public
pytorch/pytorch issue (see bench/realworld/README.md). Every case runs through the console script
of the venv in use, with a fresh state directory, cases in parallel up to --jobs. The predicted
category is the JSON's top-level `category` if present, else `reproduction.failure.category`,
else "did not fail". A prediction is right when it equals the label or one of the case's `also`
labels. Prints a table, top-1 accuracy overall and per label, precision/recall per category, and
every miss with the evidence lines the tool gave.

    python bench/bench_triage_realworld.py [--jobs N] [--timeout S] [--only ID ...] [--json OUT]
    python bench/bench_triage_realworld.py --rescore OUT   # the tables again, from saved results
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "bench" / "realworld" / "cases.json"
DID_NOT_FAIL = "did not fail"


def console_script() -> str:
    """The pt2-bug-basher of the venv running this script (falls back to PATH)."""
    local = Path(sys.executable).parent / "pt2-bug-basher"
    found = str(local) if local.exists() else shutil.which("pt2-bug-basher")
    if not found:
        sys.exit("pt2-bug-basher is not installed in this environment")
    return found


def predicted_category(report: dict) -> str:
    if report.get("category"):
        return report["category"]
    failure = (report.get("reproduction") or {}).get("failure")
    return failure["category"] if failure else DID_NOT_FAIL


def evidence_lines(report: dict) -> list[str]:
    """What the tool showed for its answer: the failure's evidence, or why it saw no failure."""
    repro = report.get("reproduction") or {}
    failure = repro.get("failure")
    if failure:
        message = next(iter((failure.get("message") or "").splitlines()), "")
        lines = [f"exception: {failure.get('exception_type')}: {message}", f"signature: {failure.get('signature')}"]
        if failure.get("secondary"):
            lines.append(f"secondary: {', '.join(failure['secondary'])}")
        lines += [e if isinstance(e, str) else f"[{e.get('rule')}] line {e.get('line_no')}: {e.get('text')}"
                  for e in failure.get("evidence", [])]
        return lines
    lines = [f"runs: {', '.join(r.get('exit', '?') for r in repro.get('runs', []))}"]
    breaks, recompiles = repro.get("graph_break_total", 0), len(repro.get("recompiles", []))
    lines.append(f"graph breaks seen: {breaks}, recompiles seen: {recompiles}")
    lines += [f"note: {n}" for n in repro.get("notes", [])]
    lines += [f"output tail: {t}" for t in repro.get("tail", [])[-4:]]
    if repro.get("next_step"):
        lines.append(f"next step: {repro['next_step']}")
    return lines


def run_case(case: dict, exe: str, python: str, run_timeout: float, case_timeout: float) -> dict:
    script = ROOT / "bench" / "realworld" / case["file"]
    with tempfile.TemporaryDirectory(prefix="pt2bb-bench-") as state:
        cmd = [exe, "triage", str(script), "--json", "--python", python, "--repo", str(ROOT),
               "--state-dir", state, "--timeout", str(run_timeout)]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=case_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {**case, "predicted": "timeout", "seconds": round(time.monotonic() - start, 1),
                    "evidence": [f"triage ran past {case_timeout:.0f} s"]}
        seconds = round(time.monotonic() - start, 1)
    try:
        report = json.loads(out)
    except json.JSONDecodeError:
        return {**case, "predicted": "error", "seconds": seconds,
                "evidence": [f"exit {proc.returncode}", *err.strip().splitlines()[-5:]]}
    failure = (report.get("reproduction") or {}).get("failure") or {}
    return {**case, "predicted": predicted_category(report), "seconds": seconds,
            "secondary": failure.get("secondary", []), "confidence": failure.get("confidence"),
            "evidence": evidence_lines(report)}


def is_right(result: dict) -> bool:
    return result["predicted"] in {result["label"], *result.get("also", [])}


def summarize(results: list[dict]) -> dict:
    right = [r for r in results if is_right(r)]
    print(f"\n{'case':<40} {'label':<24} {'predicted':<24} {'s':>6}")
    for r in results:
        mark = "" if is_right(r) else "  MISS"
        print(f"{r['id']:<40} {r['label']:<24} {r['predicted']:<24} {r['seconds']:>6.1f}{mark}")
    overall = len(right) / len(results)
    exact = sum(r["predicted"] == r["label"] for r in results)
    print(f"\ntop-1: {len(right)}/{len(results)} = {overall:.2f} (label or an `also` label); "
          f"label only: {exact}/{len(results)} = {exact / len(results):.2f}")

    labels = sorted({r["label"] for r in results})
    per_label = {}
    print(f"\n{'label':<24} {'n':>3} {'top-1':>6}")
    for label in labels:
        mine = [r for r in results if r["label"] == label]
        per_label[label] = sum(map(is_right, mine)) / len(mine)
        print(f"{label:<24} {len(mine):>3} {per_label[label]:>6.2f}")

    categories = sorted({r["label"] for r in results} | {r["predicted"] for r in results})
    per_category = {}
    print(f"\n{'category':<24} {'labelled':>8} {'predicted':>9} {'precision':>9} {'recall':>7}")
    for cat in categories:
        labelled = [r for r in results if r["label"] == cat]
        predicted = [r for r in results if r["predicted"] == cat]
        precision = sum(map(is_right, predicted)) / len(predicted) if predicted else None
        recall = sum(map(is_right, labelled)) / len(labelled) if labelled else None
        per_category[cat] = {"labelled": len(labelled), "predicted": len(predicted),
                             "precision": precision, "recall": recall}
        fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
        print(f"{cat:<24} {len(labelled):>8} {len(predicted):>9} {fmt(precision):>9} {fmt(recall):>7}")

    misses = [r for r in results if not is_right(r)]
    if misses:
        print("\nMisses, with the evidence the tool gave:")
    for r in misses:
        print(f"\n- {r['id']}: label {r['label']}, predicted {r['predicted']}  ({r['source']})")
        for line in r["evidence"]:
            print(f"    {line[:240]}")
    return {"top1": overall, "right": len(right), "label_only": exact, "cases": len(results), "per_label": per_label,
            "per_category": per_category}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases run at once (default: the cores)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run of a script (triage --timeout)")
    ap.add_argument("--case-timeout", type=float, default=1200.0, help="seconds for one whole triage")
    ap.add_argument("--only", nargs="*", help="case ids to run")
    ap.add_argument("--json", metavar="OUT", help="write the per-case results and the summary to OUT")
    ap.add_argument("--rescore", metavar="IN", help="print the tables for results saved by --json, run nothing")
    args = ap.parse_args()
    if args.rescore:
        summarize(json.loads(Path(args.rescore).read_text())["results"])
        return 0

    cases = json.loads(CASES.read_text())
    if args.only:
        cases = [c for c in cases if c["id"] in set(args.only)]
    exe, python = console_script(), sys.executable
    print(f"{len(cases)} cases, {args.jobs} at a time; {exe}; python {python}", flush=True)
    start = time.monotonic()

    def one(case: dict) -> dict:
        result = run_case(case, exe, python, args.timeout, args.case_timeout)
        print(f"  {case['id']}: {result['predicted']} ({result['seconds']} s)", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, cases))
    summary = summarize(results)
    summary["wall_s"] = round(time.monotonic() - start, 1)
    print(f"\nwall time {summary['wall_s']} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
