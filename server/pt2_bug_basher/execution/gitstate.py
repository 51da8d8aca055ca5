"""The state of a repository's tree, as one hash that evidence is tied to.

HEAD plus the diff of tracked files plus the content of untracked, non-ignored files: any edit
a fix could make changes it; ignored build outputs and the server's own state do not.
"""

from __future__ import annotations

import hashlib
import os
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


def is_git_repo(path: Path) -> bool:
    try:
        open_repo(path)
    except InvalidInput:
        return False
    return True


def tree_hash(path: Path) -> str:
    """A hash of the repository's current state (see module doc); a file-stat hash outside git."""
    try:
        repo = open_repo(path)
    except InvalidInput:
        return "files:" + _files_hash(path)
    import git

    digest = hashlib.sha256()
    try:
        head = repo.head.commit.hexsha
    except ValueError:
        head = "no-commits"
    digest.update(head.encode())
    try:
        diff = repo.git.diff("HEAD" if head != "no-commits" else "--cached", "--binary",
                             kill_after_timeout=GIT_TIMEOUT_S)
        digest.update(diff.encode(errors="surrogateescape"))
        untracked = repo.git.ls_files("--others", "--exclude-standard", "-z", kill_after_timeout=GIT_TIMEOUT_S)
    except git.GitCommandError as exc:
        raise InvalidInput(f"git failed on {path}: {exc.stderr.strip() if exc.stderr else exc}") from exc
    root = Path(repo.working_tree_dir or path)
    for name in sorted(filter(None, untracked.split("\0"))):
        digest.update(b"\0untracked\0" + name.encode(errors="surrogateescape"))
        try:
            digest.update(hashlib.sha256((root / name).read_bytes()).digest())
        except OSError:
            digest.update(b"<unreadable>")
    return "git:" + head[:12] + ":" + digest.hexdigest()[:24]


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
