"""What Dynamo decided (compiled entries, recompiles, guards per input), from real TORCH_LOGS=guards,recompiles
output (tests/data/logs/guards_recompiles.*), and localize/run_with_logs on a torch checkout with a
planted guard bug (tests/planted_bugs.py, recipe dynamo_guard), through a real MCP client."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from mcp import Client
from planted_bugs import PLANTED, plant
from torch_checkout import TorchCheckout, build_torch_checkout, installed_torch

from pt2_bug_basher.analysis.guards import logs_recompiles, summarise_guards
from pt2_bug_basher.analysis.torch_logs import parse_logs
from pt2_bug_basher.case.config import ServerConfig
from pt2_bug_basher.execution.dynamo_guards import BUILDER, GUARDS, suspects_for
from pt2_bug_basher.mcp_server.calls import parse_call
from pt2_bug_basher.mcp_server.server import create_server

LOGS = Path(__file__).resolve().parent / "data" / "logs"
RECIPE = PLANTED["dynamo_guard"]


def log(name: str) -> str:
    return (LOGS / name).read_text()


def def_line(path: Path, name: str) -> int:
    """The line of `def name(` in a file, found by reading it line by line."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.match(rf"\s+def {name}\(", line):
            return number
    raise AssertionError(f"no def {name} in {path}")


# ---------------------------------------------------------------------------------------------
# the summary, on stored logs


def test_list_input_with_a_length_guard_recompiles_for_a_longer_list():
    s = summarise_guards(log("guards_recompiles.list_sum.log"), recompiles_logged=True)
    assert (s.frames, s.compiled_entries, s.recompiles, s.recompiled) == (1, 2, 1, True)
    assert s.flags == []
    first, second = s.entries
    xs = first.inputs[0]
    assert (xs.source, xs.type, xs.guards) == ("L['xs']", "list", ["TYPE_MATCH", "LENGTH_CHECK"])
    assert xs.checks == ["len(L['xs']) == 2"] and xs.items == ["[0]", "[1]"]
    assert xs.item_guards["TENSOR_MATCH"] == 2
    assert first.code == "list_sum.py:7 in total"  # the line most of its guards came from
    assert second.compile_id == "0/1" and second.recompiled_because == "len(xs) == 2"
    assert second.unchanged_from == "0/0" and second.inputs[0].checks == ["len(L['xs']) == 3"]
    assert "0/1 because len(xs) == 2 failed" in s.statement
    counts = parse_logs(log("guards_recompiles.list_sum.log"))
    assert (counts.graphs_compiled, counts.frames_compiled) == (2, 2)


def test_planted_guard_bug_items_guarded_length_not_and_no_recompile():
    text = log("guards_recompiles.list_sum.planted.log")
    s = summarise_guards(text, recompiles_logged=True)
    assert (s.frames, s.compiled_entries, s.recompiles, s.recompiled) == (1, 1, 0, False)
    assert "no later call recompiled it" in s.statement and "0/0" in s.statement
    [flag] = s.flags
    assert (flag.kind, flag.source, flag.type, flag.compile_ids) == ("no_length_guard", "L['xs']", "list", ["0/0"])
    assert (flag.missing, flag.wrapped_by) == ("SEQUENCE_LENGTH", "VariableBuilder.wrap_listlike")
    assert "items [0], [1] are guarded but its length is not" in flag.text and flag.text in s.statement
    xs = s.entries[0].inputs[0]
    assert xs.guards == [] and xs.items == ["[0]", "[1]"] and xs.flags == ["no_length_guard"]
    # the counts run_with_logs reports come from the guard trees when nothing else shows them
    counts = parse_logs(text)
    assert (counts.graphs_compiled, counts.frames_compiled) == (1, 1)
    # without recompile logging, no recompile line does not mean no recompile
    unknown = summarise_guards(text)
    assert unknown.recompiled is None and "recompiles log was off" in unknown.statement


def test_planted_log_without_prefixes_and_with_output_in_between():
    text = log("guards_recompiles.list_sum.planted.log")
    prefix = re.compile(r"^V\d{4} [\d:.]+ +\d+ \S+\] \[[\d/]+\] \[__guards\] ")
    bare = "\n".join(prefix.sub("", line) for line in text.splitlines())
    assert "[__guards]" not in bare
    s = summarise_guards(bare, recompiles_logged=True)
    assert [(f.kind, f.source) for f in s.flags] == [("no_length_guard", "L['xs']")]
    # print output between prefixed records neither ends nor corrupts the tree
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "source=L['xs'][0]" in line)
    mixed = "\n".join([*lines[:at], "some print output", "| +- NOT_A_GUARD: from the script", *lines[at:]])
    again = summarise_guards(mixed, recompiles_logged=True)
    assert [(f.kind, f.source, f.compile_ids) for f in again.flags] == [("no_length_guard", "L['xs']", ["0/0"])]
    assert again.entries[0].inputs[0].item_guards == s.entries[0].inputs[0].item_guards
    assert s.entries[0].compile_id == "?/0"  # no prefix, no compile id: entries are numbered


def test_many_input_kinds_raise_no_flag():
    s = summarise_guards(log("guards_recompiles.guard_variety.log"), recompiles_logged=True)
    assert s.flags == []
    assert [e.compile_id for e in s.entries] == ["0/0", "0/1", "0/2", "1/0", "1/1"]
    assert (s.frames, s.recompiles) == (2, 3)
    first = {i.source: i for i in s.entries[0].inputs}
    assert set(first) == {"L['self']", "L['x']", "L['table']", "L['pair']", "L['n']", "L['ints']", "L['nested']",
                          "L['queue']"}
    assert first["L['queue']"].type == "collections.deque" and "LENGTH_CHECK" in first["L['queue']"].guards
    assert first["L['table']"].type == "dict" and first["L['table']"].items == ["['a']"]  # dicts guard used keys
    assert first["L['n']"].checks == ["L['n'] == 3"]
    assert first["L['ints']"].item_guards == {"EQUALS_MATCH": 2}
    assert first["L['x']"].checks == ["tensor torch.float32 size=[3] stride=[1]"]
    assert first["L['self']"].item_guards["TENSOR_MATCH"] == 2  # the Linear's weight and bias
    assert s.entries[0].globals_guarded > 0
    # a recompile lists only the inputs whose guards changed
    n_dynamic = s.entries[1]
    assert n_dynamic.recompiled_because == "n == 3" and n_dynamic.unchanged_from == "0/0"
    assert [i.source for i in n_dynamic.inputs] == ["L['n']"] and n_dynamic.inputs[0].guards == ["TYPE_MATCH"]
    assert n_dynamic.unchanged == 7
    assert s.entries[2].recompiled_because == "len(ints) == 2"
    assert s.entries[4].shape_guards > 0 and "rank mismatch" in (s.entries[4].recompiled_because or "")
    assert "frame 0 (forward) compiled 3 times (0/0, 0/1, 0/2)" in s.statement
    assert "frame 1 (scaled) compiled twice" in s.statement


def test_verbose_recompiles_with_guards():
    s = summarise_guards(log("recompiles_verbose_guards.recompile_reasons.log"), recompiles_logged=True)
    assert [e.compile_id for e in s.entries] == ["0/0", "0/1", "0/2", "0/3"]
    assert [e.recompiled_because for e in s.entries[1:]] == [
        "tensor 'x' size mismatch at index 0. expected 3, actual 4",
        "tensor 'x' dtype mismatch. expected Float, actual Double", "scale == 2"]
    assert s.flags == []


def test_recompiles_only_and_nothing():
    s = summarise_guards(log("recompiles.recompile_reasons.log"), recompiles_logged=True)
    assert s.entries == [] and s.recompiles == 3 and s.recompiled is True
    assert "later calls recompiled it 3 times" in s.statement
    assert parse_logs(log("recompiles.recompile_reasons.log")).frames_compiled == 4  # 0/0..0/3
    empty = summarise_guards("", recompiles_logged=True)
    assert empty.recompiled is False and "no recompile was logged" in empty.statement
    assert logs_recompiles("+dynamo,recompiles_verbose") and not logs_recompiles("guards")
    assert not logs_recompiles(None)


def test_suspects_resolve_to_the_torch_that_runs():
    from torch._dynamo.guards import GuardBuilder
    from torch._dynamo.variables.builder import VariableBuilder

    flags = summarise_guards(log("guards_recompiles.list_sum.planted.log"), recompiles_logged=True).flags
    torch_dir = installed_torch()
    wrap, guard = suspects_for(flags, torch_dir)
    assert (wrap.file, wrap.function) == (BUILDER, "VariableBuilder.wrap_listlike")
    assert wrap.line == inspect.getsourcelines(VariableBuilder.wrap_listlike)[1] + _decorators(
        VariableBuilder.wrap_listlike)
    # this torch still installs the guard: the suspect says where
    install = next(n for n, line in enumerate((torch_dir.parent / BUILDER).read_text().splitlines(), 1)
                   if n > wrap.line and "GuardBuilder.SEQUENCE_LENGTH" in line)
    assert f"at line(s) {install}" in wrap.why and "L['xs']" in wrap.why
    assert (guard.file, guard.function) == (GUARDS, "GuardBuilder.SEQUENCE_LENGTH")
    assert guard.line == def_line(torch_dir / "_dynamo" / "guards.py", "SEQUENCE_LENGTH")
    assert guard.line == inspect.getsourcelines(GuardBuilder.SEQUENCE_LENGTH)[1] + _decorators(
        GuardBuilder.SEQUENCE_LENGTH)
    missing = suspects_for(flags, None)
    assert all(s.line is None and "could not be located" in s.why for s in missing)


def _decorators(function) -> int:
    """inspect starts a function at its first decorator; the suspect points at its `def` line."""
    lines, _ = inspect.getsourcelines(function)
    return next(i for i, line in enumerate(lines) if line.lstrip().startswith("def "))


# ---------------------------------------------------------------------------------------------
# localize and run_with_logs on a checkout with the bug planted


@pytest.fixture(scope="module")
def guard_bug_checkout(tmp_path_factory: pytest.TempPathFactory) -> TorchCheckout:
    checkout = build_torch_checkout(tmp_path_factory.mktemp("guards"))
    plant(checkout.checkout, RECIPE)
    (checkout.checkout / "repro_list_sum.py").write_text(RECIPE.repro)
    return checkout


@pytest.mark.slow
@pytest.mark.anyio
async def test_localize_names_the_missing_length_guard(guard_bug_checkout: TorchCheckout):
    checkout = guard_bug_checkout.checkout
    config = ServerConfig(state_dir=guard_bug_checkout.root / "state", default_repo=checkout,
                          allowed_roots=(guard_bug_checkout.root,))
    async with Client(create_server(config)) as client:
        env = await client.call_tool("check_env", {"python": str(guard_bug_checkout.python), "repo": str(checkout)})
        assert not env.is_error and env.structured_content["torch"]["imported_from_repo"], env.content[0].text
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": "repro_list_sum.py",
                                                       "repeat": 2})
        assert run.structured_content["reproduced"], run.structured_content
        assert run.structured_content["failure"]["category"] == "accuracy"
        result = await client.call_tool("localize", {"case_id": case_id})
        workflow = await client.call_tool("get_workflow", {"case_id": case_id})
        logs = await client.call_tool("run_with_logs", {"case_id": case_id, "script": "repro_list_sum.py",
                                                        "repeat": 1, "logs": "guards,recompiles"})
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data["first_failing"] == "eager" and data["layer"] == "Dynamo", data["table"]
    dynamo = data["dynamo"]
    assert dynamo["recompiled"] is False and dynamo["compiled_entries"] == 1
    assert "no later call recompiled it" in dynamo["statement"]
    [flag] = dynamo["flags"]
    assert (flag["kind"], flag["source"], flag["type"]) == ("no_length_guard", "L['xs']", "list")
    # the suspects point into the checkout's own (planted) sources
    wrap, guard = data["suspects"][:2]
    assert (wrap["file"], wrap["function"]) == (BUILDER, "VariableBuilder.wrap_listlike")
    assert wrap["line"] == def_line(checkout / BUILDER, "wrap_listlike")
    assert "never names GuardBuilder.SEQUENCE_LENGTH" in wrap["why"]
    assert (guard["file"], guard["line"]) == (GUARDS, def_line(checkout / GUARDS, "SEQUENCE_LENGTH"))
    assert any("L['xs']" in note for note in data["notes"])
    assert len(result.content[0].text) < 12000
    # the flag is the evidence the logs step follows: the preset that shows guards and recompiles, one run
    steps = {s["step"]: s for s in workflow.structured_content["case"]["steps"]}
    logs_call = parse_call(steps["logs"]["tool_call"])
    assert (logs_call.arguments["logs"], logs_call.arguments["repeat"]) == ("recompile", 1), logs_call
    # run_with_logs with the guard logs: the counts and the same summary
    assert not logs.is_error, logs.content[0].text
    shown = logs.structured_content
    assert (shown["graphs_compiled"], shown["frames_compiled"]) == (1, 1)
    assert shown["dynamo"]["recompiled"] is False and shown["dynamo"]["flags"][0]["source"] == "L['xs']"
    assert "no later call recompiled it" in shown["dynamo"]["statement"]
    # ... and the same suspects localize named from that flag
    assert [(s["file"], s["function"], s["line"]) for s in shown["suspects"][:2]] == [
        (wrap["file"], wrap["function"], wrap["line"]), (guard["file"], guard["function"], guard["line"])]


def test_the_side_effects_log_names_the_callers_objects_dynamo_wrote_back(tmp_path: Path):
    """A real run: the compiled function pops a key from an input dict, sets another and appends to a list."""
    import os
    import subprocess
    import sys

    from pt2_bug_basher.analysis.guards import GUARD_LOGS, replayed_mutations

    script = tmp_path / "step.py"
    script.write_text(
        "import torch\n\n\n"
        "def step(x, state, seen):\n"
        "    scale = state.pop('scale')\n"
        "    state['calls'] = 1\n"
        "    seen.append(2)\n"
        "    return x * scale\n\n\n"
        "torch.compile(step, backend='eager')(torch.ones(2), {'scale': 2.0}, [])\n")
    err = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "TORCH_LOGS": GUARD_LOGS}).stderr
    by_source = {m.source: m for m in replayed_mutations(err)}
    assert by_source["L['state']"].type == "dict", err[-3000:]
    assert by_source["L['state']"].statements == ["step.py:5 `scale = state.pop('scale')`",
                                                  "step.py:6 `state['calls'] = 1`"]
    assert by_source["L['seen']"].statements == ["step.py:7 `seen.append(2)`"]
    decisions = summarise_guards(err, recompiles_logged=True)
    assert decisions.mutations and "wrote back its mutations of dict L['state']" in decisions.statement
    assert replayed_mutations(log("guards_recompiles.list_sum.log")) == []  # guards alone: no side_effects log
