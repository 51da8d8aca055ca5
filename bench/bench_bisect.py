"""localize on bugs planted in a torch checkout, beside PyTorch's own sequential compiler bisector.

For each recipe in tests/planted_bugs.py: build (once) a develop-style checkout of the installed
torch's Python sources, plant the bug on a branch from the clean commit, then, one after the other
on the same machine,
  - ours: a case through the MCP server in-process (check_env, run_with_logs(repeat=2), localize),
    timing localize alone;
  - baseline: `python -m torch._inductor.compiler_bisector run <python> repro.py` with a private
    TORCHINDUCTOR_CACHE_DIR, timed whole.
Prints the ladder's layer, both bisection results, the rank of the guilty function among localize's
suspects, both wall times and their ratio (goal: localize <= 0.5x the bisector).

    python bench/bench_bisect.py [--only NAME ...] [--json OUT] [--skip-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
# --server-src DIR: the package of another commit's tree (bench_localize_then_now.py), read before any import of it
SERVER_SRC = next((sys.argv[i + 1] for i, arg in enumerate(sys.argv[:-1]) if arg == "--server-src"), None)
sys.path[:0] = [SERVER_SRC or str(ROOT / "server"), str(ROOT / "tests")]

from planted_bugs import PLANTED, PlantedBug, plant  # noqa: E402
from torch_checkout import build_torch_checkout, git  # noqa: E402

from pt2_bug_basher.case.config import ServerConfig  # noqa: E402

BISECTOR_TIMEOUT_S = 3600
# localize on an Inductor mutant takes minutes here; a stall, far longer
STALL_REPORT_S = float(os.environ.get("BENCH_STALL_REPORT_S", 900.0))
# set to print localize's progress messages, timed, to stderr: where a cut run spent its time
TRACE_PROGRESS = bool(os.environ.get("BENCH_TRACE_PROGRESS"))


def rank(suspects: list[dict], guilty: str) -> int | None:
    for i, suspect in enumerate(suspects, 1):
        name = suspect["function"]
        if name == guilty or name.endswith("." + guilty) or guilty.endswith("." + name):
            return i
    return None


async def ours(root: Path, checkout: Path, python: Path, script: Path, state: Path | None = None) -> dict:
    from mcp import Client

    from pt2_bug_basher.mcp_server.server import create_server

    config = ServerConfig(state or root / "state", checkout, (root,))
    async with Client(create_server(config)) as client:
        env = await client.call_tool("check_env", {"python": str(python), "repo": str(checkout)})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script), "repeat": 2})
        if not (run.structured_content or {}).get("reproduced"):
            return {"error": "did not reproduce: " + run.content[0].text[:400]}
        started = time.monotonic()

        async def trace(progress: float, total: float | None, message: str | None) -> None:
            if TRACE_PROGRESS and message:
                print(f"[{time.monotonic() - started:7.1f}s] {message}", file=sys.stderr, flush=True)

        async with anyio.create_task_group() as group:
            group.start_soon(_stall_report, STALL_REPORT_S)
            result = await client.call_tool("localize", {"case_id": case_id}, progress_callback=trace)
            group.cancel_scope.cancel()
        seconds = time.monotonic() - started
    if result.is_error:
        return {"error": result.content[0].text[:400], "seconds": seconds}
    data = result.structured_content
    return {"seconds": round(seconds, 1), "layer": data["layer"],
            "bisection": (data.get("bisection") or {}).get("result"),
            "suspects": [f"{s['function']} ({s['file']}:{s['line']})" for s in data["suspects"]],
            "raw_suspects": data["suspects"]}


async def _stall_report(after_s: float) -> None:
    """A localize still running after `after_s`: every task's chain of awaits to stderr, to see what it waits on."""
    await anyio.sleep(after_s)
    try:
        from pt2_bug_basher.execution.stalls import task_chains
    except ImportError:  # an older tree (--server-src) without it
        print(f"localize still running after {after_s:.0f} s", file=sys.stderr)
        return
    print(f"localize still running after {after_s:.0f} s; its tasks:", *task_chains(), sep="\n", file=sys.stderr)


def baseline(root: Path, python: Path, script: Path) -> dict:
    cache = tempfile.mkdtemp(prefix="bisector-cache-", dir=root)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    proc = subprocess.Popen([str(python), "-m", "torch._inductor.compiler_bisector", "run", str(python), str(script)],
                            cwd=script.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=BISECTOR_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
    seconds = time.monotonic() - started
    found = re.findall(r"Bisection complete: (.*)", out)
    return {"seconds": round(seconds, 1), "result": found[-1] if found else out.strip().splitlines()[-1:]}


def run_one(root: Path, checkout: Path, python: Path, bug: PlantedBug, skip_baseline: bool) -> dict:
    git(checkout, "checkout", "-q", "-f", "-B", f"bench-{bug.name}", "clean")
    plant(checkout, bug)
    script = root / f"repro_{bug.name}.py"
    script.write_text(bug.repro)
    case_root = root / bug.name
    case_root.mkdir(exist_ok=True)
    mine = anyio.run(ours, root, checkout, python, script)
    mine["rank"] = rank(mine.pop("raw_suspects", []), bug.guilty)
    theirs = {} if skip_baseline else baseline(root, python, script)
    ratio = round(mine["seconds"] / theirs["seconds"], 2) if theirs and mine.get("seconds") else None
    return {"bug": bug.name, "layer_expected": bug.layer, "guilty": bug.guilty, "ours": mine, "bisector": theirs,
            "ratio": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(PLANTED))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--server-src", help="run localize from this directory's pt2_bug_basher (an older tree's "
                                             "`server/`), not the working tree's")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-bisect-"))
    made = build_torch_checkout(root)
    rows = []
    for name in args.only or list(PLANTED):
        row = run_one(root, made.checkout, made.python, PLANTED[name], args.skip_baseline)
        rows.append(row)
        mine, theirs = row["ours"], row["bisector"]
        print(f"\n== {name}: expected layer {row['layer_expected']}, guilty {row['guilty']}")
        print(f"   localize  {mine.get('seconds')} s  layer={mine.get('layer')}  {mine.get('bisection')}")
        print(f"             guilty function's rank among suspects: {mine.get('rank')}")
        for line in mine.get("suspects", [])[:5]:
            print(f"               - {line}")
        if mine.get("error"):
            print(f"   ERROR {mine['error']}")
        if theirs:
            print(f"   bisector  {theirs['seconds']} s  {theirs['result']}")
            print(f"   ratio localize/bisector: {row['ratio']}")
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
