"""Worktrees the server owns: a checkout of a ref (main) beside the case's repository.

A worktree lives under `<state dir>/worktrees/<case_id>-<ref slug>` and is recorded in the
store's key/value table when the server creates it; the server removes only worktrees it has
recorded. When the case's torch is imported from the repository (a develop build), runs in the
worktree import the worktree's Python sources: the worktree comes first on PYTHONPATH and the
untracked build outputs the import needs (compiled extensions, torch/lib, the generated
torch/version.py, ...) are symlinked from the primary checkout rather than copied.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput, NotFound
from pt2_bug_basher.domain.evidence import MainCheckEvidence
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.gitstate import GIT_TIMEOUT_S, is_git_repo, open_repo

KV_PREFIX = "worktree:"
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
MAX_REF_CHARS = 200
_LINK_SKIP_PARTS = {"__pycache__"}


def check_ref(ref: str) -> str:
    """Validate a ref name the way `git check-ref-format` does, and refuse anything option-like."""
    if not isinstance(ref, str) or not ref:
        raise InvalidInput("ref is empty: pass a branch, tag or commit, e.g. ref=\"main\".")
    if len(ref) > MAX_REF_CHARS:
        raise InvalidInput(f"ref is {len(ref)} characters long; the limit is {MAX_REF_CHARS}.")
    why = None
    if ref.startswith("-"):
        why = "it starts with '-' and would be read as a command-line option"
    elif _BAD_REF_CHARS.search(ref):
        why = "it contains a space, a control character or one of ~ ^ : ? * [ \\"
    elif ".." in ref:
        why = "it contains '..' (a range, or a path escaping the repository)"
    elif "@{" in ref or ref == "@":
        why = "it contains '@{' or is '@'"
    elif ref.startswith("/") or ref.endswith("/") or "//" in ref:
        why = "it starts or ends with '/' or contains '//' (a path, not a ref)"
    elif ref.endswith(".") or any(part.startswith(".") or part.endswith(".lock") for part in ref.split("/")):
        why = "a component starts with '.' or ends with '.lock', or the name ends with '.'"
    if why:
        raise InvalidInput(f"ref {ref!r} is not a valid ref name: {why}. Pass a branch, tag or commit, "
                           'e.g. ref="main".')
    return ref


def slug(ref: str) -> str:
    return _SLUG.sub("-", ref).strip("-.")[:60] or "ref"


def worktree_root(store: Store) -> Path:
    root = store.state_dir / "worktrees"
    root.mkdir(parents=True, exist_ok=True)
    return root


def worktree_path(store: Store, case_id: str, ref: str) -> Path:
    path = (worktree_root(store) / f"{case_id}-{slug(ref)}").resolve()
    if not path.is_relative_to(worktree_root(store).resolve()):
        raise InvalidInput(f"ref {ref!r} would place the worktree outside the server's directory.")
    return path


@dataclass
class WorktreeRecord:
    path: str
    case_id: str
    repo: str
    ref: str
    commit: str
    created_at: float
    test_file: str | None = None
    linked: list[str] = field(default_factory=list)
    torch_from_repo: bool = False
    placed: list[str] = field(default_factory=list)
    """scripts of the case's tree the server copied in, to run them against the worktree's sources"""

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


def get_record(store: Store, path: Path) -> WorktreeRecord | None:
    raw = store.get_kv(KV_PREFIX + str(path))
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not data:
        return None
    return WorktreeRecord(**data)


def _forget(store: Store, path: Path) -> None:
    store.set_kv(KV_PREFIX + str(path), "")


def case_worktree(store: Store, case: CaseRecord, ref: str | None = None) -> WorktreeRecord:
    """The case's worktree (of ref; else of the latest main check, else of main), which must exist."""
    create = format_call(ToolName.make_worktree, case_id=case.case_id, action="create", ref=ref or "main")
    if ref is None:
        checks = [p.worktree for p in (e.payload(MainCheckEvidence) for e in store.evidence(case.case_id, "main_check"))
                  if p.worktree]
        default = str(worktree_path(store, case.case_id, "main"))
        candidates = [Path(p) for p in dict.fromkeys([*reversed(checks), default])]
        for path in candidates:
            record = get_record(store, path)
            if record is not None and path.is_dir():
                return record
        if not checks:
            raise NotFound(f"the case has no worktree yet: {create}")
        path = Path(checks[-1])
    else:
        path = worktree_path(store, case.case_id, check_ref(ref))
    record = get_record(store, path)
    if record is None or not path.is_dir():
        raise NotFound(f"no worktree of the server at {path}: {create}")
    return record


def _branch_listing(repo: Any) -> str:
    names = [h.name for h in repo.heads]
    try:
        for remote in repo.remotes:
            names.extend(r.name for r in remote.refs)
    except Exception:  # a broken remote configuration must not hide the local branches
        pass
    return ", ".join(names[:30]) + (f", ... ({len(names)} in all)" if len(names) > 30 else "") if names else "none"


def resolve_commit(repo: Any, ref: str) -> str:
    import git

    try:
        return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
                                  kill_after_timeout=GIT_TIMEOUT_S).strip()
    except git.GitCommandError:
        raise NotFound(
            f"the repository has no ref {ref!r}. Branches that exist: {_branch_listing(repo)}. "
            'Pass one of them as ref (ref="<branch>").'
        ) from None


def head_commit(repo_dir: Path) -> str | None:
    """The commit the repository's working tree is on; None when git cannot tell (no commit yet)."""
    try:
        return resolve_commit(open_repo(repo_dir), "HEAD")
    except (NotFound, InvalidInput):
        return None


def _changed_files(repo_dir: Path, allowed: set[str]) -> list[str]:
    """Files changed in a worktree (status --porcelain), apart from the allowed ones."""
    import git

    try:
        wt = git.Repo(repo_dir)
        out = wt.git.status("--porcelain", "-z", "--untracked-files=all", kill_after_timeout=GIT_TIMEOUT_S)
    except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError):
        return []
    changed = []
    for entry in filter(None, out.split("\0")):
        name = entry[3:] if len(entry) > 3 and entry[2] == " " else entry
        if name not in allowed and not name.startswith(tuple(a.rstrip("/") + "/" for a in allowed if a.endswith("/"))):
            changed.append(name)
    return changed


def _package_dirs(root: Path) -> list[str]:
    """Top-level Python packages of the checkout (torch, functorch, torchgen, ...)."""
    found = []
    try:
        for child in sorted(root.iterdir()):
            if child.is_dir() and not child.name.startswith(".") and (child / "__init__.py").is_file():
                found.append(child.name)
    except OSError:
        pass
    return found


def link_build_outputs(repo: Any, primary: Path, worktree: Path, state_dir: Path) -> list[str]:
    """Symlink the untracked files the import needs from the primary checkout into the worktree:
    every ignored file or directory under the top-level packages (compiled modules, torch/lib,
    torch/version.py, ...), and untracked non-Python files there. Untracked .py files are the
    agent's own new sources and are not linked; caches are skipped."""
    packages = _package_dirs(primary)
    if not packages:
        return []
    ignored = repo.git.ls_files("--others", "--ignored", "--exclude-standard", "--directory", "-z", "--",
                                *packages, kill_after_timeout=GIT_TIMEOUT_S)
    untracked = repo.git.ls_files("--others", "--exclude-standard", "-z", "--", *packages,
                                  kill_after_timeout=GIT_TIMEOUT_S)
    entries = [e for e in ignored.split("\0") if e]
    entries += [e for e in untracked.split("\0") if e and not e.endswith(".py")]
    linked = []
    state = state_dir.resolve()
    for entry in entries:
        rel = entry.rstrip("/")
        parts = Path(rel).parts
        if not rel or _LINK_SKIP_PARTS & set(parts) or rel.endswith((".pyc", ".pyo")) or ".." in parts:
            continue
        source = primary / rel
        try:
            if source.resolve().is_relative_to(state):
                continue
        except OSError:
            continue
        target = worktree / rel
        if target.exists() or target.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source, target_is_directory=source.is_dir())
        linked.append(rel)
    return linked


@dataclass
class CreatedWorktree:
    record: WorktreeRecord
    path: Path
    replaced: bool


def _create_sync(store: Store, case: CaseRecord, ref: str, test_file: str | None, torch_from_repo: bool,
                 force: bool) -> CreatedWorktree:
    import git

    repo = open_repo(Path(case.repo))
    primary = Path(repo.working_tree_dir or case.repo)
    if test_file and not (primary / test_file).is_file():
        raise InvalidInput(
            f"the registered test file {test_file} is gone from {primary}. Register the test again: "
            + format_call(ToolName.register_test, case_id=case.case_id, test_file="<file>",
                          test_name="<TestClass.test_name>")
        )
    commit = resolve_commit(repo, ref)
    path = worktree_path(store, case.case_id, ref)
    replaced = False
    if path.exists() or path.is_symlink():
        existing = get_record(store, path)
        if existing is None:
            raise InvalidInput(
                f"{path} exists but the server did not create it; it will not touch it. Move it away, then "
                + format_call(ToolName.make_worktree, case_id=case.case_id, action="create", ref=ref) + "."
            )
        _remove_sync(store, case, path, existing, force)
        replaced = True
    try:
        repo.git.worktree("add", "--detach", "--", str(path), commit, kill_after_timeout=GIT_TIMEOUT_S)
    except git.GitCommandError as exc:
        raise InvalidInput(f"git worktree add failed: {(exc.stderr or str(exc)).strip()[:500]}") from exc
    record = WorktreeRecord(str(path), case.case_id, str(primary), ref, commit, time.time(), test_file,
                            torch_from_repo=torch_from_repo)
    store.set_kv(KV_PREFIX + str(path), record.to_json())
    try:
        if test_file:
            target = path / test_file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(primary / test_file, target)
        if torch_from_repo:
            record.linked = link_build_outputs(repo, primary, path, store.state_dir)
            store.set_kv(KV_PREFIX + str(path), record.to_json())
    except (OSError, git.GitCommandError) as exc:
        raise InvalidInput(
            f"the worktree {path} was created but could not be prepared: {exc}. Remove it with "
            + format_call(ToolName.make_worktree, case_id=case.case_id, action="remove", ref=ref, force=True)
            + " and try again."
        ) from exc
    return CreatedWorktree(record, path, replaced)


def _remove_sync(store: Store, case: CaseRecord, path: Path, record: WorktreeRecord, force: bool) -> None:
    import git

    if record.case_id != case.case_id:
        raise InvalidInput(f"{path} belongs to case {record.case_id}, not {case.case_id}; it is left alone.")
    if not is_git_repo(Path(record.repo)):
        # The primary repository is gone: git cannot tell what changed, so only an explicit force deletes.
        if not force:
            raise InvalidInput(
                f"the repository {record.repo} of the worktree {path} is gone, so git cannot check the worktree "
                "for changes. Save what you need from it, then call again with force=true to delete it."
            )
        if path.is_dir() and path.resolve().is_relative_to(worktree_root(store).resolve()):
            shutil.rmtree(path, ignore_errors=True)
        _forget(store, path)
        return
    allowed = {record.test_file} if record.test_file else set()
    allowed.update(record.placed)
    allowed.update(record.linked)
    allowed.update(f"{name}/" for name in record.linked)
    changed = _changed_files(path, {a for a in allowed if a})
    if changed and not force:
        shown = ", ".join(changed[:10]) + (f", ... ({len(changed)} in all)" if len(changed) > 10 else "")
        raise InvalidInput(
            f"the worktree {path} has changes the server did not make ({shown}); removing it would lose them. "
            "Save what you need, then call again with force=true."
        )
    repo = open_repo(Path(record.repo))
    try:
        repo.git.worktree("remove", "--force", "--", str(path), kill_after_timeout=GIT_TIMEOUT_S)
    except git.GitCommandError:
        # Not a registered worktree any more (deleted by hand): clear the directory the server made.
        if path.is_dir() and path.resolve().is_relative_to(worktree_root(store).resolve()):
            shutil.rmtree(path, ignore_errors=True)
        try:
            repo.git.worktree("prune", kill_after_timeout=GIT_TIMEOUT_S)
        except git.GitCommandError as exc:
            raise InvalidInput(f"git worktree prune failed: {(exc.stderr or str(exc)).strip()[:300]}") from exc
    _forget(store, path)


_LOCKS: dict[str, anyio.Lock] = {}


def _lock(path: Path) -> anyio.Lock:
    """One create/remove at a time per worktree path, within this server."""
    return _LOCKS.setdefault(str(path), anyio.Lock())


async def create(store: Store, case: CaseRecord, ref: str, test_file: str | None, torch_from_repo: bool,
                 force: bool = False) -> CreatedWorktree:
    check_ref(ref)
    async with _lock(worktree_path(store, case.case_id, ref)):
        return await anyio.to_thread.run_sync(_create_sync, store, case, ref, test_file, torch_from_repo, force)


async def remove(store: Store, case: CaseRecord, ref: str, force: bool = False) -> Path:
    check_ref(ref)
    path = worktree_path(store, case.case_id, ref)
    async with _lock(path):
        record = get_record(store, path)
        if record is None:
            what = "exists but was not created by the server" if path.exists() else "does not exist"
            raise InvalidInput(
                f"{path} {what}: the server removes only worktrees it created for this case."
            )
        await anyio.to_thread.run_sync(_remove_sync, store, case, path, record, force)
    return path


def run_environment(record: WorktreeRecord) -> tuple[Path, dict[str, str], list[str]]:
    """(cwd, environment additions, notes) for running code in a worktree."""
    from pt2_bug_basher.execution.pytest.session import pythonpath_with

    path = Path(record.path)
    notes: list[str] = []
    if not record.torch_from_repo and (path / "torch" / "__init__.py").is_file():
        # A checkout of torch itself, while the case's torch is an installed build: putting the
        # worktree's torch/ first would shadow the installed one without its compiled parts.
        notes.append("torch is not imported from the repository, so the worktree run uses the installed torch; "
                     "it checks the test against main's test file, not main's torch sources")
        cwd = (path / record.test_file).parent if record.test_file else path
        return cwd, {}, notes
    return path, {"PYTHONPATH": pythonpath_with(path, os.environ)}, notes


def _place_sync(store: Store, record: WorktreeRecord, script: Path) -> Path:
    path = Path(record.path)
    if script.is_relative_to(path):
        return script
    primary = Path(record.repo).resolve()
    if not script.is_relative_to(primary):
        return script  # outside the repository: its own folder shadows nothing of the tree
    rel = script.relative_to(primary).as_posix()
    target = path / rel
    if target.is_file() and not target.is_symlink() and target.read_bytes() == script.read_bytes():
        return target
    if rel not in record.placed and (target.exists() or target.is_symlink()):
        own = {name for name in (record.test_file, *record.placed) if name}
        if target.is_symlink() or not target.is_file() or rel in _changed_files(path, own):
            raise InvalidInput(
                f"{target} in the worktree has changes the server did not make (or is not a plain file); the "
                f"script will not overwrite it. Move the script to another name in the repository, or save "
                "that change and make the worktree again: "
                + format_call(ToolName.make_worktree, case_id=record.case_id, action="create", ref=record.ref,
                              force=True) + "."
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(script, target)
    if rel not in record.placed:
        record.placed.append(rel)
        store.set_kv(KV_PREFIX + str(path), record.to_json())
    return target


async def place_script(store: Store, record: WorktreeRecord, script: Path) -> Path:
    """The path to run `script` at so that it imports the worktree's sources: a script of the case's
    repository is copied to the same place in the worktree (a script beside the repository's packages
    would import the case's own copies first, from its folder); any other script runs where it is."""
    path = Path(record.path)
    async with _lock(path):
        current = get_record(store, path) or record
        try:
            return await anyio.to_thread.run_sync(_place_sync, store, current, script.resolve())
        except OSError as exc:
            raise InvalidInput(f"could not copy {script} into the worktree {path}: {exc}") from exc
