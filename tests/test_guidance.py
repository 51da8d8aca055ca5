"""What the tools tell an agent follows the case: a repro outside the repository runs from the case's own
copy, which later steps find; test and source files are ones the checkout has, chosen by localize's
layer; a step the case has done is never proposed again, and no result prints None."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES
from conftest_checkout import VALID_TEST_FILE, Mini, call, seed_test
from mcp import Client

from pt2_bug_basher.domain.evidence import (
    ArtifactsEvidence,
    LadderRowRecord,
    LocalizeRecord,
    MainCheckEvidence,
    ReduceEvidence,
    ReproduceEvidence,
    Suspect,
)
from pt2_bug_basher.mcp_server.calls import parse_call

pytestmark = pytest.mark.anyio

ACCURACY_TEXT = """Traceback (most recent call last):
  File "/work/repro.py", line 12, in <module>
    torch.testing.assert_close(compiled(x), fn(x))
AssertionError: Tensor-likes are not close!

Mismatched elements: 3 / 3 (100.0%)
"""
DYNAMO_INTERNAL_TEXT = """Traceback (most recent call last):
  File "/work/repro.py", line 12, in <module>
    f(x)
torch._dynamo.exc.InternalTorchDynamoError: AttributeError: 'NoneType' object has no attribute 'items'
"""
TEST_FILE = VALID_TEST_FILE


async def ok(mini: Mini, tool: str, **arguments) -> dict:
    result = await call(mini, tool, **arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def put(repo: Path, *files: str, text: str = TEST_FILE) -> None:
    for rel in files:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)


LENGTH_FLAG = "L['xs'] (list): items guarded, length not"


def seed_accuracy(mini: Mini, case_id: str, layer: str | None = "Dynamo", guard_flags: list[str] | None = None) -> None:
    """An accuracy reproduction (the stale graph of a missing guard) and, if given, the layer localize found and the
    guard shapes its guards run flagged."""
    mini.store.add_evidence(case_id, "reproduce", True, "repro.py failed 2/2 times (accuracy)",
                            data=ReproduceEvidence(script=str(mini.repo / "repro.py"), category="accuracy",
                                                   exception_type="AssertionError",
                                                   message="Tensor-likes are not close!", repeat=2))
    if layer is not None:
        first = {"Dynamo": "eager", "Inductor": "inductor"}[layer]
        mini.store.set_localization(case_id, LocalizeRecord(first_failing=first, layer=layer, table=[
            LadderRowRecord(backend=first, dynamic="False", outcome="same failure"),
            LadderRowRecord(backend=first, dynamic="True", outcome="same failure")], guard_flags=guard_flags or []))


# --------------------------------------------------------------------------------------------
# 1. A repro outside the repository


@pytest.fixture
def elsewhere(tmp_path_factory) -> Path:
    """A directory outside the case's repository and every allowed root, with the user's repro in it."""
    where = tmp_path_factory.mktemp("users_own_dir")
    shutil.copy(EXAMPLES / "graph_break_fullgraph.py", where / "repro.py")  # backend="eager": no Inductor
    return where


async def test_a_repro_outside_the_repository_runs_from_the_cases_copy_that_later_steps_find(
        mini: Mini, elsewhere: Path):
    case_id = mini.new_case()
    original = elsewhere / "repro.py"
    data = await ok(mini, "run_with_logs", case_id=case_id, script=str(original), repeat=2)
    copy = Path(data["script"])
    assert data["reproduced"] and data["failure"]["category"] == "graph_break", data["failure"]
    assert copy.is_relative_to(mini.store.case_dir(case_id)) and copy.read_text() == original.read_text()
    assert any(str(original) in note and str(copy) in note for note in data["notes"]), data["notes"]
    [repro] = [e for e in mini.store.evidence(case_id, "reproduce") if e.ok]
    assert repro.data.script == str(copy) and repro.data.script_origin == str(original)
    # Step 3 starts with localize, on the case's copy, and its gate is open.
    nxt = parse_call(data["next_step"][data["next_step"].index("localize("):])
    assert nxt.tool == "localize" and nxt.arguments == {"case_id": case_id, "script": str(copy)}
    # The case keeps its copy: editing the original changes nothing it reruns.
    original.write_text("raise SystemExit('edited since')\n")
    assert copy.read_text() != original.read_text()

    # collect_debug_artifacts defaults to the reproduction's script: the copy (localize's default: test_localize).
    for step in ("reduce", "test", "main_check"):
        await ok(mini, "waive_step", case_id=case_id, step=step, reason="this test is about the copied repro")
    collected = await ok(mini, "collect_debug_artifacts", case_id=case_id)
    assert collected["script"] == str(copy)
    assert mini.store.get_run(collected["run_id"], case_id).argv[-1] == str(copy)


async def test_a_script_outside_is_copied_only_when_it_is_a_plain_python_file(mini: Mini, elsewhere: Path):
    case_id = mini.new_case()
    (elsewhere / "notes.txt").write_text("print('not a script')\n")
    (elsewhere / "-rf.py").write_text("print('x')\n")
    (elsewhere / "huge.py").write_bytes(b"#" * (4 * 1024 * 1024 + 1))
    os.mkfifo(elsewhere / "pipe.py")
    (elsewhere / "dir.py").mkdir()
    refusals = {
        "notes.txt": "not a Python script (.py)", "-rf.py": "command-line option", "huge.py": "larger than 4 MiB",
        "pipe.py": "not a regular file", "dir.py": "not a regular file", "gone.py": "does not exist",
    }
    for name, expected in refusals.items():
        text = error_text(await call(mini, "run_with_logs", case_id=case_id, script=str(elsewhere / name),
                                     repeat=1, timeout_s=30))
        assert expected in text, (name, text)
    assert mini.store.runs(case_id) == [] and not (mini.store.case_dir(case_id) / "scripts").exists()
    # A script inside the repository runs where it is, as it always did.
    inside = await ok(mini, "run_with_logs", case_id=case_id, script="repro.py", repeat=1, timeout_s=60)
    assert inside["script"] == str(mini.repo / "repro.py")
    assert not [n for n in inside["notes"] if "outside the case's repository" in n], inside["notes"]


# --------------------------------------------------------------------------------------------
# 2. Test and source files: present in the checkout, following localize's layer


async def test_register_test_suggests_files_the_checkout_has_for_the_layer_localize_found(mini: Mini):
    case_id = mini.new_case()
    seed_accuracy(mini, case_id, layer="Dynamo")
    mini.store.add_waiver(case_id, "reduce", "the repro is already two lines long")
    put(mini.repo, "test/dynamo/test_misc.py", "test/dynamo/test_functions.py", "test/inductor/test_torchinductor.py")
    text = error_text(await call(mini, "register_test", case_id=case_id, test_file="test/dynamo/test_misc.py",
                                 test_name="TestSomething.test_it"))
    homes = text[text.index("Better homes"):]
    assert "accuracy failure (localize put it in Dynamo)" in homes and "test/dynamo/test_functions.py" in homes
    # Not Inductor's files for a Dynamo bug, nor files this checkout does not have.
    assert "test_torchinductor" not in homes and "test_repros" not in homes and "test_guard_manager" not in homes


async def test_register_test_names_the_upstream_file_as_absent_when_the_checkout_has_none(mini: Mini):
    case_id = mini.new_case()
    seed_accuracy(mini, case_id, layer="Dynamo")
    mini.store.add_waiver(case_id, "reduce", "the repro is already two lines long")
    put(mini.repo, "test/dynamo/test_misc.py")
    text = error_text(await call(mini, "register_test", case_id=case_id, test_file="test/dynamo/test_misc.py",
                                 test_name="TestSomething.test_it"))
    assert "None of the topical test files" in text and "looks partial" in text
    assert "create test/dynamo/test_repros.py at that very path" in text
    assert "Better homes" not in text


async def test_classify_error_guide_follows_the_layer_and_the_checkout(mini: Mini):
    case_id = mini.new_case()
    seed_accuracy(mini, case_id, layer="Dynamo")
    put(mini.repo, "test/dynamo/test_functions.py", "test/inductor/test_torchinductor.py",
        "torch/_dynamo/guards.py", "torch/_inductor/lowering.py", text="")
    data = await ok(mini, "classify_error", case_id=case_id, text=ACCURACY_TEXT)
    guide = data["guide"]
    assert data["category"] == "accuracy" and guide["layer"] == "Dynamo"
    # a wrong result: the accuracy playbook, with Dynamo's files
    assert guide["playbook"] == 'prompt "playbook" with category="accuracy"'
    assert guide["test_files"] == ["test/dynamo/test_functions.py"]
    assert guide["source_files"] == ["torch/_dynamo/guards.py"] and guide["not_present"] == []
    # Localized in Inductor, the same failure gets Inductor's files.
    other = mini.new_case()
    seed_accuracy(mini, other, layer="Inductor")
    guide = (await ok(mini, "classify_error", case_id=other, text=ACCURACY_TEXT))["guide"]
    assert guide["playbook"] == 'prompt "playbook" with category="accuracy"'
    assert guide["test_files"] == ["test/inductor/test_torchinductor.py"]
    assert guide["source_files"] == ["torch/_inductor/lowering.py"]
    # A checkout with none of them: nothing suggested, the upstream files named as absent.
    for rel in ("test", "torch"):
        shutil.rmtree(mini.repo / rel)
    guide = (await ok(mini, "classify_error", case_id=other, text=ACCURACY_TEXT))["guide"]
    assert guide["test_files"] == [] and guide["source_files"] == []
    assert [entry.split(" ")[0] for entry in guide["not_present"]] == [
        "torch/_inductor/decomposition.py", "test/inductor/test_torchinductor.py"]
    assert all("not present in" in entry for entry in guide["not_present"])


# --------------------------------------------------------------------------------------------
# 6. Guidance from the case's state


async def test_classify_error_never_proposes_a_step_the_case_has_done(mini: Mini):
    case_id = mini.new_case()
    seed_accuracy(mini, case_id, layer="Inductor")
    before = await ok(mini, "classify_error", case_id=case_id, text=ACCURACY_TEXT)
    assert parse_call(before["diagnostic"]).tool == "minify"  # localize ran; the reduction has not
    mini.store.add_evidence(case_id, "reduce", True, "fx reduction 12 -> 3 nodes: repro_min.py fails the same way",
                            data=ReduceEvidence(minimized_path=str(mini.repo / "repro.py"), mode="fx",
                                                comparison="signature"))
    data = await ok(mini, "classify_error", case_id=case_id, text=ACCURACY_TEXT)
    diagnostic = parse_call(data["diagnostic"])
    assert diagnostic.tool == "register_test" and diagnostic.arguments["case_id"] == case_id, data["diagnostic"]
    assert "localize(" not in data["next_step"] and "minify(" not in data["next_step"]


async def test_a_logged_run_before_the_main_check_says_why_it_does_not_count(mini: Mini):
    case_id = mini.new_case()
    mini.reproduce(case_id)
    seed_test(mini.store, case_id)  # a registered test, but no check on main yet
    logged = await ok(mini, "run_with_logs", case_id=case_id, script="repro.py", logs="dynamo_internal", repeat=1,
                      timeout_s=60)
    assert "logs" not in logged["recorded"]
    assert "failed once" not in logged["next_step"], logged["next_step"]
    assert "step 5" in logged["next_step"] and "make_worktree(" in logged["next_step"], logged["next_step"]


async def test_get_workflow_prints_no_none_and_the_logs_step_follows_the_layer(mini: Mini):
    case_id = mini.new_case()
    mini.reproduce(case_id)
    seed_test(mini.store, case_id)
    mini.store.add_evidence(case_id, "main_check", True, "fails on main (seeded)",
                            data=MainCheckEvidence(ref="main", outcome="failed", exception_type="ValueError"))
    # The mini repro does not import torch: its logs say nothing about graphs.
    logged = await ok(mini, "run_with_logs", case_id=case_id, script="repro.py", logs="dynamo_internal", repeat=1,
                      timeout_s=60)
    assert "logs" in logged["recorded"] and logged["graphs_compiled"] is None
    # One logged run of a reproduced case is the logs step: on to classifying, not "confirm it fails twice".
    assert "failed once" not in logged["next_step"] and "classify_error(" in logged["next_step"], logged["next_step"]
    status = (await ok(mini, "get_workflow", case_id=case_id))["case"]
    shown = json.dumps(status)
    assert "None" not in shown, shown
    assert next(s for s in status["steps"] if s["step"] == "logs")["evidence"].endswith("0 recompiles")
    # A Dynamo crash's diagnostic is the preset the case has just run: the workflow's next call instead.
    data = await ok(mini, "classify_error", case_id=case_id, text=DYNAMO_INTERNAL_TEXT)
    assert data["category"] == "dynamo_internal"
    assert parse_call(data["diagnostic"]).tool == "collect_debug_artifacts", data["diagnostic"]
    # With the artifacts step waived, the root cause is found from what the case has, not from artifacts.
    await ok(mini, "waive_step", case_id=case_id, step="artifacts", reason="a tracing error: nothing compiled")
    after = (await ok(mini, "get_workflow", case_id=case_id))["case"]["next_step"]
    assert after.startswith("Find the root cause from the logs,") and "artifacts" not in after, after

    other = mini.new_case()
    seed_accuracy(mini, other, layer="Dynamo")
    steps = {s["step"]: s for s in (await ok(mini, "get_workflow", case_id=other))["case"]["steps"]}
    assert parse_call(steps["logs"]["tool_call"]).arguments["logs"] == "dynamo_wrong_result"


async def test_a_done_steps_call_names_the_script_it_ran_on_not_the_repro(mini: Mini):
    """Seen by an agent: step 8 ran on the minified script, and the workflow recorded it as run on repro.py."""
    case_id = mini.new_case()
    seed_accuracy(mini, case_id)
    minified = mini.repo / "repro min's.py"
    minified.write_text("raise AssertionError('Tensor-likes are not close!')\n")
    mini.store.add_evidence(case_id, "artifacts", True, "collected (seeded)",
                            data=ArtifactsEvidence(script=str(minified), graphs=1))
    steps = {s["step"]: s for s in (await ok(mini, "get_workflow", case_id=case_id))["case"]["steps"]}
    assert steps["artifacts"]["status"] == "done"
    done = parse_call(steps["artifacts"]["tool_call"])
    assert done.tool == "collect_debug_artifacts" and done.arguments == {"case_id": case_id, "script": str(minified)}
    # a pending step still proposes the case's repro
    assert parse_call(steps["logs"]["tool_call"]).arguments["script"] == str(mini.repo / "repro.py")


async def test_step_8_of_a_dynamo_case_offers_its_waiver(mini: Mini):
    """Seen by two agents: after a Dynamo exception localize had pinned, the artifacts step could add nothing."""
    cases = {}
    for layer in ("Dynamo", "Inductor"):
        case_id = cases[layer] = mini.new_case()
        seed_accuracy(mini, case_id, layer=layer)
        for step in ("reduce", "test", "main_check", "logs", "classify"):
            mini.store.add_waiver(case_id, step, "seeded: only step 8 is pending")
    dynamo = (await ok(mini, "get_workflow", case_id=cases["Dynamo"]))["case"]["next_step"]
    assert dynamo.startswith("Step 8") and "collect_debug_artifacts(" in dynamo, dynamo
    waiver = parse_call(dynamo[dynamo.index("waive_step("):])
    assert waiver.arguments["step"] == "artifacts" and "eager" in waiver.arguments["reason"], waiver
    inductor = (await ok(mini, "get_workflow", case_id=cases["Inductor"]))["case"]["next_step"]
    assert "collect_debug_artifacts(" in inductor and "waive_step(" not in inductor, inductor


async def test_a_stale_graph_localize_put_in_dynamos_guards_gets_the_guards_and_recompiles_preset(mini: Mini):
    """Seen by an agent: a missing length guard (localize: Dynamo, "items guarded, length not") got the logs step
    run_with_logs(logs="dynamo_internal"), whose own output then said the recompiles log was off; and it ran the
    repeats and the compile-off run of a case reproduced long before."""
    case_id = mini.new_case()
    seed_accuracy(mini, case_id, layer="Dynamo", guard_flags=[LENGTH_FLAG])
    put(mini.repo, "test/dynamo/test_repros.py", "test/dynamo/test_guard_manager.py")
    steps = {s["step"]: s for s in (await ok(mini, "get_workflow", case_id=case_id))["case"]["steps"]}
    logs_call = parse_call(steps["logs"]["tool_call"])
    assert logs_call.arguments["logs"] == "recompile" and logs_call.arguments["repeat"] == 1, logs_call
    # classify_error's guide and diagnostic agree with it: the recompile playbook and its files.
    data = await ok(mini, "classify_error", case_id=case_id, text=ACCURACY_TEXT)
    guide = data["guide"]
    assert guide["playbook"] == 'prompt "playbook" with category="recompile"', guide
    assert guide["log_preset"] == "recompiles,recompiles_verbose,guards"
    assert guide["test_files"] == ["test/dynamo/test_repros.py", "test/dynamo/test_guard_manager.py"]
    assert parse_call(data["diagnostic"]).arguments.get("logs") == "recompile", data["diagnostic"]


EAGER_WRONG_SUM = """
import torch


def total(xs):
    return sum(xs)


out = torch.compile(total, backend="eager")([torch.ones(2), torch.ones(2)])
torch.testing.assert_close(out, torch.full((2,), 3.0))
"""


async def test_artifacts_of_a_case_no_graph_reached_inductor_name_what_was_collected(mini: Mini):
    """Seen by an agent: with backend='eager' and 0 graphs indexed, collect_debug_artifacts said "Read the graphs
    ... to see what reached Inductor"."""
    case_id = mini.new_case()
    seed_accuracy(mini, case_id, layer="Dynamo", guard_flags=[LENGTH_FLAG])
    seed_test(mini.store, case_id)
    mini.store.add_evidence(case_id, "main_check", True, "fails on main (seeded)",
                            data=MainCheckEvidence(ref="main", outcome="failed", exception_type="AssertionError"))
    (mini.repo / "eager_sum.py").write_text(EAGER_WRONG_SUM)
    async with Client(mini.server) as client:
        logged = await client.call_tool("run_with_logs", {"case_id": case_id, "script": "eager_sum.py",
                                                          "logs": "recompile", "repeat": 1})
        assert "logs" in logged.structured_content["recorded"], logged.structured_content
        result = await client.call_tool("collect_debug_artifacts", {"case_id": case_id, "script": "eager_sum.py"})
        data = result.structured_content
        assert data["failed"] and data["graph_count"] == 0, data
        text = data["next_step"]
        assert "Read the graphs" not in text and "No graph reached Inductor" in text, text
        written = [f for f in data["files"] if f["bytes"] > 0 and f["kind"] != "index"]
        assert any(f["uri"] in text for f in written), (data["files"], text)
        logs_stderr = f"case://{case_id}/runs/{logged.structured_content['runs'][0]['run_id']}/stderr"
        assert logs_stderr in text, text
        named = re.findall(r"case://[^\s(),]+", text)
        assert len(named) >= 3, named
        for uri in named:  # every file it names is there to read
            assert (await client.read_resource(uri)).contents, uri


def test_a_new_test_file_that_is_the_areas_upstream_home_is_kept_not_argued_with(tmp_path: Path):
    """Seen by an agent: register_test called the new test/inductor/test_torchinductor.py 'a new file: prefer an
    existing topical file' and then recommended that very file."""
    from pt2_bug_basher.execution.pytest.static_checks import new_test_file_note

    put(tmp_path, "test/inductor/test_torchinductor.py")
    note = new_test_file_note(tmp_path, "test/inductor/test_torchinductor.py", "accuracy", "Inductor")
    assert "keep it" in note and "prefer" not in note
    # A new file that is not the area's home still gets the area's existing files, never itself.
    put(tmp_path, "test/inductor/test_cpu_repro.py", "test/inductor/test_pow_things.py")
    note = new_test_file_note(tmp_path, "test/inductor/test_pow_things.py", "accuracy", "Inductor")
    assert note.startswith("test/inductor/test_pow_things.py is a new file: prefer an existing topical file")
    assert "test/inductor/test_cpu_repro.py" in note and note.count("test_pow_things") == 1


async def test_classify_error_carries_localizes_suspects(mini: Mini):
    """Seen by an agent: classify_error on the case's accuracy run said suspects: [] after localize had named pow."""
    from pt2_bug_basher.domain.evidence import Suspect

    case_id = mini.new_case()
    seed_accuracy(mini, case_id, layer="Inductor")
    record = mini.store.localization(case_id)
    assert record is not None
    record.suspects = [Suspect(file="torch/_inductor/lowering.py", line=7240, function="pow",
                               why="implements lowerings #0: aten.pow.Tensor_Scalar")]
    mini.store.set_localization(case_id, record)
    data = await ok(mini, "classify_error", case_id=case_id, text=ACCURACY_TEXT)
    assert [(s["function"], s["line"]) for s in data["suspects"]] == [("pow", 7240)]
    assert (await ok(mini, "classify_error", text=ACCURACY_TEXT))["suspects"] == []  # no case: nothing to carry


async def test_a_repro_rewritten_since_the_reproduction_is_named_before_its_verdict(server, workspace: Path):
    """Seen by an agent: PyTorch's minifier wrote over repro.py, and the next run's verdict (user_error) was read
    as the case's. A later run of the same path with other content says so first."""
    import sys

    script = workspace / "repro.py"
    shutil.copy(EXAMPLES / "graph_break_fullgraph.py", script)
    async with Client(server) as client:
        case_id = (await client.call_tool("check_env", {"python": sys.executable})).structured_content["case_id"]
        first = await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script), "repeat": 2})
        assert first.structured_content["reproduced"], first.content[0].text
        same = (await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script),
                                                         "repeat": 1})).structured_content
        assert not any("not the file that reproduced" in n for n in same["notes"])
        script.write_text(script.read_text() + "\nraise SystemExit('rewritten')\n")
        changed = (await client.call_tool("run_with_logs", {"case_id": case_id, "script": str(script),
                                                            "repeat": 1})).structured_content
    assert changed["notes"][0].startswith("repro.py is not the file that reproduced")
    assert changed["next_step"].startswith("repro.py is not the file that reproduced")


def test_the_first_suspect_sentence_names_the_code_generation_after_a_lowering(mini: Mini):
    from pt2_bug_basher.steps.artifacts import _first_suspect

    case_id = mini.new_case()
    lowering = Suspect(file="torch/_inductor/lowering.py", line=7, function="make_reduction.<locals>.inner",
                       why="lowering #2 of aten.amin.default")
    codegen = [Suspect(file="torch/_inductor/codegen/cpp.py", line=164, function=name, why="ran only lowered")
               for name in ("reduction_acc_type", "reduction_init")]
    mini.store.set_localization(case_id, LocalizeRecord(layer="Inductor", suspects=[lowering]))
    alone = _first_suspect(mini.server.state, case_id)  # type: ignore[attr-defined]
    assert alone is not None and "make_reduction" in alone and "code generation" not in alone
    mini.store.set_localization(case_id, LocalizeRecord(layer="Inductor", suspects=[lowering, *codegen]))
    both = _first_suspect(mini.server.state, case_id)  # type: ignore[attr-defined]
    assert both is not None and "reduction_acc_type, reduction_init" in both and "before looking" not in both


def test_a_long_suspect_reason_is_cut_at_whole_clauses_keeping_the_commit():
    from pt2_bug_basher.steps.artifacts import _short_why

    why = ("implements lowerings #3: aten.full.default, the application the bisection isolated; called by "
           "constant_fold_uniform_value (which lowerings #3 runs); the failing run called it 2 time(s); used by no "
           "other function of its module; changed by 4ff97fa1 \"Joint graph: reuse the fill value\" (HEAD itself)")
    short = _short_why(why)
    assert short == ("implements lowerings #3: aten.full.default, the application the bisection isolated; changed "
                     "by 4ff97fa1 \"Joint graph: reuse the fill value\" (HEAD itself)"), short
    assert "\u2026" not in short and _short_why("called by helper") == "called by helper"


@pytest.mark.parametrize(("category", "layer", "reducer"), [
    ("accuracy", "AOTAutograd", ("source", "aot")),  # a wrong result around the graph: no FX minifier sees it
    ("accuracy", "Inductor", ("fx", "aot")),
    ("backend_compiler_failed", "decompositions", ("fx", "dynamo")),  # after aot both sides run the decomposition
    ("backend_compiler_failed", "AOTAutograd", ("fx", "dynamo")),
    ("accuracy", "Dynamo", ("source", "aot")),
    ("graph_break", "Dynamo", ("source", "aot")),
    ("unknown", "Inductor", ("fx", "aot")),
    ("unknown", "Dynamo", ("source", "aot")),
])
def test_localize_and_minify_auto_choose_one_reducer_per_category_and_layer(category, layer, reducer):
    from pt2_bug_basher.playbooks import reducer_for

    assert reducer_for(category, layer) == reducer
