"""The state of a repository's tree, as one hash that evidence is tied to.

The git tree of the working tree's content: tracked files as they are on disk plus untracked,
non-ignored files. Any edit a fix could make changes it; ignored build outputs, the server's own
state and committing (the content stays the same) do not.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pt2_bug_basher.domain.errors import InvalidInput

GIT_TIMEOUT_S = 120
_NON_GIT_LIMIT = 20000


def open_repo(path: Path):  # -> git.Repo
    import git  # GitPython is imported only when a tool needs it

    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise InvalidInput(f"{path} is not inside a git repository") from exc


def uncommitted_files(path: Path) -> list[str]:
    """Tracked files whose staged or working-tree content differs from HEAD (none before a first commit)."""
    import git

    repo = open_repo(path)
    try:
        changed = repo.index.diff("HEAD") + repo.index.diff(None)
    except (git.GitCommandError, git.BadName, ValueError):
        return []
    return sorted({d.b_path or d.a_path for d in changed if d.b_path or d.a_path})


def still_untracked(path: Path, paths: list[str]) -> set[str]:
    """Which of `paths` are still untracked (and not ignored) in the repository at `path`."""
    import git

    if not paths:
        return set()
    try:
        out = open_repo(path).git.ls_files("--others", "--exclude-standard", "--", *paths,
                                            kill_after_timeout=GIT_TIMEOUT_S)
    except (git.GitCommandError, InvalidInput):
        return set(paths)  # cannot tell: keep what the review saw
    return {line for line in out.splitlines() if line}


def is_git_repo(path: Path) -> bool:
    try:
        open_repo(path)
    except InvalidInput:
        return False
    return True


def tree_hash(path: Path) -> str:
    """A hash of the content of the repository's working tree (see module doc); a file-stat hash outside git."""
    try:
        repo = open_repo(path)
    except InvalidInput:
        return "files:" + _files_hash(path)
    import git

    with tempfile.TemporaryDirectory(prefix="pt2bb-tree-") as tmp:
        index, objects = Path(tmp) / "index", Path(tmp) / "objects"
        objects.mkdir()
        own_index = Path(repo.git_dir) / "index"
        if own_index.is_file():
            # its stat cache: only changed files are read again. The copy keeps the index's mtime, which git's
            # racy-clean check compares with each file's: a file rewritten with the same size within the clock's
            # tick after the index was written is read again, not taken as unchanged.
            shutil.copy2(own_index, index)
        # A private index and object directory: the user's repository is only read, never written.
        env = {"GIT_INDEX_FILE": str(index), "GIT_OBJECT_DIRECTORY": str(objects),
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(Path(repo.common_dir) / "objects")}
        try:
            repo.git.add("-A", "--", ".", env=env, kill_after_timeout=GIT_TIMEOUT_S)
            tree = repo.git.write_tree(env=env, kill_after_timeout=GIT_TIMEOUT_S).strip()
        except git.GitCommandError as exc:
            raise InvalidInput(f"git failed on {path}: {exc.stderr.strip() if exc.stderr else exc}") from exc
    return "git-tree:" + tree


def _files_hash(path: Path) -> str:
    digest = hashlib.sha256()
    count = 0
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            full = Path(dirpath) / name
            try:
                digest.update(full.relative_to(path).as_posix().encode() + b"\0" + full.read_bytes())
            except OSError:
                continue
            count += 1
            if count >= _NON_GIT_LIMIT:
                return digest.hexdigest()[:24]
    return digest.hexdigest()[:24]


RECENT_COMMITS = 50  # a change this close to HEAD is worth reading first
BLAME_TIMEOUT_S = 20


@dataclass(frozen=True)
class RecentChange:
    commit: str  # abbreviated
    subject: str
    date: str  # YYYY-MM-DD, committer date
    commits_before_head: int  # 0: HEAD itself; -1: uncommitted edits (commit and subject empty)

    @property
    def uncommitted(self) -> bool:
        return self.commits_before_head < 0


def recent_change(repo_dir: Path, file: str, first: int, last: int,
                  within: int = RECENT_COMMITS) -> RecentChange | None:
    """The newest commit that changed lines first..last of `file` (as the working tree has them), when it
    is one of the last `within` commits of HEAD, or the uncommitted edits there; None otherwise, or when git
    cannot tell."""
    import git

    try:
        repo = open_repo(repo_dir)
        blame = repo.git.blame("-L", f"{first},{last}", "--porcelain", "--", file, kill_after_timeout=BLAME_TIMEOUT_S)
    except (InvalidInput, git.GitCommandError):
        return None
    times: dict[str, int] = {}
    subjects: dict[str, str] = {}
    boundary: set[str] = set()  # the root commit or a shallow clone's first: it brought the whole file
    sha = None
    for line in blame.splitlines():
        head = line.split(" ", 1)[0]
        if len(head) == 40 and all(c in "0123456789abcdef" for c in head):
            sha = head
        elif sha is None:
            continue
        elif set(sha) == {"0"}:  # an uncommitted line: the newest change there is
            return RecentChange("", "", time.strftime("%Y-%m-%d", time.gmtime()), -1)
        elif line.startswith("committer-time "):
            times[sha] = int(line.split()[1])
        elif line.startswith("summary "):
            subjects[sha] = line[len("summary "):]
        elif line == "boundary":
            boundary.add(sha)
    times = {s: t for s, t in times.items() if s not in boundary}
    if not times:
        return None  # every line is as old as the history git has
    newest = max(times, key=lambda s: times[s])
    try:
        back = int(repo.git.rev_list("--count", f"{newest}..HEAD", kill_after_timeout=BLAME_TIMEOUT_S))
    except (git.GitCommandError, ValueError):
        return None
    if back >= within:
        return None
    return RecentChange(newest[:12], subjects.get(newest, ""), time.strftime("%Y-%m-%d", time.gmtime(times[newest])),
                        back)


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def recently_changed_lines(repo_dir: Path, files: list[str], within: int = RECENT_COMMITS) -> dict[str, set[int]]:
    """The lines of `files` (numbered as the working tree has them) that the last `within` commits of HEAD or
    uncommitted edits changed; a deletion marks the lines on either side of it. The oldest commit of a shorter
    history counts as old, as blame's boundary does. Empty when git cannot tell."""
    return _changed_lines(repo_dir, files, within, unpushed=False)


def unpushed_changed_lines(repo_dir: Path, files: list[str], within: int = RECENT_COMMITS) -> dict[str, set[int]]:
    """As recently_changed_lines, for the commits of HEAD that no remote-tracking branch holds (the user's own
    work; every commit where the repository has no remote) and uncommitted edits only."""
    return _changed_lines(repo_dir, files, within, unpushed=True)


def good_commit(repo_dir: Path, ref: str) -> tuple[str, int]:
    """The commit `ref` names (a branch, tag, hash, `HEAD~3`, `ORIG_HEAD`) and how many commits HEAD has that
    it lacks; InvalidInput when it names none, or is not an ancestor of HEAD."""
    import git

    if not ref or ref.startswith("-") or len(ref) > 200 or any(c.isspace() or ord(c) < 32 for c in ref):
        raise InvalidInput(f"good_ref {ref[:80]!r} is not a ref: pass a branch, tag or commit where the repro "
                           "passed, e.g. good_ref=\"ORIG_HEAD\" after a pull, or a commit hash.")
    try:
        repo = open_repo(repo_dir)
    except InvalidInput as exc:
        raise InvalidInput(f"good_ref names a commit of the case's repository, and {exc}: leave good_ref out, or "
                           "start the case in the torch checkout the repro imports.") from None
    try:
        sha = repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}", kill_after_timeout=BLAME_TIMEOUT_S)
        ahead = int(repo.git.rev_list("--count", f"{sha}..HEAD", kill_after_timeout=BLAME_TIMEOUT_S))
        repo.git.merge_base("--is-ancestor", sha, "HEAD", kill_after_timeout=BLAME_TIMEOUT_S)
    except (git.GitCommandError, ValueError):
        raise InvalidInput(f"good_ref {ref!r} names no commit of {repo_dir} that HEAD descends from: pass one from "
                           "`git log` or `git reflog` there (where the repro passed, e.g. the commit before a pull), "
                           "or leave good_ref out.") from None
    return sha.strip(), ahead


def changed_lines_since(repo_dir: Path, base: str, files: list[str]) -> dict[str, set[int]]:
    """As recently_changed_lines, for every change between commit `base` and the working tree."""
    import git

    if not files:
        return {}
    try:
        return _diff_lines(open_repo(repo_dir), base, files)
    except (InvalidInput, git.GitCommandError):
        return {}


def _changed_lines(repo_dir: Path, files: list[str], within: int, unpushed: bool) -> dict[str, set[int]]:
    import git

    if not files:
        return {}
    try:
        repo = open_repo(repo_dir)
        mine = ("--not", "--remotes") if unpushed else ()
        revs = repo.git.rev_list(f"--max-count={within + 1}", "HEAD", *mine,
                                 kill_after_timeout=BLAME_TIMEOUT_S).split()
        if not unpushed:
            base = revs[-1]
        elif not revs:
            base = "HEAD"  # every commit is on a remote branch: the uncommitted edits alone
        else:  # the parent of the oldest unpushed commit; a root commit (the whole tree) counts as old
            base = f"{revs[-1]}^" if len(revs) <= within and repo.commit(revs[-1]).parents else revs[-1]
        return _diff_lines(repo, base, files)
    except (InvalidInput, git.GitCommandError, IndexError, ValueError):
        return {}


def _diff_lines(repo, base: str, files: list[str]) -> dict[str, set[int]]:
    text = repo.git.diff("-U0", "--no-color", "--no-ext-diff", "--no-renames", base, "--", *files,
                         kill_after_timeout=BLAME_TIMEOUT_S)
    out: dict[str, set[int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("+++ "):
            current = line[len("+++ b/"):] if line.startswith("+++ b/") else None
        elif current is not None and (hunk := _HUNK.match(line)):
            start, count = int(hunk.group(1)), int(hunk.group(2) or 1)
            lines = range(start, start + count) if count else (start, start + 1)
            out.setdefault(current, set()).update(n for n in lines if n > 0)
    return out
