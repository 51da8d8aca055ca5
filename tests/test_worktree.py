"""make_worktree through a real MCP client on real repositories: refs, ownership, the main check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from conftest_checkout import LARGE_TEST, Mini, seed_test
from mcp import Client
from torch_checkout import add_test, git, git_init

from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.execution import worktrees

pytestmark = pytest.mark.anyio


async def call(mini: Mini, tool: str, **arguments):
    async with Client(mini.server) as client:
        return await client.call_tool(tool, arguments)


def error_text(result) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


async def register(mini: Mini, case_id: str) -> dict:
    add_test(mini.repo, "test/test_ops.py", LARGE_TEST)
    result = await call(mini, "register_test", case_id=case_id, test_file="test/test_ops.py",
                        test_name="TestOps.test_double_large")
    assert result.structured_content["ok"] is True, result.structured_content
    return result.structured_content


@pytest.mark.parametrize("ref", ["-rf", "--output=x", "../x", "a..b", "refs/heads/../../x", "x y", "HEAD~1",
                                 "main:secret", "/etc", "x.lock", ".hidden", "@{-1}", "a//b", "ma\x00in"])
@pytest.mark.parametrize("action", ["create", "remove"])
async def test_bad_refs_are_refused(mini: Mini, ref: str, action: str):
    case_id = mini.new_case()
    seed_test(mini.store, case_id)
    text = error_text(await call(mini, "make_worktree", case_id=case_id, action=action, ref=ref))
    assert "is not a valid ref name" in text, text
    made = mini.config.state_dir / "worktrees"
    assert not made.exists() or not any(made.iterdir())
    assert len(git(mini.repo, "worktree", "list").strip().splitlines()) == 1


def test_check_ref_accepts_real_names():
    for ref in ("main", "release/2.5", "v2.5.0", "origin/main", "0123456789abcdef0123456789abcdef01234567", "fix-1"):
        assert worktrees.check_ref(ref) == ref
    for ref in ("-x", "--output=x", "../x", "x/../y"):
        with pytest.raises(InvalidInput):
            worktrees.check_ref(ref)


async def test_missing_main_lists_the_branches_that_exist(mini: Mini):
    git(mini.repo, "branch", "-m", "main", "trunk")
    case_id = mini.new_case()
    seed_test(mini.store, case_id)
    text = error_text(await call(mini, "make_worktree", case_id=case_id, action="create", ref="main"))
    assert "no ref 'main'" in text and "trunk" in text and "work" in text
    assert not (mini.config.state_dir / "worktrees" / f"{case_id}-main").exists()


async def test_the_test_fails_on_main_in_a_worktree(mini: Mini):
    case_id = mini.new_case()
    mini.reproduce(case_id)
    await register(mini, case_id)
    result = await call(mini, "make_worktree", case_id=case_id, action="create", ref="main")
    data = result.structured_content
    assert not result.is_error and data["ok"] is True and data["recorded"] is True, data
    path = Path(data["worktree"])
    assert path == (mini.config.state_dir / "worktrees" / f"{case_id}-main").resolve()
    assert data["commit"] == git(mini.repo, "rev-parse", "main").strip()
    # the work branch has no commit of its own here: the result says the check runs the code it is on
    assert git(mini.repo, "rev-parse", "HEAD").strip() == data["commit"]
    assert any(n.startswith("main is the commit the repository is on") for n in data["notes"]), data["notes"]
    assert data["outcome"] == "failed" and data["failure"]["exception_type"].endswith("ValueError")
    # The worktree really is main, with the registered test copied in.
    assert str(path) in git(mini.repo, "worktree", "list")
    assert "def test_double_large" in (path / "test" / "test_ops.py").read_text()
    assert "def test_double_large" not in git(mini.repo, "show", "main:test/test_ops.py")
    # The run happened in the worktree, with the worktree first on the path.
    run = mini.store.get_run(data["run_id"], case_id)
    assert run.cwd == str(path) and run.env["PYTHONPATH"].split(":")[0] == str(path)
    [evidence] = mini.store.evidence(case_id, "main_check")
    assert evidence.ok and evidence.data.ref == "main" and evidence.data.worktree == str(path)
    status = (await call(mini, "get_workflow", case_id=case_id)).structured_content["case"]
    assert next(s for s in status["steps"] if s["step"] == "main_check")["status"] == "done"
    # The primary checkout is untouched: the state directory stays out of git status.
    assert git(mini.repo, "status", "--porcelain").strip() == "M test/test_ops.py"

    # Another test added to the file leaves the check standing: the registered test is what it was.
    test_file = mini.repo / "test" / "test_ops.py"
    test_file.write_text(test_file.read_text() + "\n\ndef test_added_later():\n    assert True\n")
    status = (await call(mini, "get_workflow", case_id=case_id)).structured_content["case"]
    assert next(s for s in status["steps"] if s["step"] == "main_check")["status"] == "done"
    # Editing the registered test's code after the check makes the check stale: it ran other code.
    test_file.write_text(test_file.read_text() + "\n\nLIMIT = 21  # added after the main check\n")
    status = (await call(mini, "get_workflow", case_id=case_id)).structured_content["case"]
    main_check = next(s for s in status["steps"] if s["step"] == "main_check")
    assert main_check["status"] == "stale", main_check
    assert "the registered test's file, test/test_ops.py, has changed since the check" in main_check["evidence"]

    # Creating again replaces the server's own worktree, and checks the test as it is now.
    again = (await call(mini, "make_worktree", case_id=case_id, action="create", ref="main")).structured_content
    assert again["ok"] and again["replaced"] is True
    status = (await call(mini, "get_workflow", case_id=case_id)).structured_content["case"]
    assert next(s for s in status["steps"] if s["step"] == "main_check")["status"] == "done"

    removed = await call(mini, "make_worktree", case_id=case_id, action="remove", ref="main")
    assert not removed.is_error and removed.structured_content["ok"] is True
    assert not path.exists() and str(path) not in git(mini.repo, "worktree", "list")
    text = error_text(await call(mini, "make_worktree", case_id=case_id, action="remove", ref="main"))
    assert "only worktrees it created" in text


async def test_a_test_passing_on_main_stops_the_case(mini_branch_bug: Mini):
    mini = mini_branch_bug
    case_id = mini.new_case()
    mini.reproduce(case_id)
    await register(mini, case_id)
    data = (await call(mini, "make_worktree", case_id=case_id, action="create", ref="main")).structured_content
    assert data["ok"] is False and data["outcome"] == "passed" and data["recorded"] is True
    assert git(mini.repo, "rev-parse", "HEAD").strip() != data["commit"]
    assert not any("the commit the repository is on" in n for n in data["notes"]), data["notes"]
    assert data["stopped"] and "passes on main" in data["stopped"]
    assert "may not capture the bug, or it is already fixed" in data["next_step"]
    status = (await call(mini, "get_workflow", case_id=case_id)).structured_content["case"]
    assert status["stopped"] and next(s for s in status["steps"] if s["step"] == "main_check")["status"] == "stopped"
    # Later steps refuse while stopped.
    for tool, args in (("run_tests", {}), ("review_changes", {}),
                       ("celebrate", {"root_cause": "x" * 30, "fix_summary": "y" * 30})):
        text = error_text(await call(mini, tool, case_id=case_id, **args))
        assert "stopped" in text and "passes on main" in text, (tool, text)
    # Registering a test again reopens the case: the main check is pending again.
    await call(mini, "register_test", case_id=case_id, test_file="test/test_ops.py",
               test_name="TestOps.test_double_large")
    status = (await call(mini, "get_workflow", case_id=case_id)).structured_content["case"]
    assert status["stopped"] is None
    assert next(s for s in status["steps"] if s["step"] == "main_check")["status"] == "pending"
    assert "make_worktree" in status["next_step"]


async def test_remove_refuses_what_the_server_did_not_create(mini: Mini):
    case_id = mini.new_case()
    seed_test(mini.store, case_id)
    path = mini.config.state_dir / "worktrees" / f"{case_id}-main"
    path.mkdir(parents=True)
    (path / "precious.txt").write_text("keep me")
    text = error_text(await call(mini, "make_worktree", case_id=case_id, action="remove", ref="main"))
    assert "not created by the server" in text
    text = error_text(await call(mini, "make_worktree", case_id=case_id, action="create", ref="main"))
    assert "did not create it" in text
    assert (path / "precious.txt").read_text() == "keep me"
    # A real git worktree made by someone else at a path of another ref is left alone too.
    other = mini.config.state_dir / "worktrees" / f"{case_id}-trunk"
    git(mini.repo, "worktree", "add", "--detach", str(other), "main")
    text = error_text(await call(mini, "make_worktree", case_id=case_id, action="remove", ref="trunk"))
    assert "only worktrees it created" in text and other.is_dir()
    # Another case cannot remove this case's worktree: the path is derived from the case id.
    assert str(other) in git(mini.repo, "worktree", "list")


async def test_changes_in_a_worktree_are_not_clobbered(mini: Mini):
    case_id = mini.new_case()
    mini.reproduce(case_id)
    await register(mini, case_id)
    data = (await call(mini, "make_worktree", case_id=case_id, action="create")).structured_content
    path = Path(data["worktree"])
    (path / "pkg" / "ops.py").write_text("# an experiment someone made here\n")
    for action in ("create", "remove"):
        text = error_text(await call(mini, "make_worktree", case_id=case_id, action=action))
        assert "pkg/ops.py" in text and "force=true" in text
    assert (path / "pkg" / "ops.py").read_text().startswith("# an experiment")
    removed = await call(mini, "make_worktree", case_id=case_id, action="remove", force=True)
    assert not removed.is_error and not path.exists()


def test_build_outputs_are_linked_not_copied(tmp_path: Path):
    """A develop-build layout: the worktree imports its own torch sources, with the primary
    checkout's untracked build outputs linked in."""
    from pt2_bug_basher.case.store import Store

    repo = tmp_path / "repo"
    (repo / "torch" / "_dynamo").mkdir(parents=True)
    (repo / "torch" / "__init__.py").write_text("from torch.version import __version__\nSOURCE = 'main'\n")
    (repo / "torch" / "_dynamo" / "__init__.py").write_text("")
    (repo / "test").mkdir()
    (repo / "test" / "test_t.py").write_text("def test_t():\n    pass\n")
    git_init(repo)
    (repo / ".git" / "info" / "exclude").write_text("*.so\n/torch/lib/\n/torch/version.py\n__pycache__/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "sources")
    (repo / "torch" / "__init__.py").write_text("from torch.version import __version__\nSOURCE = 'branch'\n")
    (repo / "torch" / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF fake")
    (repo / "torch" / "lib").mkdir()
    (repo / "torch" / "lib" / "libtorch.so").write_bytes(b"\x7fELF fake")
    (repo / "torch" / "version.py").write_text("__version__ = '9.9.9'\n")
    (repo / "torch" / "__pycache__").mkdir()
    (repo / "torch" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (repo / "torch" / "new_module.py").write_text("# the agent's new, untracked source\n")
    (repo / "torch" / "kernels.bin").write_bytes(b"data")

    store = Store(tmp_path / "state")
    case = store.create_case(str(repo), sys.executable, {"torch": {"imported_from_repo": True}})
    created = anyio.run(lambda: worktrees.create(store, case, "main", "test/test_t.py", True))
    wt = created.path
    linked = sorted(created.record.linked)
    assert linked == ["torch/_C.cpython-311-x86_64-linux-gnu.so", "torch/kernels.bin", "torch/lib", "torch/version.py"]
    for rel in linked:
        assert (wt / rel).is_symlink() and (wt / rel).resolve() == (repo / rel).resolve()
    assert not (wt / "torch" / "new_module.py").exists() and not (wt / "torch" / "__pycache__").exists()
    # Nothing but the links shows in the worktree's status (a symlinked directory escapes a `dir/` pattern).
    assert {ln[3:] for ln in git(wt, "status", "--porcelain").splitlines()} <= set(linked)
    cwd, env, notes = worktrees.run_environment(created.record)
    assert cwd == wt and env["PYTHONPATH"].split(":")[0] == str(wt) and not notes
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__file__, torch.SOURCE, torch.__version__)"],
                         cwd=tmp_path, env={"PYTHONPATH": env["PYTHONPATH"], "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(wt / "torch" / "__init__.py"), "main", "9.9.9"]
    # Removing it leaves the primary's build outputs alone.
    anyio.run(lambda: worktrees.remove(store, case, "main"))
    assert not wt.exists() and (repo / "torch" / "lib" / "libtorch.so").exists()


async def test_a_repository_deleted_under_a_worktree_is_a_clear_error(mini: Mini):
    import shutil

    case_id = mini.new_case()
    mini.reproduce(case_id)
    await register(mini, case_id)
    created = (await call(mini, "make_worktree", case_id=case_id, action="create", ref="main")).structured_content
    assert created["ok"]
    shutil.rmtree(mini.repo)
    worktree = Path(created["worktree"])
    refused = error_text(await call(mini, "make_worktree", case_id=case_id, action="remove", ref="main"))
    assert "is gone" in refused and "force=true" in refused and worktree.exists()
    removed = await call(mini, "make_worktree", case_id=case_id, action="remove", ref="main", force=True)
    assert not removed.is_error and not worktree.exists()
    # The case and its evidence are intact, and the server still answers about it.
    assert mini.store.get_case(case_id).case_id == case_id
    assert [e.ok for e in mini.store.evidence(case_id, "main_check")] == [True]
    status = await call(mini, "get_workflow", case_id=case_id)
    assert not status.is_error, status.content[0].text


CHECK_MAIN = """\
import pkg.ops
from pkg.ops import double

print("ops from", pkg.ops.__file__)
print("double(21) =", double(21))
"""


async def test_a_script_runs_against_main_in_the_worktree(mini_branch_bug: Mini):
    """where="main": the script imports main's code (main has no bug here), its runs are recorded as
    runs against main, and no evidence about the case's tree comes of them."""
    mini = mini_branch_bug
    case_id = mini.new_case()
    mini.reproduce(case_id)
    await register(mini, case_id)
    created = (await call(mini, "make_worktree", case_id=case_id, action="create", ref="main")).structured_content
    worktree = Path(created["worktree"])
    (mini.repo / "check_main.py").write_text(CHECK_MAIN)  # untracked: not on main
    evidence_before = [(e.step, e.ok) for e in mini.store.evidence(case_id)]

    on_case = (await call(mini, "run_with_logs", case_id=case_id, script="check_main.py", repeat=1)).structured_content
    assert on_case["runs"][0]["failed"] and on_case["failure"]["exception_type"].endswith("ValueError"), on_case
    assert on_case["on_main"] is None

    result = await call(mini, "run_with_logs", case_id=case_id, script="check_main.py", repeat=2, where="main")
    data = result.structured_content
    assert not result.is_error, result.content[0].text
    main_commit = git(mini.repo, "rev-parse", "main").strip()
    assert data["on_main"]["commit"] == main_commit and data["on_main"]["worktree"] == str(worktree)
    placed = worktree / "check_main.py"
    assert data["on_main"]["script"] == str(placed) and placed.read_text() == CHECK_MAIN
    assert not any(r["failed"] for r in data["runs"]) and data["failure"] is None, data
    for run in data["runs"]:
        record = mini.store.get_run(run["run_id"], case_id)
        stdout = Path(record.stdout_path).read_text()
        assert f"ops from {worktree / 'pkg' / 'ops.py'}" in stdout and "double(21) = 42" in stdout, stdout
        assert record.result["against"] == f"main@{main_commit[:12]}" and record.cwd == str(worktree)
    assert data["recorded"] == [] and data["on_main"]["same_as_case"] is None
    assert "does not fail on main" in data["next_step"] and "Workflow:" in data["next_step"]
    assert [(e.step, e.ok) for e in mini.store.evidence(case_id)] == evidence_before
    # The copied script is the server's own change: the worktree is removed without force.
    removed = await call(mini, "make_worktree", case_id=case_id, action="remove", ref="main")
    assert not removed.is_error, removed.content[0].text
    assert not worktree.exists()


async def test_a_failure_on_main_never_counts_as_the_reproduction(mini: Mini):
    """The bug is on main too: the runs there fail every time, yet the reproduce step stays open."""
    case_id = mini.new_case()
    add_test(mini.repo, "test/test_ops.py", LARGE_TEST)
    seed_test(mini.store, case_id)
    refused = error_text(await call(mini, "run_with_logs", case_id=case_id, script="repro.py", where="main"))
    assert f'make_worktree(case_id="{case_id}", action="create", ref="main")' in refused, refused
    created = (await call(mini, "make_worktree", case_id=case_id, action="create", ref="main")).structured_content
    assert created["ok"], created

    data = (await call(mini, "run_with_logs", case_id=case_id, script="repro.py", repeat=2,
                       where="main")).structured_content
    assert data["reproduced"] and data["failure"]["exception_type"].endswith("ValueError"), data
    assert data["recorded"] == [] and not mini.store.evidence(case_id, "reproduce")
    assert "no reproduction on your tree" in data["next_step"]
    status = (await call(mini, "get_workflow", case_id=case_id)).structured_content["case"]
    assert next(s for s in status["steps"] if s["step"] == "reproduce")["status"] == "pending"
    # A script inside the worktree, run as the case's, is refused: it would run main's code.
    inside = Path(created["worktree"]) / "repro.py"
    text = error_text(await call(mini, "run_with_logs", case_id=case_id, script=str(inside)))
    assert "worktree" in text and 'where="main"' in text
    # A new case without a registered test is told to register one before making the worktree.
    other = mini.new_case()
    text = error_text(await call(mini, "run_with_logs", case_id=other, script="repro.py", where="main"))
    assert f'make_worktree(case_id="{other}"' in text and "register_test(" in text
