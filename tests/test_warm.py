"""Warm interpreters: runs forked from an interpreter that imported torch once, and the caches they share.

The fidelity tests run small scripts as recorded runs of a case (the test interpreter, torch on CPU) and
compare a forked child with a fresh process. The masking test plants a bug in an Inductor lowering of
a torch checkout, reproduces it through the MCP server (forked runs, Inductor's FX-graph and AOTAutograd
caches on in the case's cache directory), requires the debug artifacts to come from a cold compile
while those caches are warm, fixes the lowering, and requires the next runs to see the fix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from mcp import Client
from planted_bugs import PLANTED, plant, unplant
from torch_checkout import TorchCheckout, build_torch_checkout

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.execution import warm
from pt2_bug_basher.execution.pytest.session import run_pytest
from pt2_bug_basher.execution.runs import execute
from pt2_bug_basher.execution.warm import WarmRequest
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.report.views import run_view

pytestmark = pytest.mark.anyio

FORKED = "<child forked from "

PROBE = '''\
import os, random, sys
print(repr({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "stdin": sys.stdin.read(),
            "torch": "torch" in sys.modules, "random": random.random(), "main": __name__, "file": __file__}))
'''


@pytest.fixture
def case(mini):
    """A case of the test interpreter, whose torch (the probe says) cannot use CUDA."""
    case_id = mini.new_case(torch_env={"cuda_available": False, "gpus": []})
    yield mini.store, mini.store.get_case(case_id), mini.repo
    warm.stop_all(mini.store)


def _probe_output(result) -> dict:
    import ast

    return ast.literal_eval(result.stdout_text().strip().splitlines()[-1])


async def test_a_forked_run_looks_like_a_fresh_interpreter_and_says_it_was_forked(case):
    store, record, repo = case
    script = repo / "probe_env.py"
    script.write_text(PROBE)
    argv = [record.python, str(script), "an-arg"]
    fresh = await execute(store, record, argv, tool="run_with_logs", cwd=repo)
    first = await execute(store, record, argv, tool="run_with_logs", cwd=repo, warm=WarmRequest())
    second = await execute(store, record, argv, tool="run_with_logs", cwd=repo, warm=WarmRequest())
    seen = [_probe_output(r) for r in (fresh, first, second)]
    for field in ("argv", "path0", "cwd", "stdin", "main", "file"):
        assert seen[0][field] == seen[1][field] == seen[2][field], (field, seen)
    assert seen[0]["stdin"] == "" and seen[0]["main"] == "__main__"
    assert not seen[0]["torch"] and seen[1]["torch"]  # the warm interpreter had imported torch already
    assert seen[1]["random"] != seen[2]["random"]  # reseeded in each child, as a new interpreter would be
    runs = {r.run_id: r for r in store.runs(record.case_id)}
    assert runs[fresh.run_id].argv[0] == record.python
    for forked in (first, second):
        recorded = runs[forked.run_id]
        assert recorded.argv[0].startswith(FORKED) and recorded.argv[1:] == argv[1:]
        assert recorded.pid not in (None, os.getpid()) and recorded.status == "finished"
    server_run = runs[runs[first.run_id].argv[0][len(FORKED):-1]]  # the warm interpreter is a recorded run too
    assert "forkserver.py" in server_run.argv[1] and server_run.argv[0] == record.python
    assert runs[second.run_id].argv[0] == runs[first.run_id].argv[0]  # one interpreter served both


async def test_an_interpreter_that_exited_is_reaped_and_its_run_closed_at_any_cases_next_run(case, mini):
    """One case's warm interpreter idles out (here: killed); the next warm run of another case reaps it and
    closes its recorded run, so a long-lived server keeps no zombie and no run marked running."""
    import signal

    store, record, repo = case
    script = repo / "probe_env.py"
    script.write_text(PROBE)
    first = await execute(store, record, [record.python, str(script)], tool="t", cwd=repo, warm=WarmRequest())
    server_run = store.get_run(store.get_run(first.run_id).argv[0][len(FORKED):-1])
    assert server_run.status == "running" and server_run.pid
    os.kill(server_run.pid, signal.SIGKILL)
    for _ in range(100):
        if Path(f"/proc/{server_run.pid}/stat").read_text().split(")")[1].split()[0] == "Z":
            break
        await anyio.sleep(0.05)
    other = store.get_case(mini.new_case(torch_env={"cuda_available": False, "gpus": []}))
    await execute(store, other, [other.python, str(script)], tool="t", cwd=repo, warm=WarmRequest())
    assert not Path(f"/proc/{server_run.pid}").exists()  # reaped, not left a zombie
    closed = store.get_run(server_run.run_id)
    assert closed.status == "finished" and closed.signal == "signal 9", closed


async def test_exit_codes_tracebacks_and_timeouts_of_forked_runs(case):
    store, record, repo = case
    (repo / "exits.py").write_text("import sys\nprint('bye')\nsys.exit(3)\n")
    (repo / "raises.py").write_text("def inner():\n    raise ValueError('planted failure')\n\ninner()\n")
    (repo / "sleeps.py").write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(120)\n")
    exited = await execute(store, record, [record.python, str(repo / "exits.py")], tool="t", cwd=repo,
                           warm=WarmRequest())
    assert exited.outcome.exit_code == 3 and exited.stdout_text().strip() == "bye"
    raised = await execute(store, record, [record.python, str(repo / "raises.py")], tool="t", cwd=repo,
                           warm=WarmRequest())
    stderr = raised.stderr_text()
    assert raised.outcome.exit_code == 1
    assert stderr.strip().splitlines()[-1] == "ValueError: planted failure"
    assert 'raises.py", line 4, in <module>' in stderr and "forkserver" not in stderr and "launcher" not in stderr
    slept = await execute(store, record, [record.python, str(repo / "sleeps.py")], tool="t", cwd=repo,
                          timeout_s=3, warm=WarmRequest())
    assert slept.outcome.timed_out and slept.stdout_text().strip() == "sleeping"
    assert slept.outcome.duration_s < 30
    from pt2_bug_basher.execution.runner import still_running

    assert not still_running(slept.outcome.pid)
    assert all(store.get_run(r.run_id).argv[0].startswith(FORKED) for r in (exited, raised, slept))


async def test_runs_that_must_be_fresh_processes_are(case):
    store, record, repo = case
    (repo / "sets_env.py").write_text("import os\nos.environ['TORCHINDUCTOR_X'] = '1'\nimport torch\n")
    (repo / "uses_cuda.py").write_text("import torch\nprint(torch.ones(1, device='cuda'))\n")
    (repo / "plain.py").write_text("print('plain')\n")
    (repo / "env_helper.py").write_text("import os\nos.environ.setdefault('TORCH_LOGS', '+dynamo')\n")
    (repo / "via_helper.py").write_text("import env_helper\nimport torch\nprint(torch.__version__)\n")
    for name in ("sets_env.py", "uses_cuda.py", "via_helper.py"):
        ran = await execute(store, record, [record.python, str(repo / name)], tool="t", cwd=repo, warm=WarmRequest())
        assert store.get_run(ran.run_id).argv[0] == record.python, name
    with_cuda = store.create_case(str(repo), record.python, {"torch": {"cuda_available": True}})
    ran = await execute(store, with_cuda, [record.python, str(repo / "plain.py")], tool="t", cwd=repo,
                        warm=WarmRequest())
    assert store.get_run(ran.run_id).argv[0] == record.python  # a torch that can use CUDA: never forked
    plain = await execute(store, record, [record.python, str(repo / "plain.py")], tool="t", cwd=repo,
                          warm=WarmRequest())
    assert store.get_run(plain.run_id).argv[0].startswith(FORKED)  # the same case's harmless script is forked
    # A Dynamo/Inductor variable the imports did not read is set in the child (the compile-off run) ...
    (repo / "shows_env.py").write_text("import os\nprint(os.environ.get('TORCHDYNAMO_DISABLE'), "
                                       "os.environ.get('TORCHINDUCTOR_MAX_AUTOTUNE'))\n")
    shows = [record.python, str(repo / "shows_env.py")]
    off = await execute(store, record, shows, tool="t", cwd=repo, env_add={"TORCHDYNAMO_DISABLE": "1"},
                        warm=WarmRequest())
    assert store.get_run(off.run_id).argv[0] == store.get_run(plain.run_id).argv[0]
    assert off.stdout_text().split() == ["1", "None"]
    # ... one that torch's config read when it was imported makes the run a new process.
    tuned = await execute(store, record, shows, tool="t", cwd=repo, env_add={"TORCHINDUCTOR_MAX_AUTOTUNE": "1"},
                          warm=WarmRequest())
    assert store.get_run(tuned.run_id).argv[0] == record.python and tuned.stdout_text().split() == ["None", "1"]
    assert warm.unsafe_source("import os\nos.environ |= {'TORCH_LOGS': 'dynamo'}\n") == "it writes the environment"
    assert warm.unsafe_source("x = 1  # on cuda later\nos.environ.get('A')\n") is None  # comments and reads


LOGGED = """\
import torch


def f(x):
    return torch.sin(x) + 1


torch.compile(f, backend="eager")(torch.ones(3))
"""


async def test_a_run_with_torch_logs_forks_from_the_plain_interpreter_and_logs_like_a_new_one(case):
    store, record, repo = case
    script = repo / "logged.py"
    script.write_text(LOGGED)
    argv = [record.python, str(script)]
    logs = {"TORCH_LOGS": "graph_code"}
    plain = await execute(store, record, argv, tool="t", cwd=repo, warm=WarmRequest())
    fresh = await execute(store, record, argv, tool="t", cwd=repo, env_add=logs)
    forked = await execute(store, record, argv, tool="t", cwd=repo, env_add=logs, warm=WarmRequest())
    after = await execute(store, record, argv, tool="t", cwd=repo, warm=WarmRequest())
    argv0 = {r.run_id: store.get_run(r.run_id).argv[0] for r in (plain, fresh, forked, after)}
    assert argv0[fresh.run_id] == record.python
    assert argv0[plain.run_id].startswith(FORKED) and argv0[forked.run_id] == argv0[plain.run_id] == argv0[after.run_id]

    def traced(run) -> list[str]:
        return [ln.split("] ", 1)[-1] for ln in run.stderr_text().splitlines() if "TRACED GRAPH" in ln]

    assert traced(fresh) and traced(forked) == traced(fresh), (fresh.stderr_text(), forked.stderr_text())
    assert not traced(plain) and not traced(after)  # the setting stays in the child that asked for it


async def test_a_run_with_dynamo_s_verbose_switch_forks_with_the_value_its_import_would_read(case):
    """TORCHDYNAMO_VERBOSE is read once, into torch._dynamo.config.verbose: the child sets that value."""
    store, record, repo = case
    script = repo / "verbose.py"
    script.write_text("import torch._dynamo.config as c\nprint(c.verbose)\n")
    argv = [record.python, str(script)]
    plain = await execute(store, record, argv, tool="t", cwd=repo, warm=WarmRequest())
    verbose = await execute(store, record, argv, tool="t", cwd=repo, env_add={"TORCHDYNAMO_VERBOSE": "1"},
                            warm=WarmRequest())
    after = await execute(store, record, argv, tool="t", cwd=repo, warm=WarmRequest())
    argv0 = {r.run_id: store.get_run(r.run_id).argv[0] for r in (plain, verbose, after)}
    assert argv0[verbose.run_id].startswith(FORKED) and len(set(argv0.values())) == 1, argv0
    assert [r.stdout_text().split() for r in (plain, verbose, after)] == [["False"], ["True"], ["False"]]


async def test_pytest_runs_fork_with_the_report_plugin_appended(case):
    store, record, repo = case
    first = await run_pytest(store, record, ["test/test_ops.py"], cwd=repo, rootdir=repo, tool="run_tests",
                             timeout_s=300)
    second = await run_pytest(store, record, ["test/test_ops.py::TestOps::test_halve"], cwd=repo, rootdir=repo,
                              tool="run_tests", timeout_s=300)
    assert [t.outcome for t in first.report.tests] == ["passed", "passed"]
    assert [(t.node_id, t.outcome) for t in second.report.tests] == [("test/test_ops.py::TestOps::test_halve",
                                                                     "passed")]
    recorded = [store.get_run(r.run_id).argv for r in (first, second)]
    assert all(argv[0].startswith(FORKED) and argv[1:3] == ["-m", "pytest"] for argv in recorded)
    assert recorded[0][0] == recorded[1][0]


# --------------------------------------------------------------------------------------------
# A fix to a lowering is never masked: not by Inductor's caches, not by a warm interpreter.

CACHE_REPRO = '''\
import torch
from torch._dynamo.utils import counters


def f(x):
    return torch.pow(x, 3) + 1


x = torch.randn(16)
ok = torch.allclose(torch.compile(f)(x), f(x))
print("CACHES " + repr({**counters["inductor"], **counters["aot_autograd"]}))
assert ok, "torch.pow(x, 3) compiled differs from eager"
'''


@pytest.fixture(scope="module")
def lowering_checkout(tmp_path_factory: pytest.TempPathFactory) -> TorchCheckout:
    made = build_torch_checkout(tmp_path_factory.mktemp("warm"))
    plant(made.checkout, PLANTED["inductor_lowering"])
    (made.checkout / "repro_caches.py").write_text(CACHE_REPRO)
    return made


def _caches(store, run_id: str) -> dict:
    import ast

    run = store.get_run(run_id)
    line = next(ln for ln in Path(run.stdout_path).read_text().splitlines() if ln.startswith("CACHES "))
    return ast.literal_eval(line[len("CACHES "):])


@pytest.mark.slow
async def test_a_fix_to_a_lowering_is_seen_by_the_next_run_despite_caches_and_warm_interpreters(lowering_checkout):
    checkout, bug = lowering_checkout.checkout, PLANTED["inductor_lowering"]
    server = create_server(ServerConfig.from_options(repo=checkout))
    store = server.state.store  # type: ignore[attr-defined]
    try:
        async with Client(server) as client:
            env = (await client.call_tool("check_env", {"python": str(lowering_checkout.python),
                                                        "repo": str(checkout)})).structured_content
            args = {"case_id": env["case_id"], "script": "repro_caches.py", "repeat": 2}
            before = (await client.call_tool("run_with_logs", args)).structured_content
            again = (await client.call_tool("run_with_logs", args)).structured_content
            assert before["reproduced"] and again["reproduced"], json.dumps(before)[:2000]
            assert "compiled differs" in before["failure"]["message"]
            assert any("forked from the case's warm interpreter" in note for note in before["notes"]), before["notes"]
            # The same graph, compiled once per case: the second call's runs hit both caches.
            hits = _caches(store, again["runs"][0]["run_id"])
            assert hits.get("fxgraph_cache_hit") == 1 and hits.get("autograd_cache_hit") == 1, hits
            # A run that needs a cold compile still gets one with the caches warm: the debug artifacts are
            # written by a new process (not forked) that compiles the graph and generates its code.
            for step in ("test", "main_check"):
                await client.call_tool("waive_step", {"case_id": env["case_id"], "step": step,
                                                      "reason": "the cache-masking test needs only the artifacts"})
            artifacts = (await client.call_tool("collect_debug_artifacts", {"case_id": env["case_id"],
                                                                            "script": "repro_caches.py"})
                         ).structured_content
            assert artifacts["graph_count"] >= 1 and any("output_code.py" in g["files"] for g in artifacts["graphs"])
            assert store.get_run(artifacts["run_id"]).argv[0] == store.get_case(env["case_id"]).python
            assert _caches(store, artifacts["run_id"]).get("fxgraph_cache_hit") is None
            unplant(checkout, bug)
            after = (await client.call_tool("run_with_logs", args)).structured_content
            assert not after["reproduced"] and all(r["exit_code"] == 0 for r in after["runs"]), json.dumps(after)[:2000]
            missed = _caches(store, after["runs"][0]["run_id"])
            assert missed.get("fxgraph_cache_miss") == 1 and not missed.get("fxgraph_cache_hit"), missed
            forked_from = [{store.get_run(r["run_id"]).argv[0] for r in result["runs"]}
                           for result in (before, again, after)]
            assert all(len(f) == 1 and next(iter(f)).startswith(FORKED) for f in forked_from), forked_from
            assert forked_from[0] == forked_from[1] != forked_from[2]  # the warm interpreter was replaced
            old_server = store.get_run(next(iter(forked_from[0]))[len(FORKED):-1])
            # stopped by the server, not a crash: no signal on record, and the report says what it was
            assert old_server.status == "stopped" and old_server.signal is None and old_server.exit_code is None
            view = run_view(old_server, 0.0)
            assert view.kind == "stopped" and "warm interpreter" in view.outcome
    finally:
        warm.stop_all(store)
