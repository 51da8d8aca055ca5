"""What the tools tell an agent follows the case: a repro outside the repository runs from the case's own
copy, which later steps find."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES
from conftest_checkout import Mini
from mcp import Client

from pt2_bug_basher.mcp_server.calls import parse_call

pytestmark = pytest.mark.anyio


async def call(mini: Mini, tool: str, **arguments):
    async with Client(mini.server) as client:
        return await client.call_tool(tool, arguments)


async def ok(mini: Mini, tool: str, **arguments) -> dict:
    result = await call(mini, tool, **arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


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
    assert mini.store.get_run(collected["run_id"], case_id).argv[1] == str(copy)


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
    assert inside["script"] == str(mini.repo / "repro.py") and inside["notes"] == []
