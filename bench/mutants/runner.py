"""The one place kill programs are run (switch to the sweep engine here once it lands)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "server")]

from pt2_bug_basher.execution.runner import run_captured  # noqa: E402

KILL_DIR = HERE / "kill"


def program_env(cache_dir: Path) -> dict[str, str]:
    """No compiled-graph caches: a mutated compiler must compile again."""
    return {**os.environ, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
            "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "PYTHONUNBUFFERED": "1"}


def run_programs(python: Path, programs: list[str], scratch: Path, timeout_s: float) -> tuple[list[dict], bool]:
    """Run the programs (names in kill/) in one interpreter until the first fails.

    Returns each program's result line from drive.py and whether the run timed out."""
    argv = ["nice", "-n", "10", str(python), str(HERE / "drive.py"), *[str(KILL_DIR / p) for p in programs]]

    async def go():
        return await run_captured(argv, cwd=scratch, env=program_env(scratch / "inductor-cache"),
                                  timeout_s=timeout_s, scratch_dir=scratch, cap=4 * 1024 * 1024)

    captured = anyio.run(go)
    results = [json.loads(line) for line in captured.stdout.splitlines() if line.startswith("{")]
    if not captured.outcome.timed_out and len(results) < len(programs) and \
            not any(r["outcome"] != "pass" for r in results):
        # the interpreter died (a segfault, an abort): the next program is the one that killed it
        results.append({"program": str(KILL_DIR / programs[len(results)]), "outcome": "crash",
                        "error": captured.outcome.describe_exit(), "traceback": captured.stderr[-20000:]})
    return results, captured.outcome.timed_out
