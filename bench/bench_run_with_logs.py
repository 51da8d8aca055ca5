"""run_with_logs against the bare interpreter, side by side in one run.

1. overhead: run_with_logs(repeat=1) on a real torch.compile repro vs `python script.py` with the same
   environment (median of N alternating runs each); goal <= 1.05x.
2. parallel repeats: run_with_logs(repeat=3) vs three sequential bare runs: the speed-up on this machine.
    python bench/bench_run_with_logs.py [--runs 5] [--script examples/graph_break_fullgraph.py]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.execution.runs import BASE_ENV
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.steps.environment import start_case

ROOT = Path(__file__).resolve().parents[1]
DYNAMO_SCRIPT = ROOT / "examples" / "recompile_limit.py"


def bare(script: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, str(script)], cwd=script.parent, env={**os.environ, **BASE_ENV},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return time.perf_counter() - started


async def main(runs: int, script: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = ServerConfig(Path(tmp) / "state", ROOT, (ROOT, Path(tmp)))
        case = await start_case(__import__("pt2_bug_basher.case.store", fromlist=["Store"]).Store(config.state_dir),
                                ROOT, python=sys.executable)
        server = create_server(config)
        async with Client(server) as client:
            async def ours(repeat: int) -> float:
                started = time.perf_counter()
                result = await client.call_tool("run_with_logs", {"case_id": case.case_id, "script": str(script),
                                                                  "repeat": repeat})
                assert not result.is_error, result.content
                return time.perf_counter() - started

            bare(script)
            await ours(1)
            bare_t, ours_t = [], []
            for _ in range(runs):
                bare_t.append(await anyio.to_thread.run_sync(bare, script))
                ours_t.append(await ours(1))
            dyn = await client.call_tool("run_with_logs", {"case_id": case.case_id, "script": str(DYNAMO_SCRIPT),
                                                           "repeat": 1, "logs": "+dynamo"})
            raw_bytes = dyn.structured_content["runs"][0]["output_bytes"]
            result_bytes = len(dyn.content[0].text.encode())
            run_id = dyn.structured_content["runs"][0]["run_id"]
            classified = await client.call_tool("classify_error", {"run_id": run_id})
            classify_bytes = len(classified.content[0].text.encode())
            seq3, par3 = [], []
            for _ in range(max(1, runs // 2)):
                seq3.append(sum([await anyio.to_thread.run_sync(bare, script) for _ in range(3)]))
                par3.append(await ours(3))
    mb, mo = statistics.median(bare_t), statistics.median(ours_t)
    print(f"script: {script.relative_to(ROOT)}; {os.cpu_count()} cores; {runs} runs each, alternating")
    print(f"bare python script.py      : median {mb:.2f} s")
    print(f"run_with_logs(repeat=1)    : median {mo:.2f} s")
    print(f"overhead ratio             = {mo / mb:.3f}  (goal <= 1.05)")
    ms, mp = statistics.median(seq3), statistics.median(par3)
    print(f"3 sequential bare runs     : median {ms:.2f} s")
    print(f"run_with_logs(repeat=3)    : median {mp:.2f} s")
    print(f"parallel speed-up          = {ms / mp:.2f}x")
    print(f"+dynamo on {DYNAMO_SCRIPT.name}: raw output {raw_bytes} bytes -> run_with_logs result {result_bytes} bytes "
          f"({result_bytes / raw_bytes:.3f}), classify_error result {classify_bytes} bytes "
          f"({classify_bytes / raw_bytes:.3f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--script", default=str(ROOT / "examples" / "graph_break_fullgraph.py"))
    args = parser.parse_args()
    anyio.run(main, args.runs, Path(args.script).resolve())
