"""register_test through a real MCP client: static checks by AST, real pytest runs, the gate it opens."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest_checkout import LARGE_TEST, VALID_TEST_FILE, Mini, call
from torch_checkout import add_test

from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.execution.pytest.results import parse_report
from pt2_bug_basher.execution.pytest.static_checks import check_test_file, split_test_name, topical_problem

pytestmark = pytest.mark.anyio

VALID_FILE = VALID_TEST_FILE


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


@pytest.fixture
def case(mini: Mini) -> str:
    case_id = mini.new_case()
    mini.reproduce(case_id)
    return case_id


@pytest.mark.parametrize("rel,content,test_name,expected", [
    ("test/dynamo/test_misc.py", VALID_FILE, "TestSomething.test_it", "catch-all"),
    ("test/test_ops.py", VALID_FILE.replace("(TestCase)", "(unittest.TestCase)").replace(
        "from torch", "import unittest\nfrom torch"), "TestSomething.test_it", "does not derive from"),
    ("test/test_ops.py", VALID_FILE.replace('if __name__ == "__main__":\n    run_tests()\n', ""),
     "TestSomething.test_it", "must end with `if __name__"),
    ("test/test_ops.py", VALID_FILE.replace("    run_tests()", "    print('no harness')"),
     "TestSomething.test_it", "must end with `if __name__"),
    ("test/test_ops.py", VALID_FILE, "TestSomething.test_nope", "has no method 'test_nope'"),
    ("test/test_ops.py", VALID_FILE, "test_nope", "no test named 'test_nope'"),
    ("test/test_ops.py", VALID_FILE, "TestOther.test_it", "no class 'TestOther'"),
    ("test/test_issue_1234.py", VALID_FILE, "TestSomething.test_it", "named after a bug"),
])
async def test_static_checks_refuse(mini: Mini, case: str, rel, content, test_name, expected):
    path = mini.repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    text = error_text(await call(mini, "register_test", case_id=case, test_file=rel, test_name=test_name))
    assert expected in text, text
    assert "register_test(" in text  # names the call to make once fixed
    assert "Traceback" not in text
    # Refused before running anything: no run was recorded, the gate is still closed.
    assert mini.store.runs(case) == []
    gate = error_text(await call(mini, "make_worktree", case_id=case, action="create"))
    assert "step 4" in gate and "register_test" in gate


async def test_test_misc_refusal_suggests_topical_files(mini: Mini, case: str):
    path = mini.repo / "test" / "dynamo" / "test_misc.py"
    path.parent.mkdir(parents=True)
    path.write_text(VALID_FILE)
    (path.parent / "test_repros.py").write_text(VALID_FILE)  # suggestions are files the checkout has
    text = error_text(await call(mini, "register_test", case_id=case, test_file="test/dynamo/test_misc.py",
                                 test_name="test_it"))
    assert "test/dynamo/test_misc.py is a catch-all file" in text
    assert "test/dynamo/test_repros.py" in text and "Better homes" in text


async def test_paths_are_confined_to_the_repository(mini: Mini, case: str, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "test_x.py"
    outside.write_text(VALID_FILE)
    text = error_text(await call(mini, "register_test", case_id=case, test_file=str(outside), test_name="test_it"))
    assert "outside" in text
    text = error_text(await call(mini, "register_test", case_id=case, test_file="../state/x/test_x.py",
                                 test_name="test_it"))
    assert "outside" in text


async def test_a_failing_test_that_matches_the_reproduction_is_registered(mini: Mini, case: str):
    add_test(mini.repo, "test/test_ops.py", LARGE_TEST)
    closed = error_text(await call(mini, "run_tests", case_id=case))
    assert "register_test" in closed
    result = await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                        test_name="TestOps.test_double_large")
    data = result.structured_content
    assert not result.is_error and data["ok"] is True, data
    assert data["node_id"] == "test/test_ops.py::TestOps::test_double_large"
    assert data["outcome"] == "failed"
    assert data["failure"]["exception_type"].endswith("ValueError")
    assert "double() cannot take 21" in data["failure"]["message"]
    assert "test_ops.py" in data["failure"]["frame"] or "ops.py" in data["failure"]["frame"]
    assert "make_worktree" in data["next_step"] and "makes it stale" in data["next_step"]
    [evidence] = [e for e in mini.store.evidence(case, "test") if e.ok]
    assert evidence.tree_hash and evidence.run_id == data["run_id"]
    assert evidence.data.test_file == "test/test_ops.py"
    assert evidence.data.test_name == "TestOps.test_double_large"
    assert evidence.data.node_id == data["node_id"]
    assert evidence.data.category and evidence.data.message
    # The run is recorded with pytest's command line; the report plugin writes its results under the case.
    run = mini.store.get_run(data["run_id"], case)
    assert run.argv[1:3] == ["-m", "pytest"] and "pt2bb_pytest_report" in run.argv
    [report] = [a.split("=", 1)[1] for a in run.argv if a.startswith("--pt2bb-report=")]
    assert Path(report).is_relative_to(mini.store.case_dir(case)) and Path(report).is_file()
    # A bare method name works when it is unique in the file.
    again = await call(mini, "register_test", case_id=case, test_file="test/test_ops.py", test_name="test_double_large")
    assert again.structured_content["ok"] is True


async def test_a_test_whose_subtests_fail_is_failed(mini: Mini, case: str):
    """pytest reports a test's own call phase as passed when only its subtests failed: the subtests decide."""
    add_test(mini.repo, "test/test_ops.py", """
def test_double_each(self):
    for n in (2, 21):
        with self.subTest(n=n):
            self.assertEqual(double(n), 2 * n)

def test_halve_each(self):
    for n in (2, 4):
        with self.subTest(n=n):
            self.assertEqual(n // 2 * 2, n)
""")
    data = (await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                       test_name="TestOps.test_double_each")).structured_content
    assert data["ok"] is True and data["outcome"] == "failed", data
    assert data["failure"]["exception_type"].endswith("ValueError")
    assert "double() cannot take 21" in data["failure"]["message"]
    passing = (await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                          test_name="TestOps.test_halve_each")).structured_content
    assert passing["ok"] is False and passing["outcome"] == "passed", passing


async def test_a_passing_test_is_refused_and_the_gate_stays_closed(mini: Mini, case: str):
    result = await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                        test_name="TestOps.test_halve")
    data = result.structured_content
    assert data["ok"] is False and data["outcome"] == "passed" and not data["recorded"]
    assert "PASSES" in data["comparison"] and "register_test(" in data["next_step"]
    gate = error_text(await call(mini, "make_worktree", case_id=case, action="create"))
    assert "not complete" in gate and "register_test" in gate
    status = (await call(mini, "get_workflow", case_id=case)).structured_content["case"]
    step = next(s for s in status["steps"] if s["step"] == "test")
    assert step["status"] == "failed" and "passed" in step["evidence"]


async def test_a_test_failing_for_another_reason_is_refused(mini: Mini, case: str):
    add_test(mini.repo, "test/test_ops.py", """
def test_typo(self):
    self.assertEqual(doubel(21), 42)
""")
    data = (await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                       test_name="TestOps.test_typo")).structured_content
    assert data["ok"] is False and data["outcome"] == "failed"
    assert data["failure"]["exception_type"].endswith("NameError")
    assert "NameError" in data["comparison"] and "mistake in the test" in data["comparison"]
    assert "ValueError" in data["comparison"]  # what the reproduction showed
    assert not [e for e in mini.store.evidence(case, "test") if e.ok]


async def test_a_test_failing_with_a_different_exception_is_refused(mini: Mini, case: str):
    add_test(mini.repo, "test/test_ops.py", """
def test_other_failure(self):
    raise KeyError("unrelated")
""")
    data = (await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                       test_name="TestOps.test_other_failure")).structured_content
    assert data["ok"] is False and "KeyError" in data["comparison"] and "ValueError" in data["comparison"]


async def test_a_file_that_does_not_import_is_a_collection_error(mini: Mini, case: str):
    path = mini.repo / "test" / "test_ops.py"
    path.write_text("import pkg.no_such_module\n" + path.read_text())
    add_test(mini.repo, "test/test_ops.py", LARGE_TEST)
    data = (await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                       test_name="TestOps.test_double_large")).structured_content
    assert data["ok"] is False and data["outcome"] == "collection_error"
    assert "No module named 'pkg.no_such_module'" in data["comparison"]


async def test_register_test_needs_reproduction_and_reduction(mini: Mini):
    case_id = mini.new_case()
    text = error_text(await call(mini, "register_test", case_id=case_id, test_file="test/test_ops.py",
                                 test_name="test_halve"))
    assert "step 2" in text and "run_with_logs" in text
    mini.reproduce(case_id, waive_reduce=False)
    text = error_text(await call(mini, "register_test", case_id=case_id, test_file="test/test_ops.py",
                                 test_name="test_halve"))
    assert "step 3" in text and "localize(" in text and "waive_step" in text  # step 3 starts with the ladder


# -- the static checks on their own ---------------------------------------------------------------

def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


GUARD = '\n\nif __name__ == "__main__":\n    run_tests()\n'


@pytest.mark.parametrize("header,base", [
    ("from torch.testing._internal.common_utils import TestCase as TC, run_tests", "TC"),
    ("from torch.testing._internal import common_utils\nfrom torch.testing._internal.common_utils import run_tests",
     "common_utils.TestCase"),
    ("import torch.testing._internal.common_utils as cu\nrun_tests = cu.run_tests", "cu.TestCase"),
    ("import torch.testing._internal.common_utils\nfrom torch.testing._internal.common_utils import run_tests",
     "torch.testing._internal.common_utils.TestCase"),
    ("import torch._dynamo.test_case\nfrom torch._dynamo.test_case import run_tests",
     "torch._dynamo.test_case.TestCase"),
    ("from torch._dynamo.test_case import TestCase as DynamoTestCase, run_tests", "DynamoTestCase"),
    ("from torch.testing._internal.common_utils import TestCase, run_tests\n\nclass Base(TestCase):\n    pass",
     "Base"),
])
def test_testcase_resolution_follows_imports_aliases_and_subclasses(tmp_path: Path, header: str, base: str):
    # A repository module that re-exports common_utils.TestCase under another name, like Dynamo's.
    _write(tmp_path, "torch/_dynamo/test_case.py", """\
        from torch.testing._internal.common_utils import TestCase as TorchTestCase, run_tests

        class TestCase(TorchTestCase):
            pass
        """)
    path = _write(tmp_path, "test/dynamo/test_repros.py",
                  header + f"\n\n\nclass ReproTests({base}):\n    def test_x(self):\n        pass\n" + GUARD)
    check = check_test_file(tmp_path, path, "ReproTests.test_x")
    assert check.problems == [], check.problems
    assert check.node_id == "test/dynamo/test_repros.py::ReproTests::test_x"


def test_classes_that_only_look_like_testcase_are_refused(tmp_path: Path):
    path = _write(tmp_path, "test/test_things.py", """\
        import unittest
        from torch.testing._internal.common_utils import run_tests

        class TestCase(unittest.TestCase):
            pass

        class TestThings(TestCase):
            def test_a(self):
                pass

        if __name__ == "__main__":
            run_tests()
        """)
    check = check_test_file(tmp_path, path, "TestThings.test_a")
    assert len(check.problems) == 1 and "does not derive from" in check.problems[0]


def test_ambiguous_and_module_level_names(tmp_path: Path):
    path = _write(tmp_path, "test/test_things.py", """\
        from torch.testing._internal.common_utils import TestCase, run_tests

        def test_free():
            pass

        class TestA(TestCase):
            def test_same(self):
                pass

        class TestB(TestCase):
            def test_same(self):
                pass

        if __name__ == "__main__":
            run_tests()
        """)
    assert "several classes" in check_test_file(tmp_path, path, "test_same").problems[0]
    assert "module-level" in check_test_file(tmp_path, path, "test_free").problems[0]
    assert check_test_file(tmp_path, path, "TestB.test_same").problems == []
    assert check_test_file(tmp_path, path, "test/test_things.py::TestA::test_same").class_name == "TestA"


def test_test_names_and_topical_files():
    assert split_test_name("A.test_b") == ("A", "test_b")
    assert split_test_name("test_b") == (None, "test_b")
    assert split_test_name("test/x.py::A::test_b") == ("A", "test_b")
    for bad in ("a.b.c", "-k", "x; y", ""):
        with pytest.raises(InvalidInput):
            split_test_name(bad)
    assert topical_problem("test/dynamo/test_misc.py")
    assert topical_problem("test/dynamo/test_repros.py") is None
    assert topical_problem("test/inductor/test_torchinductor.py") is None
    assert topical_problem("test/test_bug_123.py")
    assert topical_problem("torch/foo.py")
    assert topical_problem("test_repros.py")  # not under test/


async def test_generated_test_names_are_selected_by_keyword(mini: Mini, case: str):
    """instantiate_parametrized_tests renames the methods; the test is still found and run."""
    add_test(mini.repo, "test/test_ops.py", """
@parametrize("n", [21, 22])
def test_double_param(self, n):
    self.assertEqual(double(n), 2 * n)
""")
    path = mini.repo / "test" / "test_ops.py"
    text = path.read_text().replace(
        "from torch.testing._internal.common_utils import TestCase, run_tests",
        "from torch.testing._internal.common_utils import (\n    TestCase, instantiate_parametrized_tests, "
        "parametrize, run_tests,\n)")
    path.write_text(text.replace('\n\nif __name__', '\n\ninstantiate_parametrized_tests(TestOps)\n\nif __name__'))
    result = await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                        test_name="TestOps.test_double_param")
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert data["ok"] is True, data
    assert data["node_id"].startswith("test/test_ops.py::TestOps::test_double_param_n_")
    [evidence] = [e for e in mini.store.evidence(case, "test") if e.ok]
    assert evidence.data.keyword == "TestOps and test_double_param"


PARAMETRIZED = (
    "from torch.testing._internal.common_utils import TestCase, run_tests",
    "from torch.testing._internal.common_utils import (\n    TestCase, instantiate_parametrized_tests, "
    "parametrize, run_tests,\n)",
)


def instantiate(repo: Path, rel: str = "test/test_ops.py") -> None:
    """Make TestOps a template class: instantiate_parametrized_tests generates its tests' names."""
    path = repo / rel
    text = path.read_text().replace(*PARAMETRIZED)
    path.write_text(text.replace('\n\nif __name__', '\n\ninstantiate_parametrized_tests(TestOps)\n\nif __name__'))


async def test_a_test_is_never_confused_with_one_whose_name_extends_it(mini: Mini, case: str):
    """test_sorted is selected by its own name, never by substring: test_sorted_key (which fails the
    reproduction's way) neither runs nor stands in for it."""
    add_test(mini.repo, "test/test_ops.py", """
def test_sorted(self):
    self.assertEqual(sorted([2, 1]), [1, 2])

def test_sorted_key(self):
    self.assertEqual(double(21), 42)
""")
    instantiate(mini.repo)
    data = (await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                       test_name="TestOps.test_sorted")).structured_content
    assert data["ok"] is False and data["outcome"] == "passed", data
    assert data["node_id"] == "test/test_ops.py::TestOps::test_sorted"
    run = mini.store.get_run(data["run_id"], case)
    assert "--pt2bb-only=TestOps.test_sorted" in run.argv and "-k" not in run.argv
    [report] = [a.split("=", 1)[1] for a in run.argv if a.startswith("--pt2bb-report=")]
    assert [t.node_id for t in parse_report(Path(report)).tests] == ["test/test_ops.py::TestOps::test_sorted"]
    # The other one registers under its own name.
    data = (await call(mini, "register_test", case_id=case, test_file="test/test_ops.py",
                       test_name="TestOps.test_sorted_key")).structured_content
    assert data["ok"] is True and data["node_id"] == "test/test_ops.py::TestOps::test_sorted_key", data
