"""The tree hash evidence is tied to: the working tree's content, read without writing to the repository."""

from __future__ import annotations

from pathlib import Path

from torch_checkout import git, git_init

from pt2_bug_basher.execution.gitstate import tree_hash, uncommitted_files


def objects(repo: Path) -> set[str]:
    store = repo / ".git" / "objects"
    return {str(p.relative_to(store)) for p in store.rglob("*") if p.is_file()}


def test_content_decides_commits_do_not(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    (repo / ".gitignore").write_text("build/\n")
    (repo / "ops.py").write_text("def double(x):\n    return x * 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    clean = tree_hash(repo)
    assert tree_hash(repo) == clean

    (repo / "ops.py").write_text("def double(x):\n    return x + x\n")
    edited = tree_hash(repo)
    assert edited != clean
    before = objects(repo)
    (repo / "test_ops.py").write_text("def test_double():\n    pass\n")  # untracked files count
    with_test = tree_hash(repo)
    assert with_test not in (clean, edited)
    assert objects(repo) == before  # nothing was written into the repository's object store
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_bytes(b"\0" * 16)  # ignored outputs do not
    assert tree_hash(repo) == with_test

    # Committing the same content (as an agent does at the end) keeps the evidence current.
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fix")
    assert tree_hash(repo) == with_test
    (repo / "ops.py").write_text("def double(x):\n    return x * 2\n")  # reverting is a change again
    assert tree_hash(repo) != with_test


def test_uncommitted_files_are_staged_or_edited_tracked_files(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git_init(repo)
    (repo / "ops.py").write_text("x = 1\n")
    assert uncommitted_files(repo) == []  # no HEAD yet
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    (repo / "ops.py").write_text("x = 2\n")
    (repo / "new.py").write_text("y = 1\n")
    assert uncommitted_files(repo) == ["ops.py"]  # untracked files are the review's business
    git(repo, "add", "new.py")
    assert uncommitted_files(repo) == ["new.py", "ops.py"]
    git(repo, "commit", "-q", "-am", "both")
    assert uncommitted_files(repo) == []
