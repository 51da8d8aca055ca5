"""review_changes runs the checkout's linter on the changed lines, through a real MCP client on a real git
repository: ruff from the case's interpreter, or a clear word that none is installed there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest_checkout import LARGE_TEST, Mini, seed_test
from mcp import Client
from torch_checkout import add_test, fix_mini_bug, git

pytestmark = pytest.mark.anyio


async def call(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


RUFF_CONFIG = '[lint]\nselect = ["F"]\n'
OPS_WITH_OLD_LINT = "import os\n\n\ndef double(x):\n"  # an unused import already on main: not the change's


async def reviewed_with_lint(mini: Mini, python: str, config: str | None = RUFF_CONFIG, added: str = "",
                             test_text: str = LARGE_TEST, shortened: str | None = None) -> dict:
    """A case whose change adds a lint error next to one main already had; review it with `python`."""
    ops = mini.repo / "pkg" / "ops.py"
    git(mini.repo, "checkout", "-q", "main")
    if config is not None:
        (mini.repo / "ruff.toml").write_text(config)
    ops.write_text(ops.read_text().replace("def double(x):\n", OPS_WITH_OLD_LINT, 1))
    if shortened:  # a module the change only removes a line from
        (mini.repo / shortened).write_text("A = 1\nB = 2\n")
    git(mini.repo, "add", "-A")
    git(mini.repo, "commit", "-q", "-m", "lint config")
    git(mini.repo, "checkout", "-q", "work")
    git(mini.repo, "merge", "-q", "--ff-only", "main")
    add_test(mini.repo, "test/test_ops.py", test_text)
    fix_mini_bug(mini.repo)
    if shortened:
        (mini.repo / shortened).write_text("A = 1\n")
    ops.write_text(ops.read_text() + "\n\ndef triple(x):\n" + added + "    unused = x\n    return x * 3\n")
    case_id = mini.new_case(python=python)
    seed_test(mini.store, case_id)
    async with Client(mini.server) as client:
        for step in ("main_check", "verify"):
            await call(client, "waive_step", case_id=case_id, step=step, reason="lint is what this case checks")
        return await call(client, "review_changes", case_id=case_id)


async def test_review_runs_ruff_on_the_changed_lines(mini: Mini):
    data = await reviewed_with_lint(mini, sys.executable)
    lint = data["lint"]
    assert lint["linter"] == "ruff" and lint["status"] == "ran", lint
    assert set(lint["files"]) == {"pkg/ops.py", "test/test_ops.py"}
    lines = (mini.repo / "pkg" / "ops.py").read_text().splitlines()
    unused_line = lines.index("    unused = x") + 1
    assert [(f["file"], f["line"], f["code"]) for f in lint["on_changed_lines"]] == [("pkg/ops.py", unused_line,
                                                                                      "F841")]
    assert lint["findings_in_files"] == 2  # the unused import on main's line is not the change's
    assert f"1 other finding(s) on lines the change did not touch (all of them: the output of run {lint['run_id']})" \
        in lint["note"], lint["note"]
    [finding] = [f for f in data["findings"] if f["kind"] == "lint"]
    assert finding["severity"] == "warning" and (finding["file"], finding["line"]) == ("pkg/ops.py", unused_line)
    assert f"pkg/ops.py:{unused_line}" in finding["text"] and "F841" in finding["text"]
    assert data["ok"] is True and f"pkg/ops.py:{unused_line}" in data["next_step"]
    assert "make_worktree" not in data["next_step"]  # the registered test is clean: the check on main stands
    run = mini.store.get_run(lint["run_id"])
    assert run.argv[:4] == [sys.executable, "-m", "ruff", "check"] and run.cwd == str(mini.repo)
    assert data["tests_added"] == ["test/test_ops.py::TestOps::test_double_large"]


async def test_without_a_lint_config_the_defaults_are_named_and_import_order_left_out(mini: Mini):
    data = await reviewed_with_lint(mini, sys.executable, config=None, added="    import sys\n    import os\n")
    lint = data["lint"]
    assert lint["status"] == "ran", lint
    codes = {f["code"] for f in lint["on_changed_lines"]}
    assert "F841" in codes and not any(code.startswith("I") for code in codes), lint
    assert "no ruff configuration" in lint["note"] and "import-order findings were left out" in lint["note"], lint
    # with a configuration that selects import order, those findings stand
    configured = await reviewed_with_lint(mini, sys.executable, config='[lint]\nselect = ["F", "I"]\n',
                                          added="    import sys\n    import os\n")
    assert "I001" in {f["code"] for f in configured["lint"]["on_changed_lines"]}, configured["lint"]
    assert "no ruff configuration" not in configured["lint"]["note"]


async def test_a_file_the_change_only_shortens_is_named_as_not_linted(mini: Mini):
    data = await reviewed_with_lint(mini, sys.executable, shortened="pkg/extra.py")
    assert "pkg/extra.py" not in data["lint"]["files"]
    assert "Not linted: pkg/extra.py (the change only removes lines there)" in data["lint"]["note"], data["lint"]


async def test_lint_in_the_registered_test_says_the_check_on_main_is_redone(mini: Mini):
    data = await reviewed_with_lint(mini, sys.executable, test_text=LARGE_TEST.replace(
        "    self.assertEqual", "    unused = 1\n    self.assertEqual"))
    assert any(f["file"] == "test/test_ops.py" for f in data["lint"]["on_changed_lines"]), data["lint"]
    step = data["next_step"]
    assert step.index("make_worktree(") < step.index("run_tests(") < step.index("review_changes("), step


async def test_review_says_when_no_linter_is_installed(mini: Mini, venv_without_torch: Path):
    data = await reviewed_with_lint(mini, str(venv_without_torch / "bin" / "python"))
    lint = data["lint"]
    assert lint["linter"] is None and lint["status"] == "no_linter" and lint["on_changed_lines"] == []
    assert "neither ruff nor flake8" in lint["note"] and str(venv_without_torch) in lint["note"]
    assert not [f for f in data["findings"] if f["kind"] == "lint"]




def test_linter_output_is_read_relative_to_the_checkout(tmp_path: Path):
    from pt2_bug_basher.execution.lint import parse_flake8, parse_ruff

    (tmp_path / "pkg").mkdir()
    flake8 = "pkg/ops.py:7:5: F841 local variable 'unused' is assigned to but never used\nnot a finding line\n"
    [found] = parse_flake8(flake8, tmp_path)
    assert (found.where, found.column, found.code) == ("pkg/ops.py:7", 5, "F841")
    ruff = f'[{{"filename": "{tmp_path}/pkg/ops.py", "location": {{"row": 3, "column": 1}}, "code": null, ' \
           '"message": "SyntaxError: unexpected indent"}]'
    [syntax] = parse_ruff(ruff, tmp_path)
    assert (syntax.where, syntax.code) == ("pkg/ops.py:3", "syntax")
    with pytest.raises(ValueError):
        parse_ruff("error: unexpected argument '--output-format'", tmp_path)
