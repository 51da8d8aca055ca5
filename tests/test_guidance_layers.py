"""Issue 29, guidance: a category the reproduction settled holds against a later reading of text, a failed
classification leads on instead of looping, the guidance follows (category, layer), the repro the agent ran
last is the case's, and the kernels writing the output that differs are excerpted first."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_checkout import Mini, seed_test
from mcp import Client

from pt2_bug_basher.domain.evidence import LadderRowRecord, LocalizeRecord, MainCheckEvidence, ReproduceEvidence
from pt2_bug_basher.mcp_server.calls import parse_call

pytestmark = pytest.mark.anyio

# A backend that adds one to every output: the compiled result is wrong, the compile-off run passes.
WRONG_BACKEND = '''
import torch


def off_by_one(gm, example_inputs):
    def run(*args):
        return [out + 1 for out in gm(*args)]
    return run


f = torch.compile(lambda x: x.sin() * 2, backend=off_by_one)
x = torch.arange(4.0)
{check}
'''
ASSERTS = WRONG_BACKEND.format(check="torch.testing.assert_close(f(x), torch.sin(x) * 2)")
# the agent's reduced repro: it says only that the outputs differ, which no rule of text places
SAYS_LITTLE = WRONG_BACKEND.format(check='if not torch.allclose(f(x), torch.sin(x) * 2):\n'
                                         '    raise SystemExit("outputs differ")')


async def ok(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


def seed_through_main_check(mini: Mini, case_id: str) -> None:
    mini.store.add_waiver(case_id, "reduce", "the repro is a few lines already")
    seed_test(mini.store, case_id, exception_type="AssertionError")
    mini.store.add_evidence(case_id, "main_check", True, "fails on main (seeded)",
                            data=MainCheckEvidence(ref="main", outcome="failed", exception_type="AssertionError"))


def steps_of(status: dict) -> dict[str, dict]:
    return {s["step"]: s for s in status["steps"]}


async def test_a_settled_category_holds_and_a_failed_classification_leads_on(mini: Mini):
    """Seen on a real accuracy bug: the step-6 run's text read `unknown`, classify_error failed step 7 and gave as
    next step the very call that had just failed, get_workflow repeated it; and later steps went back to the
    original script though the agent had moved on to its reduced repro."""
    (mini.repo / "wrong.py").write_text(ASSERTS)
    (mini.repo / "wrong_min.py").write_text(SAYS_LITTLE)
    case_id = mini.new_case()
    async with Client(mini.server) as client:
        reproduced = await ok(client, "run_with_logs", case_id=case_id, script="wrong.py", repeat=2)
        assert reproduced["reproduced"] and reproduced["verdict"]["category"] == "accuracy", reproduced["verdict"]
        assert reproduced["verdict"]["compiler_at_fault"] is True
        seed_through_main_check(mini, case_id)
        logged = await ok(client, "run_with_logs", case_id=case_id, script="wrong_min.py", logs="accuracy",
                          repeat=1)
        assert "logs" in logged["recorded"], logged
        run_id = logged["runs"][0]["run_id"]
        data = await ok(client, "classify_error", case_id=case_id, run_id=run_id)
        # The reproduction's category stands; the text's reading is reported beside it, as data.
        assert data["category"] == "accuracy" and data["recorded"], data
        assert [(r["source"], r["category"]) for r in data["readings"]] == [
            ("reproduction", "accuracy"), ("text", "unknown")], data["readings"]
        assert data["guide"]["category"] == "accuracy"
        status = (await ok(client, "get_workflow", case_id=case_id))["case"]
        steps = steps_of(status)
        assert steps["classify"]["status"] == "done", steps["classify"]
        for said in (data["next_step"], data["diagnostic"], status["next_step"]):
            assert "classify_error(" not in said, said
        # The reduced repro the agent logged is the case's current one: every later call names it.
        current = str(mini.repo / "wrong_min.py")
        artifacts_call = parse_call(steps["artifacts"]["tool_call"])
        assert artifacts_call.arguments["script"] == current, artifacts_call
        assert status["next_step"].startswith("Step 8") and current in status["next_step"], status["next_step"]
        collected = await ok(client, "collect_debug_artifacts", case_id=case_id)
        assert collected["script"] == current

        # A case whose reproduction settled nothing: the classification fails, and leads on instead of looping.
        other = mini.new_case()
        mini.store.add_evidence(other, "reproduce", True, "wrong_min.py failed 2/2 times (unknown)",
                                data=ReproduceEvidence(script=current, category="unknown", repeat=2))
        seed_through_main_check(mini, other)
        logged = await ok(client, "run_with_logs", case_id=other, script="wrong_min.py", logs="accuracy", repeat=1)
        failed_call = f'run_id="{logged["runs"][0]["run_id"]}"'
        data = await ok(client, "classify_error", case_id=other, run_id=logged["runs"][0]["run_id"])
        assert data["category"] == "unknown" and data["readings"] == []
        status = (await ok(client, "get_workflow", case_id=other))["case"]
        assert steps_of(status)["classify"]["status"] == "failed"
        for said in (data["next_step"], data["diagnostic"], status["next_step"]):
            assert "classify_error(" not in said and failed_call not in said, said
            assert "localize(" in said, said  # the backend ladder says which layer fails
        # With localize on record, the way forward is the waiver on what the case has, not the same call.
        mini.store.set_localization(other, LocalizeRecord(first_failing="aot_eager", layer="AOTAutograd"))
        status = (await ok(client, "get_workflow", case_id=other))["case"]
        waiver = parse_call(status["next_step"][status["next_step"].index("waive_step("):])
        assert waiver.arguments["step"] == "classify" and "AOTAutograd" in waiver.arguments["reason"], waiver
        await ok(client, "waive_step", **waiver.arguments)
        assert steps_of((await ok(client, "get_workflow", case_id=other))["case"])["classify"]["status"] == "waived"


def seed_localized_accuracy(mini: Mini, case_id: str, layer: str, first: str, category: str = "accuracy") -> None:
    mini.store.add_evidence(case_id, "reproduce", True, f"repro.py failed 2/2 times ({category})",
                            data=ReproduceEvidence(script=str(mini.repo / "repro.py"), category=category, repeat=2))
    mini.store.set_localization(case_id, LocalizeRecord(first_failing=first, layer=layer, table=[
        LadderRowRecord(backend=first, dynamic="False", outcome="same failure"),
        LadderRowRecord(backend=first, dynamic="True", outcome="same failure")]))


ACCURACY_TEXT = """Traceback (most recent call last):
  File "/work/repro.py", line 12, in <module>
    torch.testing.assert_close(compiled(x), fn(x))
AssertionError: Tensor-likes are not close!
"""
CRASH_TEXT = """Traceback (most recent call last):
  File "/work/repro.py", line 12, in <module>
    compiled(x)
torch._dynamo.exc.BackendCompilerFailed: backend='aot_eager' raised:
RuntimeError: boom
"""
AOT_EAGER_FAILS = """
import torch

torch.compile(lambda x: x + 1, backend="aot_eager")(torch.ones(3))
raise AssertionError("Tensor-likes are not close!")
"""
WRAPPERS = ["torch/_functorch/_aot_autograd/runtime_wrappers.py",
            "torch/_functorch/_aot_autograd/input_output_analysis.py"]


async def test_a_wrong_result_in_aotautograd_gets_the_aot_logs_no_minifier_and_the_runtime_wrappers(mini: Mini):
    """Seen on an accuracy case localize put in AOTAutograd, whose compiled graph was right: the logs preset was
    Inductor's, the guide gave minifier level 2 after aot, and the artifacts step said to compare kernels."""
    for rel in [*WRAPPERS, "torch/_inductor/lowering.py", "test/functorch/test_aotdispatch.py"]:
        (mini.repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (mini.repo / rel).write_text("")
    (mini.repo / "aot_eager_fails.py").write_text(AOT_EAGER_FAILS)
    case_id = mini.new_case()
    seed_localized_accuracy(mini, case_id, "AOTAutograd", "aot_eager")
    async with Client(mini.server) as client:
        steps = steps_of((await ok(client, "get_workflow", case_id=case_id))["case"])
        logs_call = parse_call(steps["logs"]["tool_call"])
        assert logs_call.arguments["logs"] == "aot_autograd", logs_call
        guide = (await ok(client, "classify_error", case_id=case_id, text=ACCURACY_TEXT))["guide"]
        assert guide["log_preset"] == "aot_graphs,aot_joint_graph,+aot"
        assert guide["minify_mode"] == "source" and guide["minify_level"] is None, guide
        assert "runtime wrappers" in guide["outside_graph"] and "cannot see" in guide["outside_graph"]
        assert guide["source_files"] == WRAPPERS, guide["source_files"]
        assert not any(k.startswith("TORCHDYNAMO_REPRO") for k in guide["config_knobs"]), guide["config_knobs"]
        # the accuracy playbook, not the crash playbook of the layer; and no artifact step, which cannot show it
        assert guide["playbook"] == 'prompt "playbook" with category="accuracy"', guide["playbook"]
        classified = await ok(client, "classify_error", case_id=case_id, text=ACCURACY_TEXT)
        assert "collect_debug_artifacts" not in classified["diagnostic"], classified["diagnostic"]
        assert parse_call(classified["diagnostic"]).tool in {"localize", "run_with_logs", "minify", "waive_step"}

        # The same wrong result in Inductor: the accuracy minifier, level 4 after aot, and Inductor's files.
        inductor = mini.new_case()
        seed_localized_accuracy(mini, inductor, "Inductor", "inductor")
        guide = (await ok(client, "classify_error", case_id=inductor, text=ACCURACY_TEXT))["guide"]
        assert (guide["minify_mode"], guide["minify_level"], guide["minify_after"]) == ("fx", 4, "aot"), guide
        assert guide["config_knobs"][:2] == ["TORCHDYNAMO_REPRO_AFTER=aot", "TORCHDYNAMO_REPRO_LEVEL=4"]
        assert guide["outside_graph"] is None and guide["source_files"] == ["torch/_inductor/lowering.py"]
        # A crash in AOTAutograd: the crash minifier, cut after dynamo (after aot it never reaches the failure).
        crash = mini.new_case()
        seed_localized_accuracy(mini, crash, "AOTAutograd", "aot_eager", category="backend_compiler_failed")
        guide = (await ok(client, "classify_error", case_id=crash, text=CRASH_TEXT))["guide"]
        assert (guide["minify_level"], guide["minify_after"]) == (2, "dynamo"), guide
        assert "TORCHDYNAMO_REPRO_AFTER=dynamo" in guide["config_knobs"]

        # The preset the workflow names runs, and counts for step 6.
        seed_through_main_check(mini, case_id)
        logged = await ok(client, "run_with_logs", **logs_call.arguments)
        assert "logs" in logged["recorded"], logged
        assert mini.store.get_run(logged["runs"][0]["run_id"], case_id).env["TORCH_LOGS"] == \
            "aot_graphs,aot_joint_graph,+aot"
        # Classified, the next step leads with step 8's waiver: no artifact can show a fault outside the graph.
        classified = await ok(client, "classify_error", case_id=case_id, run_id=logged["runs"][0]["run_id"])
        following = (await ok(client, "get_workflow", case_id=case_id))["case"]["next_step"]
        for said in (classified["next_step"], following):
            step8 = said[said.index("Step 8"):]
            assert 'waive_step(case_id="' in step8.split("; or collect", 1)[0], said
            assert "outside the compiled graph" in said and "collect_debug_artifacts(" in said, said
        # Step 8 says no artifact shows a fault outside the graph, and names the wrappers instead of kernels.
        collected = await ok(client, "collect_debug_artifacts", case_id=case_id, script="aot_eager_fails.py")
    text = collected["next_step"]
    assert "None of these artifacts shows the fault" in text and ", ".join(WRAPPERS) in text, text
    assert "check each line of the kernel" not in text and "output_code.py" not in text, text


TWO_OUTPUTS = """
import torch


def f(x, y, w):
    a = (x.sin() * 2).sum(1)
    b = torch.mm(y, w).relu() + 1
    return a, b


x, y, w = torch.randn(8, 16), torch.randn(32, 4), torch.randn(4, 5)
out = torch.compile(f)(x, y, w)
ref = f(x, y, w)
torch.testing.assert_close(out, (ref[0], ref[1] + 1))  # item [1] differs
"""


async def test_the_kernel_writing_the_output_that_differs_is_excerpted_first(mini: Mini, tmp_path: Path):
    """Seen on a real accuracy bug: the step-6 excerpt was cut before the kernel computing the wrong output."""
    (mini.repo / "two_outputs.py").write_text(TWO_OUTPUTS)
    case_id = mini.new_case()
    async with Client(mini.server) as client:
        data = await ok(client, "run_with_logs", case_id=case_id, script="two_outputs.py", logs="output_code",
                        repeat=1)
    names = [k["name"] for k in data["kernels"]]
    assert len(names) == 2, names
    # generated second, but it writes output 1, the item the assertion names
    assert "relu" in names[0] and "sin" in names[1], names
    from pt2_bug_basher.analysis.torch_logs import logged_kernels

    stderr = mini.store.get_run(data["runs"][0]["run_id"], case_id).stderr_path
    text = Path(stderr).read_text()
    kept, left_out = logged_kernels(text, max_chars=names_room(data["kernels"][0]["code"]))
    assert [k.name for k in kept] == [names[0]] and left_out == [names[1]]  # no room for both: the writer stays
    kept, _ = logged_kernels(text.replace("The failure occurred for item [1]", "The failure occurred for item [0]"))
    assert "sin" in kept[0].name  # the item named decides


def names_room(code: str) -> int:
    """Room for one kernel's excerpt and not another's."""
    return len(code) + 150


EAGER_FAILS = """
import torch

torch.compile(lambda x: x + 1, backend="eager")(torch.ones(3))
raise AssertionError("Tensor-likes are not close!")
"""


async def test_a_wrong_result_in_dynamo_logs_its_graph_and_bytecode_not_every_traced_instruction(mini: Mini):
    """Seen by an agent on a dict Dynamo did not write back: step 6 named +dynamo (every traced instruction, the
    crash preset of the layer), where the graph, the bytecode around it and the side effects show the fault."""
    (mini.repo / "eager_fails.py").write_text(EAGER_FAILS)
    for rel in ("torch/_dynamo/symbolic_convert.py", "torch/_inductor/lowering.py"):
        (mini.repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (mini.repo / rel).write_text("")
    case_id = mini.new_case()
    seed_localized_accuracy(mini, case_id, "Dynamo", "eager")
    crash = mini.new_case()
    seed_localized_accuracy(mini, crash, "Dynamo", "eager", category="dynamo_internal")
    async with Client(mini.server) as client:
        steps = steps_of((await ok(client, "get_workflow", case_id=case_id))["case"])
        logs_call = parse_call(steps["logs"]["tool_call"])
        assert logs_call.arguments["logs"] == "dynamo_wrong_result", logs_call
        classified = await ok(client, "classify_error", case_id=case_id, text=ACCURACY_TEXT)
        guide = classified["guide"]
        assert guide["log_preset"] == "graph_code,bytecode,side_effects,guards,recompiles", guide
        # the wrong-result playbook with Dynamo's files, not Dynamo's crash playbook and its +dynamo diagnostic
        assert guide["playbook"] == 'prompt "playbook" with category="accuracy"', guide["playbook"]
        assert guide["source_files"] == ["torch/_dynamo/symbolic_convert.py"], guide["source_files"]
        assert "dynamo_internal" not in classified["diagnostic"], classified["diagnostic"]
        # a crash in Dynamo keeps the layer's preset
        crash_steps = steps_of((await ok(client, "get_workflow", case_id=crash))["case"])
        crash_call = parse_call(crash_steps["logs"]["tool_call"])
        assert crash_call.arguments["logs"] == "dynamo_internal", crash_call
        seed_through_main_check(mini, case_id)
        logged = await ok(client, "run_with_logs", **logs_call.arguments)
        compiled = await ok(client, "run_with_logs", **{**logs_call.arguments, "script": "eager_fails.py"})
    assert "logs" in logged["recorded"], logged
    # the graph Dynamo captured is in the result, not only in the run's stderr
    assert compiled["graphs"] and any("l_x_ + 1" in line for line in compiled["graphs"][0]["code"]), compiled
    env = mini.store.get_run(logged["runs"][0]["run_id"], case_id).env
    assert env["TORCH_LOGS"] == "graph_code,bytecode,side_effects,guards,recompiles", env
