"""The FX minifier as minify runs it against PyTorch's raw minifier_launcher.py, same launcher file.

One dump run writes minifier_launcher.py (TORCHDYNAMO_REPRO_AFTER=aot, level 2, or 4 for an
accuracy failure). Then, on copies of that same file:

* raw: `python minifier_launcher.py minify` as a user runs it (a new interpreter per trial);
* ours: the same command under `_probes/fx_driver.py` (trials forked from a server that has
  torch and Inductor imported, check string from the case's signature), as `minify` runs it.

Prints the wall time of the minification, the trials, the final node count of each, and ratios.
The machine may be shared: run it when it is quiet, and read both columns.
    python bench/bench_minify.py [--script tests/data/minify/inductor_compile_error.py] [--runs 1]
    python bench/bench_minify.py --script examples/accuracy_mismatch.py
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from mcp import Client  # noqa: E402

from pt2_bug_basher.case.config import ServerConfig  # noqa: E402
from pt2_bug_basher.case.store import Store  # noqa: E402
from pt2_bug_basher.execution.runner import run_process  # noqa: E402
from pt2_bug_basher.execution.runs import execute  # noqa: E402
from pt2_bug_basher.mcp_server.server import create_server  # noqa: E402
from pt2_bug_basher.reduce.evaluate import ForkServerEvaluator  # noqa: E402
from pt2_bug_basher.reduce.fx import _ENV_LINE, FX_DRIVER, _newest_launcher, check_string, repro_level  # noqa: E402
from pt2_bug_basher.reduce.ladder import load_reference  # noqa: E402


def final_nodes(text: str) -> int | None:
    found = [int(n) for n in re.findall(r"Writing checkpoint with (\d+) nodes", text)]
    return min(found) if found else None


def queries(text: str) -> int | None:
    m = re.search(r"Made (\d+) queries", text)
    return int(m.group(1)) if m else None


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", default=str(ROOT / "tests" / "data" / "minify" / "inductor_compile_error.py"))
    parser.add_argument("--runs", type=int, default=1)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        repo = tmp / "repo"
        repo.mkdir()
        script = repo / Path(opts.script).name
        shutil.copyfile(opts.script, script)
        config = ServerConfig(state_dir=tmp / "state", default_repo=repo, allowed_roots=(tmp,))
        async with Client(create_server(config)) as client:  # the case reproduced as an agent would
            started = await client.call_tool("check_env", {"python": sys.executable})
            case_id = started.structured_content["case_id"]
            rep = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 2, "script": str(script)})
            assert rep.structured_content["reproduced"], rep.structured_content
        store = Store(config.state_dir)
        case = store.get_case(case_id)
        ref = load_reference(store, case)
        level = repro_level(ref)
        dump_dir = tmp / "dump"
        env = {"TORCHDYNAMO_REPRO_AFTER": "aot", "TORCHDYNAMO_REPRO_LEVEL": str(level),
               "TORCH_COMPILE_DEBUG_DIR": str(dump_dir), "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
        await execute(store, case, [sys.executable, str(script)], tool="bench", cwd=repo, env_add=env, timeout_s=300)
        launcher = _newest_launcher(dump_dir)
        assert launcher is not None, "no minifier_launcher.py was written"
        check = check_string(ref)
        print(f"repro {script.name} ({ref.category}, level {level}), check string {check!r}")
        rows = []
        for i in range(opts.runs):
            # raw: exactly what a user runs
            raw_dir = tmp / f"raw{i}"
            raw_dir.mkdir()
            raw_launcher = raw_dir / "minifier_launcher.py"
            shutil.copyfile(launcher, raw_launcher)
            started = time.monotonic()
            await run_process([sys.executable, str(raw_launcher), "minify"], cwd=raw_dir,
                              env={**os.environ, "TORCH_COMPILE_DEBUG_DIR": str(raw_dir)}, timeout_s=1800,
                              stdout_path=raw_dir / "out.log", stderr_path=raw_dir / "err.log")
            raw_s = time.monotonic() - started
            raw_text = (raw_dir / "err.log").read_text(errors="replace")
            # ours
            our_dir = tmp / f"ours{i}"
            our_dir.mkdir()
            our_launcher = our_dir / "minifier_launcher.py"
            text = launcher.read_text().replace(str(dump_dir), str(our_dir))
            our_launcher.write_text(text)
            started = time.monotonic()
            async with anyio.create_task_group() as group:
                server = ForkServerEvaluator(store, case, dict(_ENV_LINE.findall(text)), our_dir,
                                             preload=("torch", "torch._inductor.compile_fx"))
                await server.start(group)
                argv = [sys.executable, str(FX_DRIVER), "--launcher", str(our_launcher), "--status",
                        str(our_dir / "status.jsonl"), "--forkserver", str(server.socket_path)]
                if check:
                    argv += ["--check-str", check]
                argv += ["--", "minify"] + (["--check-str", check] if check else [])
                await run_process(argv, cwd=our_dir, env=dict(os.environ), timeout_s=1800,
                                  stdout_path=our_dir / "out.log", stderr_path=our_dir / "err.log")
                await server.aclose()
            ours_s = time.monotonic() - started
            our_text = (our_dir / "err.log").read_text(errors="replace")
            rows.append((raw_s, ours_s, queries(raw_text), queries(our_text), final_nodes(raw_text),
                         final_nodes(our_text)))
    print(f"{'run':>4}{'raw s':>9}{'ours s':>9}{'ratio':>8}{'raw trials':>12}{'our trials':>12}"
          f"{'raw nodes':>11}{'our nodes':>11}")
    for i, (raw_s, ours_s, rq, oq, rn, on) in enumerate(rows):
        print(f"{i:>4}{raw_s:>9.1f}{ours_s:>9.1f}{ours_s / raw_s:>8.2f}{str(rq):>12}{str(oq):>12}{str(rn):>11}"
              f"{str(on):>11}")
    print("ratio = ours / raw wall time of the minification (lower is better); nodes = final graph size")


if __name__ == "__main__":
    anyio.run(main)
