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


OPS = '''def helper(x):
    return x + 1


@decorated
def reduce_init(dtype):
    def inner():
        return 0
    return inner
'''


def _ops_changed_by_a_commit(tmp_path: Path) -> Path:
    """A repository whose torch/ops.py was imported, then reduce_init's inner function changed by HEAD."""
    repo = tmp_path / "repo"
    (repo / "torch").mkdir(parents=True)
    git_init(repo)
    (repo / "torch" / "ops.py").write_text(OPS)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "import the sources")
    (repo / "torch" / "ops.py").write_text(OPS.replace("return 0", "return -1"))
    git(repo, "commit", "-q", "-am", "Start reductions from -1")
    return repo


def test_a_suspect_function_changed_by_a_recent_commit_is_named_and_an_old_one_is_not(tmp_path: Path):
    from pt2_bug_basher.analysis.suspects import enclosing_function
    from pt2_bug_basher.execution.gitstate import recent_change
    from pt2_bug_basher.execution.history import change_sentence, recent_changes

    assert enclosing_function(OPS, 8) == (7, 8)  # the nested function, not its parent
    assert enclosing_function(OPS, 9) == (5, 9)  # from the decorator down
    assert enclosing_function(OPS, 3) == (3, 3)  # outside every function: the line alone
    repo = _ops_changed_by_a_commit(tmp_path)
    (repo / "other.py").write_text("z = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "unrelated")

    change = recent_change(repo, "torch/ops.py", 5, 9)
    assert change is not None and change.subject == "Start reductions from -1" and change.commits_before_head == 1
    assert recent_change(repo, "torch/ops.py", 5, 9, within=1) is None  # further back than asked
    assert recent_change(repo, "torch/ops.py", 1, 2) is None  # as old as the history: the root commit
    ops = repo / "torch" / "ops.py"
    ops.write_text(ops.read_text().replace("x + 1", "x + 2"))
    edited = recent_change(repo, "torch/ops.py", 1, 2)  # an uncommitted edit is the newest change there
    assert edited is not None and edited.commits_before_head == -1 and edited.commit == ""
    places = [("torch/ops.py", 8, "reduce_init.<locals>.inner"), ("torch/ops.py", 2, "helper"),
              ("torch/gone.py", 1, "gone")]
    uncommitted, sentence = [change_sentence(c) for c in recent_changes(repo, places)]
    assert sentence.startswith('reduce_init.<locals>.inner (torch/ops.py:7-8) was changed by ')
    assert '"Start reductions from -1"' in sentence and "1 commit(s) before HEAD" in sentence
    assert "(git show " in sentence
    assert uncommitted.startswith("helper (torch/ops.py:1-2) was changed by uncommitted edits")
    assert "in the working tree" in uncommitted and "(git diff -- torch/ops.py)" in uncommitted


def test_suspects_a_recent_commit_changed_come_first_and_say_which_commit(tmp_path: Path):
    from pt2_bug_basher.domain.evidence import Suspect
    from pt2_bug_basher.execution.history import changed_first, recent_changes

    repo = _ops_changed_by_a_commit(tmp_path)
    lowering = Suspect(file="torch/ops.py", line=2, function="helper", why="implements the lowering")
    inner = Suspect(file="torch/ops.py", line=8, function="reduce_init.<locals>.inner", why="called by helper")
    changes = recent_changes(repo, [("torch/ops.py", 2, "helper"), ("torch/ops.py", 8, "reduce_init.<locals>.inner")])
    assert [c.function for c in changes] == ["reduce_init.<locals>.inner"]
    ranked = changed_first([lowering, inner], changes)
    assert [s.function for s in ranked] == ["reduce_init.<locals>.inner", "helper"]
    assert ranked[0].why.startswith("called by helper; changed by ") and "HEAD itself" in ranked[0].why
    assert ranked[1] == lowering  # unchanged, and unchanged in what it says
    assert changed_first([lowering], []) == [lowering]
    # a changed code-generation function the list lacks joins it, first
    [added, kept] = changed_first([lowering], changes)
    assert (added.file, added.line, added.function) == ("torch/ops.py", 7, "reduce_init.<locals>.inner")
    assert "Start reductions from -1" in added.why and kept == lowering
