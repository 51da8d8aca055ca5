"""Server start to a tools/list answer over stdio: pt2-bug-basher against the SDK's minimal one-tool server.

Both are started as fresh processes by a real MCP client, alternately, N times; prints medians and the ratio.
Goal: ratio <= 1.1 (nothing heavy is imported at start).
    python bench/bench_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

MINIMAL = '''
from mcp.server import MCPServer
server = MCPServer("minimal")

@server.tool()
def ping(x: int) -> int:
    """Echo."""
    return x

server.run("stdio")
'''


async def time_tools_list(params: StdioServerParameters) -> tuple[float, int]:
    started = time.perf_counter()
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        elapsed = time.perf_counter() - started
    return elapsed, len(tools)


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        minimal = Path(tmp) / "minimal.py"
        minimal.write_text(MINIMAL)
        ours = StdioServerParameters(
            command=sys.executable,
            args=["-m", "pt2_bug_basher", "serve", "--state-dir", f"{tmp}/state", "--repo", tmp],
            env=dict(os.environ),
        )
        base = StdioServerParameters(command=sys.executable, args=[str(minimal)], env=dict(os.environ))
        await time_tools_list(ours)  # warm the file cache for both
        await time_tools_list(base)
        ours_t, base_t = [], []
        n_ours = n_base = 0
        for _ in range(runs):
            t, n_ours = await time_tools_list(ours)
            ours_t.append(t)
            t, n_base = await time_tools_list(base)
            base_t.append(t)
    mo, mb = statistics.median(ours_t), statistics.median(base_t)
    print(f"pt2-bug-basher ({n_ours} tools): median {mo * 1000:.0f} ms over {runs} starts")
    print(f"SDK minimal server ({n_base} tool): median {mb * 1000:.0f} ms over {runs} starts")
    print(f"ratio = {mo / mb:.3f}  (goal <= 1.1)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    anyio.run(main, parser.parse_args().runs)
