"""The source reducer against a straightforward sequential pysource-minimize over fresh processes.

Same repro, same predicate (the case's oracle, `analysis.compare.Oracle` with CANDIDATE rules), same budget:

* baseline: `pysource_minimize.minimize(source, checker)`, the checker running each candidate as
  `python candidate.py` in a new process, one at a time, no cache;
* ours: `SourceReducer` (dead code, parallel statement pass, pysource-minimize, constants) on the
  fork server (torch and Dynamo imported once, as minify does), `usable_cpus()` candidates at a
  time, cached by content.

Prints candidate evaluations, evaluations per second, final size and time for each, side by side,
and the ratios. The machine may be shared: run it when it is quiet, and read both columns.
    python bench/bench_source_reducer.py [--script tests/data/minify/padded_graph_break.py] [--budget 150]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))

from mcp import Client  # noqa: E402

from pt2_bug_basher.analysis.compare import CANDIDATE  # noqa: E402
from pt2_bug_basher.case.config import ServerConfig  # noqa: E402
from pt2_bug_basher.case.store import Store  # noqa: E402
from pt2_bug_basher.execution.cpus import usable_cpus  # noqa: E402
from pt2_bug_basher.mcp_server.server import create_server  # noqa: E402
from pt2_bug_basher.reduce.evaluate import ForkServerEvaluator, FreshEvaluator  # noqa: E402
from pt2_bug_basher.reduce.ladder import load_reference, run_timeout  # noqa: E402
from pt2_bug_basher.reduce.minify import reducer_preload  # noqa: E402
from pt2_bug_basher.reduce.source import SourceReducer, normalise_source, size_of  # noqa: E402


async def nothing(_message: str) -> None:
    return None


async def setup(tmp: Path, script_src: Path):
    repo = tmp / "repo"
    repo.mkdir()
    script = repo / script_src.name
    shutil.copyfile(script_src, script)
    config = ServerConfig(state_dir=tmp / "state", default_repo=repo, allowed_roots=(tmp,))
    async with Client(create_server(config)) as client:  # the case reproduced as an agent would
        env = await client.call_tool("check_env", {"python": sys.executable})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 2, "script": str(script)})
        assert run.structured_content["reproduced"], run.structured_content
    store = Store(config.state_dir)
    case = store.get_case(case_id)
    return store, case, load_reference(store, case), script


async def baseline(store, case, ref, script: Path, budget: float, work: Path) -> dict:
    """pysource-minimize, sequential, a fresh interpreter per candidate, no cache."""
    from pysource_minimize import StopMinimization, minimize

    evaluator = FreshEvaluator(case, ref.env, parallel=1)
    deadline = time.monotonic() + budget
    state = {"evals": 0, "best": None, "exhausted": False}
    counter = [0]

    async def check(source: str) -> bool:
        counter[0] += 1
        cand = work / f"c{counter[0]}"
        cand.mkdir(parents=True)
        path = cand / script.name
        path.write_text(source)
        result = await evaluator.run(path, ref.args, cwd=script.parent, out_dir=cand,
                                     timeout_s=run_timeout(ref, 3.0, 30.0), extra_path=[str(script.parent)])
        state["evals"] += 1
        ok = ref.oracle(CANDIDATE, path).judge(result).matches
        if ok and (state["best"] is None or len(source) < len(state["best"])):
            state["best"] = source
        return ok

    def checker(source: str) -> bool:
        if time.monotonic() > deadline:
            state["exhausted"] = True
            raise StopMinimization
        return anyio.from_thread.run(check, source)

    started = time.monotonic()
    source = script.read_text()
    try:
        await anyio.to_thread.run_sync(lambda: minimize(source, checker, retries=0))
    except Exception as exc:  # noqa: BLE001
        print(f"baseline stopped: {type(exc).__name__}: {exc}")
    wall = time.monotonic() - started
    best = state["best"] or normalise_source(source)
    return {"evals": state["evals"], "wall": wall, "size": size_of(best), "exhausted": state["exhausted"]}


async def ours(store, case, ref, script: Path, budget: float, work: Path) -> dict:
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        evaluator = ForkServerEvaluator(store, case, ref.env, work, parallel=usable_cpus(),
                                        preload=reducer_preload(script.read_text()))
        await evaluator.start(group)
        reducer = SourceReducer(ref, evaluator, work, cwd=script.parent, name=script.name,
                                timeout_s=run_timeout(ref, 3.0, 30.0), deadline=started + budget, progress=nothing)
        try:
            best = await reducer.run(script.read_text())
        finally:
            await evaluator.aclose()
    wall = time.monotonic() - started
    s = reducer.stats
    return {"evals": s.evaluations, "wall": wall, "size": size_of(best or ""), "exhausted": s.budget_exhausted,
            "cached": s.cache_hits, "static": s.static_rejects, "parallel": evaluator.parallel}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--script", default=str(ROOT / "tests" / "data" / "minify" / "padded_graph_break.py"))
    parser.add_argument("--budget", type=float, default=150.0)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        store, case, ref, script = await setup(tmp, Path(opts.script))
        print(f"repro {script.name}: {size_of(script.read_text())}, one run {ref.duration_s:.1f}s, "
              f"signature {ref.signature}; budget {opts.budget:.0f}s each, {usable_cpus()} cores")
        b = await baseline(store, case, ref, script, opts.budget, tmp / "baseline")
        o = await ours(store, case, ref, script, opts.budget, tmp / "ours")
    rate_b, rate_o = b["evals"] / b["wall"], o["evals"] / o["wall"]
    print(f"{'':28}{'sequential+fresh':>18}{'ours':>14}{'ratio':>10}")
    print(f"{'candidate evaluations':28}{b['evals']:>18}{o['evals']:>14}{o['evals'] / max(1, b['evals']):>10.2f}")
    print(f"{'evaluations per second':28}{rate_b:>18.3f}{rate_o:>14.3f}{rate_o / max(1e-9, rate_b):>10.2f}")
    for unit in ("bytes", "lines", "statements"):
        print(f"{'final ' + unit:28}{b['size'][unit]:>18}{o['size'][unit]:>14}"
              f"{o['size'][unit] / max(1, b['size'][unit]):>10.2f}")
    print(f"{'wall seconds':28}{b['wall']:>18.1f}{o['wall']:>14.1f}{o['wall'] / max(1e-9, b['wall']):>10.2f}")
    print(f"{'budget ran out':28}{str(b['exhausted']):>18}{str(o['exhausted']):>14}")
    print(f"ours: {o['cached']} cache hits, {o['static']} rejected without running, {o['parallel']} at a time")


if __name__ == "__main__":
    anyio.run(main)
