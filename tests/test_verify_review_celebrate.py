"""run_tests, review_changes and celebrate through a real MCP client, and the pytest report and diff
parsing under them, on real pytest runs and real git diffs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest_checkout import LARGE_TEST, VALID_TEST_FILE, Mini, seed_test
from mcp import Client
from torch_checkout import add_test, fix_mini_bug, git

from pt2_bug_basher.execution import review
from pt2_bug_basher.execution.pytest import nearby, results
from pt2_bug_basher.execution.pytest.session import PLUGIN, PLUGIN_DIR
from pt2_bug_basher.execution.worktrees import worktree_path

pytestmark = pytest.mark.anyio


async def call(client: Client, tool: str, **arguments):
    return await client.call_tool(tool, arguments)


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def step(status: dict, name: str) -> dict:
    return next(s for s in status["steps"] if s["step"] == name)


async def prepared(mini: Mini, client: Client) -> str:
    """A case through step 5: reproduced, test registered, failing on main."""
    case_id = mini.new_case()
    mini.reproduce(case_id)
    add_test(mini.repo, "test/test_ops.py", LARGE_TEST)
    registered = await call(client, "register_test", case_id=case_id, test_file="test/test_ops.py",
                            test_name="TestOps.test_double_large")
    assert registered.structured_content["ok"], registered.structured_content
    checked = await call(client, "make_worktree", case_id=case_id, action="create", ref="main")
    assert checked.structured_content["ok"], checked.structured_content
    return case_id


async def test_run_tests_says_when_it_found_no_nearby_test(mini: Mini):
    """Seen by an agent: an empty list of nearby tests, with nothing said about what was searched."""
    (mini.repo / "test" / "test_lonely.py").write_text(VALID_TEST_FILE)
    case_id = mini.new_case()
    mini.reproduce(case_id)
    seed_test(mini.store, case_id, test_file="test/test_lonely.py", class_name="TestSomething", method="test_it")
    async with Client(mini.server) as client:
        await call(client, "waive_step", case_id=case_id, step="main_check", reason="nearby tests are what this checks")
        data = (await call(client, "run_tests", case_id=case_id)).structured_content
    assert data["nearby"] == [], data["nearby"]
    [note] = [n for n in data["notes"] if n.startswith("no nearby test")]
    assert "test/test_lonely.py" in note and "tests=[...]" in note, note
    # the file's only test is the registered one: not counted as a test that shares no keyword
    assert "holds no test but the registered one" in note, note
    # verified on that test alone: said, with the repro's own run as a further check, before the review
    assert data["verified"] is True, data
    assert data["next_step"].startswith("Verified on the registered test alone"), data["next_step"]
    assert "run_with_logs(" in data["next_step"] and "repeat=1)" in data["next_step"]
    assert "review_changes(" in data["next_step"]
    # a test the agent names ran beside it: the verification no longer rests on the registered test alone
    (mini.repo / "test" / "test_company.py").write_text(VALID_TEST_FILE.replace("TestSomething", "TestCompany"))
    async with Client(mini.server) as client:
        given = (await call(client, "run_tests", case_id=case_id,
                            tests=["test/test_company.py::TestCompany::test_it"])).structured_content
    assert given["verified"] is True and given["counts"]["passed"] == 2, given
    assert "alone" not in given["next_step"], given["next_step"]


async def test_verify_review_celebrate(mini: Mini):
    async with Client(mini.server) as client:
        case_id = await prepared(mini, client)
        for tool, args in (("review_changes", {}), ("celebrate", {"root_cause": "r" * 30, "fix_summary": "f" * 30})):
            text = error_text(await call(client, tool, case_id=case_id, **args))
            assert "step 11" in text and "run_tests" in text, text

        # Before the fix: the registered test fails; no verification.
        before = (await call(client, "run_tests", case_id=case_id)).structured_content
        assert before["verified"] is False and before["counts"]["failed"] == 1
        [failure] = before["failed"]
        assert failure["node_id"] == "test/test_ops.py::TestOps::test_double_large"
        assert "double() cannot take 21" in failure["message"] and failure["category"]
        assert failure["frame"] and "ops.py" in failure["frame"]
        assert "not complete" in before["next_step"]

        fix_mini_bug(mini.repo)
        only = (await call(client, "run_tests", case_id=case_id, run_nearby=False)).structured_content
        assert only["registered"].endswith(": passed")
        assert only["verified"] is False and "nearby" in only["verification"]
        assert "double" in only["nearby_keywords"]
        nearby = [n["node_id"] for n in only["nearby"]]
        assert nearby[0] == "test/test_ops.py::TestOps::test_double_small", only["nearby"]
        assert "test/test_ops.py::TestOps::test_halve" in nearby
        assert only["next_step"].startswith("Run the nearby tests too") and "run_nearby=true" in only["next_step"]

        verified = (await call(client, "run_tests", case_id=case_id)).structured_content  # nearby by default
        assert verified["verified"] is True, verified
        assert verified["counts"] == {"passed": 3, "failed": 0, "errored": 0, "skipped": 0, "collection_errors": 0}
        assert "review_changes" in verified["next_step"]
        status = (await call(client, "get_workflow", case_id=case_id)).structured_content["case"]
        assert step(status, "verify")["status"] == "done"

        # A change after verification reopens it: stale, and review and celebrate refuse.
        ops = mini.repo / "pkg" / "ops.py"
        ops.write_text(ops.read_text() + "\n\ndef triple(x):\n    return x * 3\n")
        status = (await call(client, "get_workflow", case_id=case_id)).structured_content["case"]
        assert step(status, "verify")["status"] == "stale"
        for tool, args in (("review_changes", {}), ("celebrate", {"root_cause": "r" * 30, "fix_summary": "f" * 30})):
            text = error_text(await call(client, tool, case_id=case_id, **args))
            assert "earlier state of the code" in text and "run_tests" in text, text

        # A leftover print passes the tests but not the review.
        ops.write_text(ops.read_text().replace("    return x * 3\n", "    print('debug', x)\n    return x * 3\n"))
        assert (await call(client, "run_tests", case_id=case_id, run_nearby=True)).structured_content["verified"]
        reviewed = (await call(client, "review_changes", case_id=case_id)).structured_content
        assert reviewed["ok"] is False
        [leftover] = [f for f in reviewed["findings"] if f["kind"] == "debug_leftover"]
        assert leftover["severity"] == "blocking" and leftover["file"] == "pkg/ops.py"
        assert ops.read_text().splitlines()[leftover["line"] - 1].strip() == "print('debug', x)"
        assert "print(" in reviewed["next_step"]
        assert "Self-review checklist" in reviewed["checklist"]
        assert "+    print('debug', x)" in reviewed["diff"]
        text = error_text(await call(client, "celebrate", case_id=case_id, root_cause="r" * 30, fix_summary="f" * 30))
        assert "step 12" in text and "review_changes" in text

        ops.write_text(ops.read_text().replace("    print('debug', x)\n", ""))
        assert (await call(client, "run_tests", case_id=case_id, run_nearby=True)).structured_content["verified"]
        reviewed = (await call(client, "review_changes", case_id=case_id)).structured_content
        assert reviewed["ok"] is True, reviewed["findings"]
        assert {f["path"] for f in reviewed["files"]} == {"pkg/ops.py", "test/test_ops.py"}
        kinds = {f["kind"] for f in reviewed["findings"]}
        assert "debug_leftover" not in kinds and "test_missing" not in kinds
        assert "celebrate(" in reviewed["next_step"]
        # Whether to commit is the user's call: the review states the fact, and never says to commit.
        said = reviewed["next_step"]
        assert "The change is not committed yet (pkg/ops.py, test/test_ops.py" in said, said
        assert not re.search(r"\bcommit (the|them|what)\b", said, re.I), said
        # Every file the checklist names is in this checkout or marked upstream; the example home is the case's.
        checklist = reviewed["checklist"]
        assert "the topical file for the area (the registered test is in `test/test_ops.py`), not in" in checklist
        assert "test_recompiles.py" not in checklist, checklist  # no other area's example home
        named = re.findall(r"`((?:test|torch)/[\w./-]+)`( \(upstream, not in this checkout\))?", checklist)
        assert len(named) > 5 and all(marked or (mini.repo / rel).exists() for rel, marked in named), named

        # the agent removed the main worktree already: celebrate does not ask for it again
        removed = await call(client, "make_worktree", case_id=case_id, action="remove", ref="main")
        assert not removed.is_error, removed.content
        done = await call(client, "celebrate", case_id=case_id,
                          root_cause="double() rejected inputs above 10 with a ValueError it never needed.",
                          fix_summary="Drop the bogus validation so double() handles every number again.")
        data = done.structured_content
        assert not done.is_error, done.content
        assert data["test_added"] == "test/test_ops.py::TestOps::test_double_large"
        assert "ValueError" in data["failed_before"]
        # the failure printed no rerun line: PyTorch's way to run the test alone is given anyway
        assert data["rerun_command"] == "python test/test_ops.py TestOps.test_double_large"
        assert {t["outcome"] for t in data["tests_verified"]} == {"passed"} and len(data["tests_verified"]) == 3
        assert {s["path"] for s in data["diff_stat"]} == {"pkg/ops.py", "test/test_ops.py"}
        assert data["waivers"] == [{"step": "reduce", "reason": "the repro is already two lines long"}]
        assert data["celebration"].strip()
        assert "The change is not committed yet (pkg/ops.py, test/test_ops.py" in data["next_step"]
        assert not worktree_path(mini.store, case_id, "main").exists()
        assert "make_worktree" not in data["next_step"], data["next_step"]
        assert not re.search(r"\bcommit (the|them|what)\b", data["next_step"] + str(data["worktree_warnings"]),
                             re.I), data
        assert any(w.startswith("not committed yet: pkg/ops.py") for w in data["worktree_warnings"])
        assert "## Root cause" in data["summary"] and "double() rejected" in data["summary"]
        assert "reduce: the repro is already two lines long" in data["summary"]
        status = (await call(client, "get_workflow", case_id=case_id)).structured_content["case"]
        assert step(status, "celebrate")["status"] == "done"
        # The celebration rotates.
        lines = {data["celebration"]}
        for _ in range(3):
            again = await call(client, "celebrate", case_id=case_id, root_cause="r" * 30, fix_summary="f" * 30)
            lines.add(again.structured_content["celebration"])
        assert len(lines) == 4


async def test_verification_after_the_test_changed_points_back_at_the_stale_step(mini: Mini):
    async with Client(mini.server) as client:
        case_id = await prepared(mini, client)
        fix_mini_bug(mini.repo)
        test_file = mini.repo / "test" / "test_ops.py"
        # A comment, blank lines and reordered imports (what a linter fixes) leave the check on main standing ...
        original = test_file.read_text()
        imports = [line for line in original.splitlines() if line.startswith(("import ", "from "))]
        assert len(imports) >= 2, original
        relaid = original.replace(imports[0] + "\n", "").replace(imports[1], imports[1] + "\n" + imports[0])
        test_file.write_text("# sorted by the linter\n\n" + relaid)
        status = (await call(client, "get_workflow", case_id=case_id)).structured_content["case"]
        assert step(status, "main_check")["status"] == "done", step(status, "main_check")
        # ... any other edit of the test file makes it stale
        test_file.write_text(test_file.read_text() + "\n\ndef helper():\n    return 1\n")
        verified = (await call(client, "run_tests", case_id=case_id)).structured_content
    assert verified["verified"] is True, verified
    assert "review_changes(" not in verified["next_step"], verified["next_step"]
    assert "earlier step" in verified["next_step"] and "make_worktree(" in verified["next_step"], verified["next_step"]


async def test_worktree_runs_collection_errors_and_selection(mini: Mini):
    async with Client(mini.server) as client:
        case_id = await prepared(mini, client)
        fix_mini_bug(mini.repo)
        on_main = (await call(client, "run_tests", case_id=case_id, where="worktree")).structured_content
        assert on_main["where"] == "worktree" and on_main["verified"] is False
        assert on_main["registered"].endswith(": failed")  # main still has the bug
        assert "never completes verification" in on_main["next_step"]
        assert not [e for e in mini.store.evidence(case_id, "verify")]

        broken = mini.repo / "test" / "test_broken.py"
        broken.write_text("import pkg.nothing_here\n\ndef test_x():\n    pass\n")
        result = (await call(client, "run_tests", case_id=case_id, tests=["test/test_broken.py",
                                                                          "test/test_ops.py::TestOps::test_halve"],
                             run_nearby=False))
        data = result.structured_content
        assert data["collection_errors"] == [{"file": "test/test_broken.py",
                                              "message": "ModuleNotFoundError: No module named 'pkg.nothing_here'"}]
        assert data["counts"]["failed"] == 0 and data["counts"]["passed"] == 2 and data["verified"] is False
        assert "collection errors" in data["next_step"] or "test_broken.py" in data["next_step"]
        broken.unlink()

        # -k selects over files; with pytest-xdist installed and a file-wide selection, it runs in parallel.
        keyword = (await call(client, "run_tests", case_id=case_id, k="halve", run_nearby=False)).structured_content
        passed = set(keyword["passed"])
        assert passed == {"test/test_ops.py::TestOps::test_halve", "test/test_ops.py::TestOps::test_double_large"}
        assert keyword["workers"] >= 2 and keyword["verified"] is True

        for bad in (["-x"], ["--junitxml=/tmp/x"], ["../outside.py"], ["/etc/passwd"], ["test/nope.py"]):
            assert error_text(await call(client, "run_tests", case_id=case_id, tests=bad))
        assert "option" in error_text(await call(client, "run_tests", case_id=case_id, k="-x"))


async def test_nearby_parametrized_tests_are_suggested_as_node_ids_that_run(mini: Mini):
    """A parametrized neighbour is suggested by its generated node ids (never by the name written in
    the file, which pytest cannot select), and each runs as given."""
    async with Client(mini.server) as client:
        case_id = await prepared(mini, client)
        add_test(mini.repo, "test/test_ops.py", """
@parametrize("n", [1, 2])
def test_double_param(self, n):
    self.assertEqual(double(n), 2 * n)
""")
        path = mini.repo / "test" / "test_ops.py"
        text = path.read_text().replace(
            "from torch.testing._internal.common_utils import TestCase, run_tests",
            "from torch.testing._internal.common_utils import TestCase, instantiate_parametrized_tests, parametrize, "
            "run_tests")
        path.write_text(text.replace("\n\nif __name__", "\n\ninstantiate_parametrized_tests(TestOps)\n\nif __name__"))
        fix_mini_bug(mini.repo)
        data = (await call(client, "run_tests", case_id=case_id)).structured_content
        assert data["registered"] == "test/test_ops.py::TestOps::test_double_large: passed", data
        suggested = [n["node_id"] for n in data["nearby"]]
        variants = [f"test/test_ops.py::TestOps::test_double_param_n_{n}" for n in (1, 2)]
        assert [s for s in suggested if "test_double_param" in s] == variants, data["nearby"]
        ran = (await call(client, "run_tests", case_id=case_id, tests=[variants[1]])).structured_content
        assert variants[1] in ran["passed"] and ran["counts"]["failed"] == 0, ran
        verified = (await call(client, "run_tests", case_id=case_id, run_nearby=True)).structured_content
        assert verified["verified"] is True and set(variants) <= set(verified["passed"]), verified


async def test_run_tests_needs_a_registered_test(mini: Mini):
    case_id = mini.new_case()
    mini.reproduce(case_id)
    async with Client(mini.server) as client:
        text = error_text(await call(client, "run_tests", case_id=case_id))
        assert "step 4" in text and "register_test" in text
        await call(client, "waive_step", case_id=case_id, step="test", reason="cannot write a test for this one")
        text = error_text(await call(client, "run_tests", case_id=case_id))
        assert "no registered test" in text and "register_test(" in text


# -- the report plugin and its reader -------------------------------------------------------------

SAMPLE = '''\
import unittest

import pytest


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


def test_pass():
    pass


def test_fail():
    table = {}
    table["missing"]


def test_setup_error(broken):
    pass


@pytest.mark.skip(reason="not on this platform")
def test_skip():
    pass


class TestUnit(unittest.TestCase):
    def test_assert(self):
        self.assertEqual(1, 2)

    @unittest.skip("no reason")
    def test_skipped(self):
        pass


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n == 1
'''


def run_with_plugin(tmp_path: Path, *args: str) -> results.PytestReport:
    """pytest with the report plugin, the way the server runs it; its report, read back."""
    out = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(PLUGIN_DIR)}
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", PLUGIN, f"--pt2bb-report={out}",
                    "--tb=native", "-q", "--continue-on-collection-errors", f"--rootdir={tmp_path}", *args],
                   cwd=tmp_path, env=env, capture_output=True, timeout=600)
    return results.parse_report(out)


def test_report_plugin_on_a_real_pytest_run(tmp_path: Path):
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "test" / "test_broken.py").write_text("import no_such_module_anywhere\n")
    report = run_with_plugin(tmp_path, "test")
    outcomes = {t.node_id: t.outcome for t in report.tests}
    base = "test/test_sample.py"
    assert outcomes == {
        f"{base}::test_pass": "passed", f"{base}::test_fail": "failed", f"{base}::test_setup_error": "error",
        f"{base}::test_skip": "skipped", f"{base}::TestUnit::test_assert": "failed",
        f"{base}::TestUnit::test_skipped": "skipped", f"{base}::test_param[1]": "passed",
        f"{base}::test_param[2]": "failed",
    }
    assert [c.file for c in report.collection_errors] == ["test/test_broken.py"]
    assert report.collection_errors[0].message == "ModuleNotFoundError: No module named 'no_such_module_anywhere'"
    fail = report.find(f"{base}::test_fail")
    assert fail.message == "KeyError: 'missing'" and fail.line == 15
    cleaned = results.clean_traceback(fail.text)
    assert "_pytest" not in cleaned and "pluggy" not in cleaned
    assert cleaned.startswith("Traceback (most recent call last):") and cleaned.rstrip().endswith("KeyError: 'missing'")
    assert results.relevant_frame(fail.text, base).endswith("test_sample.py:17 in test_fail")
    assert report.find(f"{base}::test_setup_error").message == 'failed on setup with "RuntimeError: fixture broke"'
    assert report.find(f"{base}::TestUnit::test_assert").message == "AssertionError: 1 != 2"
    assert report.find(f"{base}::test_skip").message == "not on this platform"
    info, seen = results.analyse(fail)
    assert info.exception_type == "KeyError" and info.frame and seen.category
    # Every collected item, by its exact node id, with the function it runs.
    collected = {c.node_id: c for c in report.collected}
    assert set(collected) == set(outcomes)
    assert collected[f"{base}::test_param[2]"].template == "test_param"
    assert collected[f"{base}::TestUnit::test_assert"].template == "TestUnit.test_assert"


GENERATED = '''\
from torch.testing._internal.common_utils import TestCase, instantiate_parametrized_tests, parametrize, run_tests


class TestOps(TestCase):
    def test_sorted(self):
        pass

    def test_sorted_key(self):
        pass

    @parametrize("n", [1, 2])
    def test_sorted_param(self, n):
        self.assertEqual(n, 1)


instantiate_parametrized_tests(TestOps)

if __name__ == "__main__":
    run_tests()
'''


def test_report_plugin_selects_by_exact_names(tmp_path: Path):
    """--pt2bb-only keeps a test and its generated variants, by name, never by substring (unlike -k)."""
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_gen.py").write_text(GENERATED)
    base = "test/test_gen.py::TestOps"
    only = run_with_plugin(tmp_path, "--pt2bb-only=TestOps.test_sorted", "test/test_gen.py")
    assert [t.node_id for t in only.tests] == [f"{base}::test_sorted"]
    variants = run_with_plugin(tmp_path, "--pt2bb-only=TestOps.test_sorted_param", "test/test_gen.py")
    assert {t.node_id: t.outcome for t in variants.tests} == {f"{base}::test_sorted_param_n_1": "passed",
                                                              f"{base}::test_sorted_param_n_2": "failed"}
    assert variants.find(f"{base}::test_sorted_param_n_2").message.startswith("AssertionError")


def test_report_parsing_of_broken_input(tmp_path: Path):
    assert results.parse_report('{"$report_type": "TestReport", "nodeid": "t.py::t"').parse_error
    assert results.parse_report(tmp_path / "missing.jsonl").parse_error
    empty = results.parse_report("")
    assert empty.tests == [] and empty.collection_errors == [] and empty.parse_error is None


# -- review findings --------------------------------------------------------------------------------

DIFF = textwrap.dedent('''\
    diff --git a/torch/_dynamo/variables/builtin.py b/torch/_dynamo/variables/builtin.py
    index 1111111..2222222 100644
    --- a/torch/_dynamo/variables/builtin.py
    +++ b/torch/_dynamo/variables/builtin.py
    @@ -10,3 +10,9 @@ class BuiltinVariable:
         def call_sorted(self, tx, obj):
    -        reverse = kwargs["reverse"]
    +        print("sorting", obj)
    +        # print("a comment is fine")
    +        self.print(obj)
    +        breakpoint()
    +        import pdb; pdb.set_trace()
    +<<<<<<< HEAD
             return obj
    diff --git a/test/dynamo/test_repros.py b/test/dynamo/test_repros.py
    index 3333333..4444444 100644
    --- a/test/dynamo/test_repros.py
    +++ b/test/dynamo/test_repros.py
    @@ -20,0 +21,3 @@ class ReproTests:
    +    def test_sorted_plain(self):
    +        print("tests may print")
    +        self.assertEqual(1, 1)
    diff --git a/notes.txt b/notes.txt
    new file mode 100644
    --- /dev/null
    +++ b/notes.txt
    @@ -0,0 +1 @@
    +scratch
    ''')


def test_review_findings_on_a_diff(tmp_path: Path):
    files = review.parse_unified(DIFF)
    assert [(f.path, f.status, len(f.added), f.removed) for f in files] == [
        ("torch/_dynamo/variables/builtin.py", "modified", 6, 1), ("test/dynamo/test_repros.py", "modified", 3, 0),
        ("notes.txt", "added", 1, 0)]
    assert files[0].added[0] == (11, '        print("sorting", obj)')
    diff = review.Diff("main", "a" * 40, "b" * 40, files, DIFF)
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    found = review.findings(diff, tmp_path, "test/dynamo/test_repros.py", "test_sorted_plain")
    debug = [(f.line, f.text.split(":")[0]) for f in found if f.kind == "debug_leftover"]
    assert debug == [(11, "leftover debugging print( in source"), (14, "leftover debugging breakpoint() in source"),
                     (15, "leftover debugging pdb in source")]
    assert all(f.severity == "blocking" for f in found if f.kind in ("debug_leftover", "conflict_marker"))
    assert [f.line for f in found if f.kind == "conflict_marker"] == [16]
    assert not [f for f in found if f.kind == "test_missing"]
    assert [f.file for f in found if f.kind == "unusual_place"] == ["notes.txt"]
    missing = review.findings(diff, tmp_path, "test/dynamo/test_repros.py", "test_other")
    assert [f.severity for f in missing if f.kind == "test_missing"] == ["blocking"]
    assert review.findings(review.Diff("main", "a" * 40, "b" * 40, [], ""), tmp_path, None, None)[0].kind == "empty"
    # Untracked files: a scratch repro at the top is flagged as such; a new source module is checked line by line.
    untracked = [review.FileChange("repro.py", "untracked", added=[(1, "print(fn(x))")]),
                 review.FileChange("torch/_dynamo/helper.py", "untracked", added=[(3, "    print(x)")])]
    found = review.findings(review.Diff("main", "a" * 40, "b" * 40, untracked, ""), tmp_path, None, None)
    assert [(f.file, f.line) for f in found if f.kind == "debug_leftover"] == [("torch/_dynamo/helper.py", 3)]
    assert {f.file for f in found if f.kind == "untracked"} == {"repro.py", "torch/_dynamo/helper.py"}


def test_changed_functions_and_keywords(tmp_path: Path):
    source = tmp_path / "torch" / "_export" / "utils.py"
    source.parent.mkdir(parents=True)
    source.write_text("def is_exporting():\n    return False\n\n\ndef _call_sorted_impl(x):\n    y = x\n    return y\n")
    found = nearby.changed_functions(tmp_path, {"torch/_export/utils.py": [2, 6]})
    assert [(f.name, f.line) for f in found] == [("is_exporting", 1), ("_call_sorted_impl", 5)]
    assert nearby.keywords_for([f.name for f in found]) == ["is_exporting", "exporting", "call_sorted_impl",
                                                            "sorted"]


async def test_review_against_a_real_branch(mini: Mini):
    """The diff is taken against the merge base with main: commits on the branch count, untracked files show."""
    async with Client(mini.server) as client:
        case_id = await prepared(mini, client)
        fix_mini_bug(mini.repo)
        git(mini.repo, "commit", "-q", "-am", "fix double and add its test")
        (mini.repo / "scratch.py").write_text("print('scratch')\n")
        assert (await call(client, "run_tests", case_id=case_id, run_nearby=True)).structured_content["verified"]
        data = (await call(client, "review_changes", case_id=case_id)).structured_content
        assert data["base"].startswith("main @ ")
        assert {(f["path"], f["status"]) for f in data["files"]} == {
            ("pkg/ops.py", "modified"), ("test/test_ops.py", "modified"), ("scratch.py", "untracked")}
        kinds = {(f["kind"], f.get("file")) for f in data["findings"]}
        assert ("untracked", "scratch.py") in kinds and ("unusual_place", "scratch.py") in kinds
        assert data["ok"] is True  # warnings only
        # committed after the review (same content, so the evidence holds): celebrate sees it as added now
        git(mini.repo, "add", "scratch.py")
        git(mini.repo, "commit", "-q", "-m", "add scratch")
        done = (await call(client, "celebrate", case_id=case_id, root_cause="r" * 30,
                           fix_summary="f" * 30)).structured_content
        assert ("scratch.py", "added") in {(f["path"], f["status"]) for f in done["diff_stat"]}
        assert not any("scratch.py is untracked" in w for w in done["worktree_warnings"]), done["worktree_warnings"]
        assert "untracked files" not in done["next_step"], done["next_step"]
