"""The change under review: the diff against the merge base with main, and what the server checks in it.

The diff covers committed and uncommitted changes of tracked files plus untracked, non-ignored
files (shown as added). Findings are computed from the added lines only; a blocking finding keeps
the review step open.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import MainCheckEvidence
from pt2_bug_basher.execution.gitstate import GIT_TIMEOUT_S, open_repo

LARGE_DIFF_LINES = 400
LARGE_DIFF_FILES = 15
MAX_UNTRACKED_BYTES = 1024 * 1024
USUAL_TOP_DIRS = {"torch", "test", "tests", "functorch", "torchgen", "aten", "c10", "caffe2", "tools", "docs",
                  "benchmarks", "scripts", "src"}
UNUSUAL_TOP_DIRS = {"third_party", "build", "dist", ".github", ".ci", ".circleci", ".jenkins"}
CONFIG_FILES = {"torch/_dynamo/config.py", "torch/_inductor/config.py", "torch/_functorch/config.py",
                "torch/_export/config.py"}
DEBUG_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("print(", re.compile(r"(?<![\w.])print\s*\(")),
    ("breakpoint()", re.compile(r"(?<![\w.])breakpoint\s*\(")),
    ("pdb", re.compile(r"\bimport\s+i?pdb\b|\bfrom\s+i?pdb\s+import\b|\bi?pdb\.(?:set_trace|post_mortem|pm|run)\s*\(")),
)
CONFLICT = re.compile(r"^(?:<{7}|>{7})(?: |$)|^={7}$")


@dataclass
class FileChange:
    path: str
    status: str  # added, modified, deleted, renamed, untracked
    added: list[tuple[int, str]] = field(default_factory=list)
    removed: int = 0
    touched: list[int] = field(default_factory=list)
    """New-side line numbers of added lines and of the places where lines were removed."""
    binary: bool = False


@dataclass
class Diff:
    base_ref: str
    base_commit: str
    head: str
    files: list[FileChange]
    text: str

    @property
    def lines_changed(self) -> int:
        return sum(len(f.added) + f.removed for f in self.files)

    def file(self, rel: str) -> FileChange | None:
        return next((f for f in self.files if f.path == rel), None)


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def parse_unified(text: str) -> list[FileChange]:
    files: list[FileChange] = []
    current: FileChange | None = None
    new_line = 0
    for line in text.splitlines():
        if line.startswith("diff --git "):
            match = re.match(r'^diff --git "?a/(.*?)"? "?b/(.*?)"?$', line)
            current = FileChange(path=match.group(2) if match else line.split(" b/")[-1], status="modified")
            files.append(current)
            continue
        if current is None:
            continue
        if line.startswith("new file mode"):
            current.status = "added"
        elif line.startswith("deleted file mode"):
            current.status = "deleted"
        elif line.startswith("rename to "):
            current.status, current.path = "renamed", line[len("rename to "):]
        elif line.startswith("Binary files ") or line.startswith("GIT binary patch"):
            current.binary = True
        elif line.startswith("+++ ") or line.startswith("--- "):
            if line.startswith("+++ b/"):
                current.path = line[6:]
        elif (hunk := _HUNK.match(line)) is not None:
            new_line = int(hunk.group(1))
        elif line.startswith("+"):
            current.added.append((new_line, line[1:]))
            current.touched.append(new_line)
            new_line += 1
        elif line.startswith("-"):
            current.removed += 1
            current.touched.append(max(new_line, 1))
        elif line.startswith(" "):
            new_line += 1
    return files


def diff_against(repo_path: Path, main_ref: str) -> Diff:
    """The working tree (committed, uncommitted and untracked changes) against merge-base(main_ref, HEAD)."""
    import git

    from pt2_bug_basher.execution.worktrees import check_ref, resolve_commit

    check_ref(main_ref)
    repo = open_repo(repo_path)
    root = Path(repo.working_tree_dir or repo_path)
    main_commit = resolve_commit(repo, main_ref)
    try:
        head = repo.head.commit.hexsha
        bases = repo.merge_base(main_commit, head)
    except (ValueError, git.GitCommandError) as exc:
        raise InvalidInput(f"cannot find the merge base of {main_ref} and HEAD: {exc}") from exc
    if not bases:
        raise InvalidInput(f"HEAD and {main_ref} share no history; review needs a branch made from {main_ref}.")
    base = bases[0].hexsha
    try:
        text = repo.git.diff(base, "--no-color", "--no-ext-diff", "--find-renames", "-U3", "--",
                             kill_after_timeout=GIT_TIMEOUT_S)
        untracked = repo.git.ls_files("--others", "--exclude-standard", "-z", kill_after_timeout=GIT_TIMEOUT_S)
    except git.GitCommandError as exc:
        raise InvalidInput(f"git diff failed in {root}: {(exc.stderr or str(exc)).strip()[:500]}") from exc
    files = parse_unified(text)
    extra: list[str] = []
    for name in filter(None, untracked.split("\0")):
        path = root / name
        change = FileChange(path=name, status="untracked")
        try:
            data = path.read_bytes() if path.is_file() and path.stat().st_size <= MAX_UNTRACKED_BYTES else None
        except OSError:
            data = None
        if data is None or b"\0" in data[:8192]:
            change.binary = True
        else:
            lines = data.decode("utf-8", errors="replace").splitlines()
            change.added = [(i, ln) for i, ln in enumerate(lines, 1)]
            change.touched = [i for i, _ in change.added]
            extra.append(f"diff --git a/{name} b/{name}\nnew file (untracked)\n+++ b/{name}\n"
                         + "\n".join("+" + ln for ln in lines[:200]))
        files.append(change)
    return Diff(main_ref, base, head, files, "\n".join([text, *extra]))


def is_test_path(rel: str) -> bool:
    parts = Path(rel).parts
    name = parts[-1] if parts else rel
    return (bool({"test", "tests", "testing"} & set(parts[:-1])) or name.startswith("test_")
            or name.endswith("_test.py") or name == "conftest.py")


class Finding(BaseModel):
    severity: Literal["blocking", "warning"]
    kind: str
    file: str | None = None
    line: int | None = None
    text: str


def _code_part(line: str) -> str:
    """The line without a trailing comment (strings are not parsed; a '#' inside one cuts early)."""
    stripped = line.lstrip()
    if stripped.startswith("#"):
        return ""
    return re.sub(r"\s+#.*$", "", line)


def findings(diff: Diff, repo_root: Path, test_file: str | None, test_method: str | None) -> list[Finding]:
    found: list[Finding] = []
    if not diff.files:
        found.append(Finding(severity="blocking", kind="empty", text=(
            f"nothing changed against {diff.base_ref} (merge base {diff.base_commit[:12]}): "
            "there is no fix to review")))
        return found
    top_dirs = _usual_top_dirs(repo_root)
    for change in diff.files:
        rel = change.path
        parts = Path(rel).parts
        scratch = _scratch(change, top_dirs)
        # Untracked scratch files (a repro at the top) are flagged as such below, not line by line.
        python = rel.endswith(".py") and not scratch
        for line_no, text in change.added:
            if CONFLICT.match(text):
                found.append(Finding(severity="blocking", kind="conflict_marker", file=rel, line=line_no,
                                     text=f"merge conflict marker left in: {text.strip()[:80]}"))
            if python and not is_test_path(rel):
                code = _code_part(text)
                for what, pattern in DEBUG_PATTERNS:
                    if code and pattern.search(code):
                        found.append(Finding(severity="blocking", kind="debug_leftover", file=rel, line=line_no,
                                             text=f"leftover debugging {what} in source: {text.strip()[:120]}"))
        if change.status == "untracked":
            found.append(Finding(severity="warning", kind="untracked", file=rel, text=(
                f"{rel} is untracked: add it to the change if it belongs there, else delete it "
                "(repro scripts and scratch files do not belong in the fix)")))
        if len(parts) == 1:
            found.append(Finding(severity="warning", kind="unusual_place", file=rel,
                                 text=f"{rel} is at the top of the repository, outside the source and test "
                                      "directories"))
        elif parts[0] in UNUSUAL_TOP_DIRS or parts[0] not in top_dirs:
            found.append(Finding(severity="warning", kind="unusual_place", file=rel,
                                 text=f"{rel} is outside the repository's usual places ({parts[0]}/)"))
        if rel in CONFIG_FILES and change.added:
            found.append(Finding(severity="warning", kind="config_change", file=rel,
                                 text=f"{rel} changed: config defaults must stay as they are unless that is the fix"))
    if test_file:
        test_change = diff.file(test_file)
        defined = test_change is not None and any(
            re.match(rf"\s*(?:async\s+)?def\s+{re.escape(test_method or '')}\s*\(", text)
            for _, text in test_change.added)
        if test_change is None or (test_method and not defined):
            found.append(Finding(severity="blocking", kind="test_missing", file=test_file, text=(
                f"the registered test {test_method} in {test_file} is not part of the change against "
                f"{diff.base_ref}: the fix must ship with its test")))
    lines, count = diff.lines_changed, len(diff.files)
    if lines > LARGE_DIFF_LINES or count > LARGE_DIFF_FILES:
        found.append(Finding(severity="warning", kind="large_diff", text=(
            f"the change is large ({count} files, {lines} lines): a fix should be the smallest change that is "
            "obviously correct; split out refactors")))
    return found


def _scratch(change: FileChange, top_dirs: set[str]) -> bool:
    parts = Path(change.path).parts
    return change.status == "untracked" and (len(parts) == 1 or parts[0] not in top_dirs)


def lint_targets(diff: Diff, repo_root: Path) -> dict[str, set[int]]:
    """Python files of the change (untracked scratch files aside) -> the line numbers it adds there."""
    top_dirs = _usual_top_dirs(repo_root)
    return {c.path: {n for n, _ in c.added} for c in diff.files
            if c.path.endswith(".py") and c.added and not c.binary and c.status != "deleted"
            and not _scratch(c, top_dirs)}


_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)\s*\(")


def added_tests(diff: Diff, repo_root: Path) -> list[str]:
    """The pytest node id (`file::Class::test_name` or `file::test_name`) of each test function the change adds
    to a test file."""
    found: list[str] = []
    for change in diff.files:
        if not (change.path.endswith(".py") and is_test_path(change.path)) or change.status == "deleted":
            continue
        lines = {n: m.group(1) for n, text in change.added if (m := _TEST_DEF.match(text))}
        if not lines:
            continue
        owners = _test_owners(repo_root / change.path)
        for line_no, name in sorted(lines.items()):
            found.append(f"{change.path}::{owners.get(line_no, name)}")
    return list(dict.fromkeys(found))


def _test_owners(path: Path) -> dict[int, str]:
    """Line of each function definition -> its name qualified by the enclosing classes."""
    import ast

    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return {}
    owners: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}::")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                owners[child.lineno] = f"{prefix}{child.name}"

    visit(tree, "")
    return owners


def _usual_top_dirs(root: Path) -> set[str]:
    dirs = set(USUAL_TOP_DIRS)
    try:
        for child in root.iterdir():
            if child.is_dir() and (child / "__init__.py").is_file():
                dirs.add(child.name)
    except OSError:
        pass
    return dirs - UNUSUAL_TOP_DIRS


class FileStat(BaseModel):
    path: str
    status: str
    added: int
    removed: int


def diff_stat(diff: Diff) -> list[FileStat]:
    return [FileStat(path=f.path, status=f.status, added=len(f.added), removed=f.removed) for f in diff.files]


def changed_source_lines(diff: Diff) -> dict[str, list[int]]:
    """Non-test Python files -> new-side line numbers that changed (for finding changed functions)."""
    return {f.path: sorted(set(f.touched)) for f in diff.files
            if f.path.endswith(".py") and not is_test_path(f.path) and f.status != "deleted"}


def main_ref_for(main_check: MainCheckEvidence | None) -> str:
    return (main_check.ref if main_check else None) or "main"


def not_committed_note(files: list[str]) -> str:
    """A fact, not an instruction: whether to commit is the user's call."""
    if not files:
        return ""
    shown = ", ".join(files[:10]) + (f" and {len(files) - 10} more" if len(files) > 10 else "")
    return (f"The change is not committed yet ({shown} differ from HEAD or are untracked); the evidence is keyed "
            "to the files' content, so committing it or not leaves the evidence standing. ")
