"""minify through a real MCP client: the source reducer and PyTorch's FX minifier, on real repros."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.mcp_server.server import create_server

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parent / "data" / "minify"


@pytest.fixture(scope="module")
def module_config(tmp_path_factory) -> ServerConfig:
    root = tmp_path_factory.mktemp("min")
    repo = root / "repo"
    shutil.copytree(EXAMPLES, repo / "examples")
    shutil.copytree(DATA, repo / "data")
    return ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))


async def reproduced(client: Client, script: Path) -> str:
    env = await client.call_tool("check_env", {"python": sys.executable})
    assert not env.is_error, env.content[0].text
    case_id = env.structured_content["case_id"]
    run = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 2, "script": str(script)})
    assert run.structured_content["reproduced"], run.structured_content
    return case_id


async def status_of(client: Client, case_id: str, step: str) -> str:
    flow = (await client.call_tool("get_workflow", {"case_id": case_id})).structured_content["case"]
    return {s["step"]: s["status"] for s in flow["steps"]}[step]


async def test_source_reducer_shrinks_a_padded_graph_break(module_config):
    script = module_config.default_repo / "data" / "padded_graph_break.py"
    server = create_server(module_config)
    progress: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message or "")

    async with Client(server) as client:
        case_id = await reproduced(client, script)
        result = await client.call_tool("minify", {"case_id": case_id, "mode": "auto", "budget_s": 50},
                                        progress_callback=on_progress)
        assert not result.is_error, result.content[0].text
        data = result.structured_content
        assert data["mode"] == "source" and "graph_break" in data["why_mode"]
        assert data["confirmed"] and data["comparison"] in ("signature", "exception")
        assert data["after"]["bytes"] < 0.5 * data["before"]["bytes"], data
        assert data["after"]["lines"] < data["before"]["lines"]
        reduced = Path(data["minimized_path"]).read_text()
        assert reduced.endswith("\n") and not reduced.endswith("\n\n")  # a file as an editor writes it
        for gone in ("UnusedBlock", "helper_never_called", "json", "512"):
            assert gone not in reduced, reduced
        assert "fullgraph=True" in reduced and "y.sum() > 0" in reduced.replace("(", "").replace(")", "") \
            or "sum()" in reduced
        # readable as a resource too
        body = await client.read_resource(data["resource"])
        assert body.contents[0].text == reduced
        assert data["source"]["candidates_run"] > 5 and data["source"]["evaluations_per_s"] > 0
        assert "reduce" in data["recorded"] and "register_test" in data["next_step"]
        assert await status_of(client, case_id, "reduce") == "done"
        # a budget that runs out returns the best so far, still confirmed to fail the same way
        short = (await client.call_tool("minify", {"case_id": case_id, "mode": "source", "budget_s": 10}))
        short_data = short.structured_content
    assert any("source reducer" in m for m in progress), progress
    assert short_data["budget_exhausted"] is True
    assert short_data["minimized_path"] and short_data["after"]["bytes"] <= short_data["before"]["bytes"]
    assert "budget ran out" in short_data["next_step"] or not short_data["confirmed"]
    assert len(short.content[0].text) < 8000


async def test_bad_arguments(module_config):
    async with Client(create_server(module_config)) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        case_id = env.structured_content["case_id"]
        gate = await client.call_tool("minify", {"case_id": case_id})
        mode = await client.call_tool("minify", {"case_id": case_id, "mode": "magic"})
        budget = await client.call_tool("minify", {"case_id": case_id, "budget_s": 1})
    assert gate.is_error and "run_with_logs" in gate.content[0].text
    assert mode.is_error and "mode" in mode.content[0].text
    assert budget.is_error and "budget_s" in budget.content[0].text


@pytest.mark.slow
async def test_fx_minifier_on_a_backend_compiler_failure(module_config):
    script = module_config.default_repo / "examples" / "backend_compiler_failed.py"
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, script)
        result = await client.call_tool("minify", {"case_id": case_id, "mode": "fx", "after": "aot",
                                                   "budget_s": 240})
        assert not result.is_error, result.content[0].text
        data = result.structured_content
        assert data["fx"]["check_str"] and data["fx"]["trials"] >= 2, data
        assert data["confirmed"], data
        assert data["after"]["nodes"] < data["before"]["nodes"], data
        assert await status_of(client, case_id, "reduce") == "done"


@pytest.mark.slow
async def test_fx_minifier_on_an_accuracy_failure(module_config):
    # Named like the file PyTorch's minifier writes into its working directory: it must not be replaced.
    script = module_config.default_repo / "user" / "repro.py"
    script.parent.mkdir(exist_ok=True)
    shutil.copyfile(module_config.default_repo / "examples" / "accuracy_mismatch.py", script)
    original = script.read_text()
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, script)
        # two compiled ops: minimal for auto mode, so the FX minifier is asked for by name
        result = await client.call_tool("minify", {"case_id": case_id, "mode": "fx", "after": "aot", "budget_s": 240})
        assert not result.is_error, result.content[0].text
        data = result.structured_content
    assert data["mode"] == "fx" and data["fx"]["level"] == 4, data
    assert data["confirmed"] and data["comparison"] in ("category", "exception", "signature"), data
    assert data["after"]["nodes"] <= data["before"]["nodes"]
    assert script.read_text() == original and sorted(p.name for p in script.parent.iterdir()) == ["repro.py"]
    # The graph runs on the CPU (and this torch may have no CUDA at all): its trials were forked.
    assert not any("CUDA" in line for line in data["fx"]["minifier_log"] + data["notes"]), data
    runs = Store(module_config.state_dir).runs(case_id)
    assert any("forkserver.py" in " ".join(run.argv) for run in runs), [run.argv[:2] for run in runs]
    # PyTorch's minified repro sets os.environ before it imports torch: a new interpreter confirms it.
    confirm = next(run for run in runs if run.run_id == data["confirm_run_id"])
    assert confirm.argv[0] == Store(module_config.state_dir).get_case(case_id).python, confirm.argv


def test_cuda_code_is_never_evaluated_in_forked_processes():
    from pt2_bug_basher.reduce.evaluate import fork_unsafe

    for code in ("x = torch.randn(8, device='cuda')",
                 "buf0 = reader.storage(None, 16384, device=device(type='cuda', index=0))",
                 'model.to("cuda")'):
        assert fork_unsafe(code, cuda_available=True), code
        assert fork_unsafe(code, cuda_available=None), code  # the probe failed: the code decides
    assert not fork_unsafe("x = torch.randn(8)\ncompiled = torch.compile(f, backend='eager')", cuda_available=True)


async def test_a_cpu_only_build_never_claims_the_graph_runs_on_cuda(module_config):
    """The launcher PyTorch's minifier writes on a CPU-only build names CUDA in its header comments."""
    import subprocess

    from pt2_bug_basher.reduce.evaluate import case_cuda_available, fork_unsafe

    async with Client(create_server(module_config)) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
    case = Store(module_config.state_dir).get_case(env.structured_content["case_id"])
    probed = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                            capture_output=True, text=True, timeout=120).stdout.strip()
    assert case_cuda_available(case) is (probed == "True")
    launcher = (DATA / "cpu_accuracy_launcher.py").read_text()
    assert "# torch cuda version: None" in launcher and "torch.cuda.is_available()==False" in launcher
    # Its tensors are on the CPU: forked trials are safe whatever the build.
    for cuda in (True, False, None):
        assert not fork_unsafe(launcher, cuda_available=cuda)
    # A torch that cannot use CUDA never runs a graph on CUDA, whatever the code says.
    assert not fork_unsafe("x = torch.randn(8, device='cuda')", cuda_available=False)
    if not case_cuda_available(case):
        assert not fork_unsafe("device = 'cuda' if torch.cuda.is_available() else 'cpu'",
                               cuda_available=case_cuda_available(case))
async def test_an_already_minimal_repro_completes_the_step_without_reducing(module_config):
    """A one-op repro of a few statements: minify(mode="auto") says so at once and records it as
    the reduce evidence, resting on the reproduction's runs (or one fresh run for another file)."""
    script = module_config.default_repo / "examples" / "dynamo_internal.py"
    server = create_server(module_config)
    store = server.state.store  # type: ignore[attr-defined]
    async with Client(server) as client:
        case_id = await reproduced(client, script)
        [reproduction] = [e for e in store.evidence(case_id, "reproduce") if e.ok]
        result = await client.call_tool("minify", {"case_id": case_id, "mode": "auto"})
        assert not result.is_error, result.content[0].text
        data = result.structured_content
        assert data["already_minimal"] and data["confirmed"] and data["mode"] == "none", data
        said = "already minimal: 7 statements, 1 op in the compiled function; no reduction attempted"
        assert data["why_mode"].startswith(said)
        assert data["seconds"] < 5 and data["source"] is None and data["fx"] is None
        assert data["budget_s"] == 0  # no reducer ran: no budget is spent or reported
        assert data["minimized_path"] == str(script) and data["before"] == data["after"]
        assert data["confirm_run_id"] in reproduction.data.run_ids
        assert data["recorded"] == ["reduce"] and "register_test(" in data["next_step"]
        assert await status_of(client, case_id, "reduce") == "done"
        [evidence] = store.evidence(case_id, "reduce")
        assert evidence.ok and evidence.data.already_minimal and evidence.run_id == data["confirm_run_id"]
        assert said in evidence.summary
        assert not [r for r in store.runs(case_id) if r.tool == "minify"]

        # Another file (here a copy) was never run by the reproduction: one fresh run must confirm it.
        copy = script.with_name("dynamo_internal_copy.py")
        shutil.copyfile(script, copy)
        again = (await client.call_tool("minify", {"case_id": case_id, "script": str(copy)})).structured_content
    assert again["already_minimal"] and again["confirmed"] and again["comparison"] == "exception", again
    # one compiled run, and (the case passed with compilation off) one with compilation off
    runs = [r for r in store.runs(case_id) if r.tool == "minify"]
    [confirm] = [r for r in runs if "TORCHDYNAMO_DISABLE" not in r.env]
    [off] = [r for r in runs if r.env.get("TORCHDYNAMO_DISABLE") == "1"]
    assert again["confirm_run_id"] == confirm.run_id and confirm.argv[-1] == str(copy) == off.argv[-1]


def test_minimality_is_judged_from_the_source():
    from pt2_bug_basher.reduce.minimal import judge

    padded = judge((DATA / "padded_graph_break.py").read_text())
    assert not padded.minimal and padded.statements > 30 and "statements" in (padded.why_not or "")
    forms = {
        "@torch.compile(backend='eager')\ndef f(x):\n    return x.sin()\nf(torch.ones(2))": 1,
        "def f(x):\n    return torch.nonzero(x)\ntorch.compile(f, fullgraph=True)(torch.ones(2))": 1,
        "import torch._dynamo as dynamo\ndef f(x):\n    return x.cos()\ndynamo.optimize('eager')(f)(torch.ones(2))": 1,
        "def g(x):\n    return x.relu()\n@torch.compile\ndef f(x):\n    return g(x) + 1": 2,
        """
        class M(torch.nn.Module):
            def forward(self, x):
                return self.act(x)

            def act(self, x):
                return x.sin().cos()

        torch.compile(M().eval())(torch.ones(2))
        """: 2,
        "def f(x):\n    return torch.pow(x, 3) + x.sum()\ntorch.compile(f)(torch.ones(2))": 3,
        # float("inf") is a number, not an op: masked_fill and amin are the two
        "def f(x, m):\n    return x.masked_fill(m, float('inf')).amin(dim=1)\ntorch.compile(f)(x, m)": 2,
        "def f(x):\n    return x * float(x.shape[0])\ntorch.compile(f)(torch.ones(2))": 3,
        # torch.export compiles a module's forward as torch.compile does
        """
        class M(torch.nn.Module):
            def forward(self, x, w):
                x.mul_(w)
                return x.sum()

        ep = torch.export.export(M(), (torch.ones(4), torch.ones(4))).run_decompositions()
        """: 2,
    }
    for source, ops in forms.items():
        judged = judge("import torch\n" + textwrap.dedent(source))
        assert judged.compiled_ops == ops, (source, judged)
        assert judged.minimal == (ops <= 2), (source, judged)
    # a small repro's polish budget: a minute, up to sixteen statements
    seven = judge((EXAMPLES / "graph_break_fullgraph.py").read_text())
    assert seven.small and seven.statements <= 10 and seven.polish_budget_s == 60
    twelve = judge("import torch\n" + "".join(f"a{i} = {i}\n" for i in range(11))
                   + "torch.compile(lambda x: x.sin().cos())(torch.ones(2))\n")
    assert twelve.small and twelve.statements == 12 and twelve.polish_budget_s == 60, twelve
    unknown = judge("import torch\nimport re\nm = make()\nre.compile('x')\ntorch.compile(m)(torch.ones(2))")
    assert not unknown.minimal and unknown.compiled_ops is None and "m" in (unknown.why_not or "")


def test_dead_code_goes_in_one_candidate_until_nothing_more_is_dead():
    from pt2_bug_basher.reduce.source import without_dead_code

    source = textwrap.dedent('''
        """docstring"""
        import json, os
        from math import sqrt, pi
        import torch
        SIZE = 4
        UNUSED = 3

        def describe(m):
            return json.dumps(m)

        class Block:
            def helper(self):
                return self.other()

        def f(x):
            return x.sin() * pi

        if __name__ == "__main__":
            block = Block()
            torch.compile(f)(torch.ones(SIZE))
    ''')
    reduced = without_dead_code(source)
    assert reduced is not None
    # chained: `block` is dead, so Block is; describe is dead, so json is
    for gone in ("docstring", "json", "os", "sqrt", "UNUSED", "describe", "Block", "block"):
        assert gone not in reduced, (gone, reduced)
    for kept in ("from math import pi", "import torch", "SIZE = 4", "def f(x)", "torch.compile(f)"):
        assert kept in reduced, (kept, reduced)
    assert without_dead_code(reduced) is None
    # a star import or a statement with effects stays; a dead body becomes `pass`
    effects = "from torch import *\nimport os\nos.environ['A'] = '1'\nif True:\n    unused = 1\n"
    after = without_dead_code(effects)
    assert after is not None and "from torch import *" in after and "os.environ" in after
    assert "unused" not in after and "pass" in after


async def test_a_small_repro_gets_a_short_source_reduction(module_config):
    """Seven statements, five ops: auto mode reduces the source, with the short budget and a note saying why
    (an agent saw 120 s spent on a seven-statement repro to drop three lines: up to ten statements get 60 s)."""
    script = module_config.default_repo / "examples" / "graph_break_fullgraph.py"
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, script)
        result = await client.call_tool("minify", {"case_id": case_id, "mode": "auto", "budget_s": 600})
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data["mode"] == "source" and data["budget_s"] == 60, data
    assert any("small already" in note for note in data["notes"]), data["notes"]
    # a polish: statements and constants, not the library's expression-level pass
    assert "statements" in data["source"]["phases"] and "pysource-minimize" not in data["source"]["phases"], data
    # the budget, plus the confirming run in a fresh process after it (slow on two loaded cores)
    assert data["confirmed"] and data["seconds"] <= 60 + 20, data
    assert "larger budget_s" not in data["next_step"], data["next_step"]  # a small result is used as it is
    runs = Store(module_config.state_dir).runs(case_id)
    # the reducer's own fork server (the case's warm interpreter is one too, started by run_with_logs)
    [server] = [run for run in runs if run.tool == "minify" and "forkserver.py" in " ".join(run.argv)
                and "pt2bb-warm" not in " ".join(run.argv)]
    # backend="eager" only: Dynamo is imported once in the server, Inductor never
    assert server.argv[-2:] == ["torch", "torch._dynamo"], server.argv


def test_the_reducer_preloads_inductor_only_for_scripts_that_may_reach_it():
    from pt2_bug_basher.reduce.minify import reducer_preload

    inductor = ("torch", "torch._dynamo", "torch._inductor.compile_fx")
    assert reducer_preload("torch.compile(f)(x)") == inductor
    assert reducer_preload("torch.compile(f, backend='inductor')(x)") == inductor
    assert reducer_preload("torch.compile(f, backend='eager')\ntorch.compile(g, backend=\"inductor\")") == inductor
    assert reducer_preload("torch.compile(f, backend='aot_eager', fullgraph=True)") == inductor[:2]
    assert reducer_preload("torch._dynamo.optimize('eager')(f)") == inductor[:2]


def test_one_expression_helpers_are_inlined_and_unread_attributes_are_dead():
    from pt2_bug_basher.reduce.source import inlined_calls, without_dead_code

    source = textwrap.dedent('''
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 2.0
                self.used = 3.0

            def forward(self, x):
                return x * self.used

        def make_inputs(batch, features):
            return torch.randn(batch, features)

        def twice(x):
            y = x * 2
            return y

        data = make_inputs(2, features=8)
        torch.compile(M())(twice(data))
    ''')
    dead = without_dead_code(source)
    assert dead is not None and "self.scale" not in dead and "self.used = 3.0" in dead
    [inlined] = inlined_calls(source)  # `twice` has two statements: not a candidate
    assert "data = torch.randn(2, 8)" in inlined and "def make_inputs" not in inlined, inlined
    assert "def twice" in inlined
    assert inlined_calls("def f(*a):\n    return a\nf(1)\n") == []
    assert inlined_calls("def f(a, b=1):\n    return a\nf(1)\n") == []


def test_the_compiler_settings_a_reduction_must_keep():
    from pt2_bug_basher.reduce.source import compiler_settings

    # the user-agent journal's repro lost backend="eager": the reduction then ran Inductor instead
    repro = ('import torch\n'
             '@torch.compile(backend="inductor", fullgraph=True)\n'
             'def f(x):\n    return x\n'
             'g = torch.compile(lambda x: x, backend="eager", dynamic=False, mode=None)\n'
             'h = torch._dynamo.optimize("eager")(f)\n')
    kept = compiler_settings(repro)
    assert kept == {"backend='inductor'", "fullgraph=True", "backend='eager'", "dynamic=False", "mode=None"}
    dropped = repro.replace(', backend="eager"', "")
    assert not kept <= compiler_settings(dropped)
    assert kept <= compiler_settings(repro.replace("    return x\n", "    return x + 1\n"))
    assert compiler_settings("torch.compile(f)\n") == frozenset() and compiler_settings("def (") == frozenset()


async def test_a_candidate_running_at_the_deadline_is_stopped_there_and_not_judged(tmp_path):
    import time

    from pt2_bug_basher.reduce.evaluate import FreshEvaluator
    from pt2_bug_basher.reduce.ladder import Reference
    from pt2_bug_basher.reduce.source import SourceReducer

    store = Store(tmp_path / "state")
    case = store.create_case(str(tmp_path), sys.executable, {})
    script = tmp_path / "slow.py"
    script.write_text("raise ValueError('boom')\n")
    ref = Reference(case_id=case.case_id, script=script, args=[], signature=None, category="unknown",
                    exception_type="ValueError", message="boom", env={}, duration_s=1.0, run_ids=[])

    async def quiet(message: str) -> None:
        return None

    reducer = SourceReducer(ref, FreshEvaluator(case, {}, parallel=1), tmp_path / "work", cwd=tmp_path,
                            name=script.name, timeout_s=120.0, deadline=time.monotonic() + 3.0, progress=quiet,
                            static_filter=False)
    started = time.monotonic()
    assert not await reducer.interesting("import time\ntime.sleep(60)\nraise ValueError('boom')\n")
    # stopped at the deadline (3 s), not at the candidate timeout (120 s); the verdict stays open
    assert time.monotonic() - started < 30
    assert reducer.stats.budget_exhausted and reducer.stats.evaluations == 1 and reducer.cache == {}
    # the original itself cut that way: it stands, unreduced (the reproduction already confirmed it)
    slow = "import time\ntime.sleep(60)\nraise ValueError('boom')\n"
    again = SourceReducer(ref, FreshEvaluator(case, {}, parallel=1), tmp_path / "work2", cwd=tmp_path,
                          name=script.name, timeout_s=120.0, deadline=time.monotonic() + 3.0, progress=quiet,
                          static_filter=False)
    kept = await again.run(slow)
    assert kept is not None and "time.sleep(60)" in kept and again.stats.evaluations == 1


def test_the_sizes_an_answer_gives_count_statements_as_the_minimality_judge_does():
    from pt2_bug_basher.reduce.minimal import judge
    from pt2_bug_basher.reduce.source import size_of

    source = ('"""A repro."""\nimport torch\n\n\ndef f(x):\n    pass\n    return x + 1\n\n\n'
              'print(torch.compile(f, backend="eager")(torch.ones(2)))\n')
    assert size_of(source)["statements"] == judge(source).statements == 3  # def, return, print


SIZED = '''def randn(*sizes):
    return sizes


x = randn(4, 8)
if len(x) == 2:
    raise ValueError("boom")
'''


def test_sizes_of_zero_or_one_are_what_dynamo_specialises():
    from pt2_bug_basher.reduce.source import specialised_dims

    assert specialised_dims("torch.randn(0, 1)\ntorch.ones((3, 1))\ntorch.full((1,), 1.0)\n") == 4
    # full's value and arange's end are no sizes
    assert specialised_dims("torch.full((2, 3), 1)\ntorch.arange(1)\ntorch.randn(4, 8)\n") == 0
    assert specialised_dims("def (") == 0


async def test_the_reducer_refuses_a_size_shrunk_to_zero_or_one_without_running_it(tmp_path):
    """Seen by an agent: a reduced repro drifted to randn(0, 1), where Dynamo's specialised path ran and the
    wrong value became 0/0."""
    import time

    from pt2_bug_basher.reduce.evaluate import FreshEvaluator
    from pt2_bug_basher.reduce.ladder import Reference
    from pt2_bug_basher.reduce.source import SourceReducer

    store = Store(tmp_path / "state")
    case = store.create_case(str(tmp_path), sys.executable, {})
    script = tmp_path / "sized.py"
    script.write_text(SIZED)
    ref = Reference(case_id=case.case_id, script=script, args=[], signature=None, category="unknown",
                    exception_type="ValueError", message="boom", env={}, duration_s=0.1, run_ids=[])

    async def quiet(message: str) -> None:
        return None

    reducer = SourceReducer(ref, FreshEvaluator(case, {}, parallel=1), tmp_path / "work", cwd=tmp_path,
                            name=script.name, timeout_s=60.0, deadline=time.monotonic() + 120.0, progress=quiet)
    await reducer.run(SIZED)  # judges the original (it compiles nothing, so nothing reduces)
    runs = reducer.stats.evaluations
    assert not await reducer.interesting(SIZED.replace("randn(4, 8)", "randn(1, 8)"))
    assert reducer.stats.evaluations == runs and reducer.stats.static_rejects == 1, reducer.stats
    await reducer.interesting(SIZED.replace("randn(4, 8)", "randn(2, 8)"))  # run and judged
    assert reducer.stats.evaluations == runs + 1 and reducer.stats.static_rejects == 1, reducer.stats
