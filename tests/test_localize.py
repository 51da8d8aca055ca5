"""localize through a real MCP client: the backend ladder on real failing repros."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES
from mcp import Client

from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.case.store import Store
from pt2_bug_basher.mcp_server.server import create_server
from pt2_bug_basher.report.views import run_view
from pt2_bug_basher.steps.localize import INTERNAL_NOTE

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def module_config(tmp_path_factory) -> ServerConfig:
    root = tmp_path_factory.mktemp("loc")
    repo = root / "repo"
    shutil.copytree(EXAMPLES, repo / "examples")
    return ServerConfig(state_dir=root / "state", default_repo=repo, allowed_roots=(root,))


async def reproduced(client: Client, config: ServerConfig, name: str) -> str:
    env = await client.call_tool("check_env", {"python": sys.executable})
    assert not env.is_error, env.content[0].text
    case_id = env.structured_content["case_id"]
    run = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 2,
                                                   "script": str(config.default_repo / "examples" / name)})
    assert run.structured_content["reproduced"], run.structured_content
    return case_id


def torch_file(relative: str) -> Path:
    import torch

    return Path(torch.__file__).parent.parent / relative


def rows(data: dict) -> dict[tuple[str, str], str]:
    return {(r["backend"], r["dynamic"]): r["outcome"] for r in data["table"]}


async def test_gate_refuses_before_reproduction(module_config):
    async with Client(create_server(module_config)) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        result = await client.call_tool("localize", {"case_id": env.structured_content["case_id"]})
    assert result.is_error and "run_with_logs" in result.content[0].text


async def test_graph_break_fails_in_eager_so_dynamo(module_config, tmp_path_factory):
    # The user's repro lies outside the repository: the case runs its own copy, and localize finds it.
    original = tmp_path_factory.mktemp("users_own_dir") / "graph_break_fullgraph.py"
    shutil.copy(EXAMPLES / original.name, original)
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, str(original))
        result = await client.call_tool("localize", {"case_id": case_id})
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    copy = Path(data["script"])
    assert copy.is_relative_to(module_config.state_dir / "cases" / case_id) and copy.read_text() == original.read_text()
    table = rows(data)
    assert table[("eager", "script")] == "same failure", data["table"]
    # Backends above eager fail the same way, or were not run once eager had failed (fewer cores than rungs).
    assert all(table[(b, "script")] in ("same failure", "skipped") for b in
               ("aot_eager", "aot_eager_decomp_partition", "inductor")), data["table"]
    assert data["first_failing"] == "eager" and data["layer"] == "Dynamo"
    assert table[("eager", "False")] == table[("eager", "True")] == "same failure"
    assert "not a dynamic-shapes problem" in data["dynamic_shapes"]
    assert 'mode="source"' in data["minifier"] and "minify(" in data["next_step"]
    # a few statements, a few ops: the step suggests the budget-capped auto mode, not a full source reduction
    assert "small already" in data["next_step"] and 'mode="auto"' in data["next_step"], data["next_step"]
    # exact signatures hold for a Dynamo error whatever the backend
    assert data["comparison"] == "exact signature"
    assert len(result.content[0].text) < 8000
    # The rungs that ran are children of the case's warm interpreter (a CPU-only torch), each its own run;
    # for a bug in Dynamo nothing of the bisector is started: no table probe, no trial server.
    store = Store(module_config.state_dir)
    ran = [r for r in data["table"] if r["run_id"] != "-"]
    assert all(store.get_run(r["run_id"], case_id).argv[0].startswith("<child forked from run-") for r in ran), ran
    every = [r for r in store.runs(case_id) if r.tool == "localize" and r.status != "cancelled"]
    # Dynamo printed the graph break without its own frames: one rerun of the script with them, and a note
    verbose = [r for r in every if r.env.get("TORCHDYNAMO_VERBOSE") == "1"]
    assert len(verbose) == 1 and INTERNAL_NOTE in data["notes"], (verbose, data["notes"])
    localize_runs = [r for r in every if r not in verbose]
    # ... besides the near-miss variants, each a recorded run too (every run records its spectrum)
    variant_runs = {v["run_id"] for v in data["variants"]}
    assert {r.run_id for r in localize_runs} == {r["run_id"] for r in ran} | variant_runs, data["variants"]
    assert all(r.argv[1].endswith("spectrum.py") for r in localize_runs), [r.argv[:3] for r in localize_runs]
    # a rung stopped once eager had failed reads the same in the table and in the report
    for row in data["table"]:
        if row["outcome"] == "skipped":
            assert row["failure"].startswith("not run, or stopped once started: backend='eager'"), row
    for run in store.runs(case_id):
        if run.status == "cancelled":
            assert run_view(run, 0.0).outcome.startswith("stopped by localize: a backend below it"), run


@pytest.mark.slow
async def test_inductor_relu_injection_fails_only_in_inductor(module_config):
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, "runtime_error.py")
        data = (await client.call_tool("localize", {"case_id": case_id, "bisect_budget_s": 0})).structured_content
    table = rows(data)
    assert [table[(b, "script")] for b in ("eager", "aot_eager", "aot_eager_decomp_partition")] == ["passes"] * 3
    assert table[("inductor", "script")] == "same failure"
    assert data["first_failing"] == "inductor" and data["layer"] == "Inductor"
    assert 'after="aot"' in data["minifier"]
    assert {r["dynamic"] for r in data["table"]} == {"script", "False", "True"}
    assert data["bisection"] is None and any("bisect_budget_s=0" in n for n in data["notes"])


@pytest.mark.slow
async def test_accuracy_failure_only_in_inductor(module_config):
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, "accuracy_mismatch.py")
        data = (await client.call_tool("localize", {"case_id": case_id})).structured_content
        table = rows(data)
        assert table[("eager", "script")] == "passes" and table[("aot_eager", "script")] == "passes"
        assert table[("inductor", "script")] == "same failure", data["table"]
        assert data["layer"] == "Inductor"
        # below the backend: the compiler bisector's subsystems, then the lowering applications
        bisection = data["bisection"]
        assert bisection["subsystem"] == "lowerings" and bisection["kind"] == "bisect", bisection
        assert bisection["culprit"]["subject"] == "aten.relu.default", bisection["culprit"]
        assert bisection["result"].startswith("BisectionResult(backend='inductor', subsystem='lowerings'")
        fixed_by = {t["subsystem"] for t in bisection["trials"] if t["max_enabled"] == -1 and t["outcome"] == "fixed"}
        assert fixed_by == {"lowerings"}, bisection["trials"]
        assert "cudagraphs" not in {t["subsystem"] for t in bisection["trials"]}  # a CPU-only torch
        # no point is tried twice: the search probe that finds the culprit also counts its helpers' calls
        points = [(t["subsystem"], t["max_enabled"]) for t in bisection["trials"] if t["max_enabled"] is not None]
        assert len(points) == len(set(points)) and bisection["applications"] > 1, bisection["trials"]
        # the first suspect is the C++ code generator of relu, where the testing hook corrupts it
        top = data["suspects"][0]
        assert top["file"] == "torch/_inductor/codegen/cpp.py" and top["function"].endswith("Overrides.relu"), top
        body = "".join(torch_file(top["file"]).read_text().splitlines(keepends=True)[top["line"] - 1: top["line"] + 15])
        assert "inject_relu_bug_TESTING_ONLY" in body
        # every trial is a recorded run with the case's own cache directory, never the machine's
        store = Store(module_config.state_dir)
        for trial in bisection["trials"]:
            run = store.get_run(trial["run_id"], case_id)
            assert Path(run.env["TORCHINDUCTOR_CACHE_DIR"]).is_relative_to(module_config.state_dir)
            assert run.env["TORCH_BISECT_SUBSYSTEM"] == trial["subsystem"]
        # The debug artifacts then point at the kernel that computes the wrong output, with localize's word.
        for step in ("test", "main_check"):
            await client.call_tool("waive_step", {"case_id": case_id, "step": step,
                                                  "reason": "localisation test: no unit test needed"})
        collected = await client.call_tool("collect_debug_artifacts", {"case_id": case_id})

        # A budget returns the deepest result reached, and progress is reported as trials finish.
        said: list[str] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            said.append(message or "")

        short = (await client.call_tool("localize", {"case_id": case_id, "bisect_budget_s": 1},
                                        progress_callback=on_progress)).structured_content
    assert short["layer"] == "Inductor" and short["bisection"]["budget_exhausted"], short["bisection"]
    assert "skipped" in {t["outcome"] for t in short["bisection"]["trials"]}
    assert "budget ran out" in short["bisection"]["meaning"]
    assert any(m.startswith("bisect") for m in said), said
    assert not collected.is_error, collected.content[0].text
    artifacts = collected.structured_content
    failure = artifacts["failure"]
    assert failure["accuracy"] and failure["localized"] == "Inductor"
    assert "localize put the failure in Inductor" in failure["how"] and "may be in Dynamo" not in failure["how"]
    assert failure["mismatched_output"] is None  # one tensor compared: every output is listed
    [kernel] = failure["output_kernels"]
    assert kernel["name"] == failure["kernel"] and kernel["role"] == "writes graph output 0"
    assert kernel["aten_ops"] == ["aten.relu.default", "aten.mul.Tensor"]
    assert "auto tmp1 = tmp0 + decltype(tmp0)(1);" in kernel["excerpt"]
    assert "localize found only backend='inductor' wrong" in artifacts["next_step"]
    # ... and names localize's first suspect rather than sending the agent to every lowering
    assert f"first suspect is {top['function']} at {top['file']}:{top['line']}" in artifacts["next_step"]


RANDOM_MISMATCH = '''\
import torch


def f(x):
    return x + torch.rand_like(x)


if __name__ == "__main__":
    x = torch.zeros(64)
    torch.manual_seed(0)
    expected = f(x)
    torch.manual_seed(0)
    torch.testing.assert_close(torch.compile(f)(x), expected)
'''


@pytest.mark.slow
async def test_a_config_switch_that_fixes_it_names_the_knob_and_what_it_means(module_config):
    """Inductor draws random numbers its own way: switching on fallback_random fixes the mismatch, which is
    expected behaviour, not a bug; the suspect is the knob itself."""
    (module_config.default_repo / "examples" / "random_mismatch.py").write_text(RANDOM_MISMATCH)
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, "random_mismatch.py")
        data = (await client.call_tool("localize", {"case_id": case_id})).structured_content
    assert data["layer"] == "Inductor", data["table"]
    bisection = data["bisection"]
    assert bisection["kind"] == "config" and bisection["subsystem"] == "inductor_fallback_random", bisection
    assert "expected, not a bug" in bisection["meaning"]
    # the bisector's order: the passes before it were each switched off and did not fix it
    outcomes = {t["subsystem"]: t["outcome"] for t in bisection["trials"]}
    assert outcomes["inductor_fallback_random"] == "fixed"
    assert all(outcomes[p] == "same failure" for p in ("pre_grad_passes", "joint_graph_passes", "post_grad_passes"))
    knob = data["suspects"][0]  # the knob leads; spectra may rank functions after it
    assert knob["file"] == "torch/_inductor/config.py" and knob["function"] == "torch._inductor.config.fallback_random"
    assert torch_file(knob["file"]).read_text().splitlines()[knob["line"] - 1].startswith("fallback_random")


EXPORT_ONLY = '''\
import torch


class Double(torch.nn.Module):
    def forward(self, x):  # run eagerly, torch.cond compiles its branches itself: no call of the script's
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t * 2, (x,))


ep = torch.export.export(Double(), (torch.ones(3),))
torch.testing.assert_close(ep.module()(torch.ones(3)), torch.full((3,), 3.0))
'''


async def test_a_script_that_reaches_the_compiler_only_through_export_is_put_in_export(module_config):
    # no torch.compile of the script's to swap (torch.cond's own is left as it is): every rung runs the script
    # unchanged, which says nothing about Dynamo
    script = module_config.default_repo / "examples" / "export_only.py"
    script.write_text(EXPORT_ONLY)
    async with Client(create_server(module_config)) as client:
        case_id = await reproduced(client, module_config, script.name)
        data = (await client.call_tool("localize", {"case_id": case_id, "variants_budget_s": 0})).structured_content
        # good_ref where the case's repository is no git checkout: refused before anything runs, saying why
        bad = await client.call_tool("localize", {"case_id": case_id, "good_ref": "no-such-ref"})
    assert bad.is_error and "good_ref names a commit of the case's repository" in bad.content[0].text, bad.content
    assert "is not inside a git repository" in bad.content[0].text
    assert set(rows(data).values()) == {"not compiled"}, data["table"]
    assert data["first_failing"] is None and data["layer"] == "export", data["meaning"]
    assert 'mode="source"' in data["minifier"] and "torch.export" in data["meaning"]
    # yet each rung ran the script and failed the case's way: its spectrum counts as a failing run's
    [note] = [n for n in data["notes"] if n.startswith("Every run localize made failed")]
    assert "pass that commit as good_ref" in note  # not passed: named (and left out where it was, test_spectra)
    # nothing to bisect: no trial server was started for it (a warm interpreter serves the rungs)
    started = [r.argv for r in Store(module_config.state_dir).runs(case_id) if "forkserver.py" in " ".join(r.argv)]
    assert len(started) == 1 and "pt2bb-warm-" in " ".join(started[0]), started


# -- the agent's own near misses: a Dynamo side-effect bug no generated variant passes -------------------------

STEP = '''\
import torch


def step(x, state):
    scale = state.pop("scale")
    state["calls"] = state.get("calls", 0) + 1
    return torch.relu(x) * scale


state = {"scale": 2.0}
x = torch.randn(8)
out = torch.compile(step, backend="eager")(x, state)
torch.testing.assert_close(out, torch.relu(x) * 2.0)
assert "scale" not in state, f"state after the compiled step: {state}"
'''


async def test_a_near_miss_the_agent_wrote_names_the_function_no_generated_variant_could(tmp_path):
    """dict.pop on an input no longer marks the dict for reconstruction (planted in the checkout's one commit,
    so no history points at it): every generated variant still fails, so the spectra have nothing to contrast
    until the agent passes a copy that deletes the key instead of popping it."""
    from planted_bugs import plant_dict_pop_bug
    from torch_checkout import build_clean_checkout, make_checkout_python

    checkout, _ = build_clean_checkout(tmp_path)
    python = make_checkout_python(tmp_path, checkout)
    dicts = plant_dict_pop_bug(checkout)
    repro, near = tmp_path / "step.py", tmp_path / "step_del.py"
    repro.write_text(STEP)
    near.write_text(STEP.replace('scale = state.pop("scale")', 'scale = state["scale"]\n    del state["scale"]'))
    config = ServerConfig(state_dir=tmp_path / "state", default_repo=checkout, allowed_roots=(tmp_path,))
    async with Client(create_server(config)) as client:
        env = await client.call_tool("check_env", {"python": str(python), "repo": str(checkout)})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(repro), "repeat": 2})
        assert run.structured_content["reproduced"], run.content[0].text[:2000]
        alone = (await client.call_tool("localize", {"case_id": case_id, "bisect_budget_s": 0})).structured_content
        assert alone["layer"] == "Dynamo"
        assert not [v for v in alone["variants"] if v["outcome"] == "passes"], alone["variants"]
        assert any("near_misses" in note for note in alone["notes"]), alone["notes"]
        # the Dynamo run's side_effects log: the input dict it wrote back, and the statements that mutated it
        written = {m["source"]: m["statements"] for m in alone["dynamo"]["mutations"]}
        assert written["L['state']"][0] == 'step.py:5 `scale = state.pop("scale")`', alone["dynamo"]
        both = await client.call_tool("localize", {"case_id": case_id, "bisect_budget_s": 0,
                                                   "near_misses": [str(near)]})
    data = both.structured_content
    assert data["variants"][0]["kind"] == "near_miss" and data["variants"][0]["outcome"] == "passes"
    assert "passes as your near miss `step_del.py`" in data["circumstances"]
    top = data["suspects"][0]
    assert (top["file"], top["function"]) == ("torch/_dynamo/variables/dicts.py", "ConstDictVariable.call_method"), \
        data["suspects"][:3]
    assert "spectrum" in top["evidence"]
    pop_line = next(i for i, line in enumerate(dicts.read_text().splitlines(), 1)
                    if "return self.items.pop(Hashable(args[0]))" in line)
    assert any(r["first"] <= pop_line <= r["last"] for r in top["lines"]), top


DEGENERATE = '''\
import torch
import torch._inductor.config

torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"
calls = [0]


def f(x):
    return torch.relu(x) * 2


if __name__ == "__main__":
    x = torch.linspace(-2, 2, 8)
    out = torch.compile(f)(x)
    calls[0] += 1
    assert calls[0] == 1, "compiled and eager outputs differ"
    assert torch.allclose(out, f(x)), "compiled and eager outputs differ"
'''


@pytest.mark.slow
async def test_a_variant_that_breaks_the_program_itself_is_no_evidence(module_config):
    """Without `calls[0] += 1` the script's own check fails the case's way, compiled or not: that variant is
    'fails uncompiled too', not a 'same failure' whose run would count among the failing spectra. (A near miss
    here, which always runs; a removed statement goes through the same check.)"""
    script = module_config.default_repo / "degenerate_variant.py"
    script.write_text(DEGENERATE)
    broken = module_config.default_repo / "degenerate_variant_no_count.py"
    broken.write_text(DEGENERATE.replace("    calls[0] += 1\n", ""))
    fine = module_config.default_repo / "degenerate_variant_no_check.py"
    fine.write_text(DEGENERATE.replace('    assert calls[0] == 1, "compiled and eager outputs differ"\n', ""))
    async with Client(create_server(module_config)) as client:
        env = await client.call_tool("check_env", {"python": sys.executable})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "repeat": 2, "script": str(script)})
        assert run.structured_content["reproduced"], run.structured_content
        result = await client.call_tool("localize", {"case_id": case_id, "bisect_budget_s": 0,
                                                     "near_misses": [str(broken), str(fine)]})
    assert not result.is_error, result.content[0].text
    outcomes = {v["change"]: v for v in result.structured_content["variants"] if v["kind"] == "near_miss"}
    assert outcomes[f"`{broken.name}`"]["outcome"] == "fails uncompiled too", outcomes
    # a removed line the check does not need: still the compiler's failure, compiled only
    assert outcomes[f"`{fine.name}`"]["outcome"] == "same failure", outcomes
    # the compile-off run of the broken one is recorded, with compilation off; none for the generated variants
    # whose edits cannot break the program
    store = Store(module_config.state_dir)
    off = [r for r in store.runs(case_id) if r.tool == "localize" and r.env.get("TORCHDYNAMO_DISABLE") == "1"]
    assert all(("_near_miss-" in r.argv[-1] or "_statement_removed-" in r.argv[-1]) for r in off), [r.argv for r in off]
    assert any(r.argv[-1].endswith(f"_{outcomes[f'`{broken.name}`']['id']}.py") for r in off), [r.argv for r in off]
