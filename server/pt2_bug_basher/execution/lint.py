"""The checkout's linter on the changed lines: ruff, else flake8, from the case's interpreter.

The linter runs as `<case python> -m ruff check ...` (or `-m flake8`) from the repository root, so
the checkout's own configuration applies; it is a recorded run of the case. Only findings on lines
the change adds are kept. Without a configuration in the checkout the linter's defaults are not the
project's style: the note says so, and import-order findings are left out.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.execution.runner import run_captured
from pt2_bug_basher.execution.runs import execute

LINTERS = ("ruff", "flake8")
DETECT_TIMEOUT_S = 60.0
LINT_TIMEOUT_S = 180.0
MAX_FILES = 200
MAX_FINDINGS = 50
_DETECT = ("import importlib.util as u; "
           f"print(' '.join(m for m in {LINTERS!r} if u.find_spec(m) is not None))")
_FLAKE8_FORMAT = "%(path)s:%(row)d:%(col)d: %(code)s %(text)s"
_FLAKE8_LINE = re.compile(r"^(?P<path>.+?):(?P<row>\d+):(?P<col>\d+): (?P<code>\S+) (?P<text>.*)$")


class LintFinding(BaseModel):
    file: str
    line: int
    column: int | None = None
    code: str
    message: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


class LintReport(BaseModel):
    linter: str | None = Field(None, description="ruff or flake8, run by the case's interpreter; None: none ran")
    status: Literal["ran", "no_linter", "no_python_files", "failed", "timed_out"]
    files: list[str] = Field(default_factory=list, description="the changed Python files checked")
    findings_in_files: int = Field(0, description="findings anywhere in those files")
    on_changed_lines: list[LintFinding] = Field(default_factory=list,
                                                description=f"findings on changed lines (first {MAX_FINDINGS})")
    run_id: str | None = Field(None, description="the recorded lint run (its output: the case's run-log resource)")
    note: str = ""


async def available_linter(python: str, scratch: Path) -> str | None:
    """ruff if the interpreter can import it, else flake8, else None."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    captured = await run_captured([python, "-c", _DETECT], cwd=scratch, env=environ, timeout_s=DETECT_TIMEOUT_S,
                                  scratch_dir=scratch)
    if captured.outcome.exit_code != 0:
        return None
    found = captured.stdout.split()
    return next((name for name in LINTERS if name in found), None)


_RUFF_FILES = ("ruff.toml", ".ruff.toml")
_FLAKE8_FILES = (".flake8", "setup.cfg", "tox.ini")


def configured(root: Path, files: list[str], linter: str) -> bool:
    """Whether the checkout configures the linter for these files (a config file in the root or a folder
    between it and a file; ruff also reads pyproject.toml's [tool.ruff])."""
    folders = {root} | {folder for f in files for folder in (root / f).parents if folder.is_relative_to(root)}
    for folder in folders:
        if linter == "ruff":
            if any((folder / name).is_file() for name in _RUFF_FILES):
                return True
            if _mentions(folder / "pyproject.toml", "[tool.ruff"):
                return True
        elif (folder / ".flake8").is_file() or any(_mentions(folder / n, "[flake8]") for n in _FLAKE8_FILES[1:]):
            return True
    return False


def _mentions(path: Path, text: str) -> bool:
    try:
        return text in path.read_text(errors="replace")
    except OSError:
        return False


def lint_argv(python: str, linter: str, files: list[str]) -> list[str]:
    if linter == "ruff":
        return [python, "-m", "ruff", "check", "--no-cache", "--force-exclude", "--output-format=json",
                "--exit-zero", *files]
    return [python, "-m", "flake8", "--exit-zero", f"--format={_FLAKE8_FORMAT}", *files]


def parse_ruff(text: str, root: Path) -> list[LintFinding]:
    """ruff's JSON output; ValueError when it is not JSON (an older ruff, or an error)."""
    data = json.loads(text or "[]")
    if not isinstance(data, list):
        raise ValueError("ruff's output is not a list")
    found = []
    for item in data:
        location = item.get("location") or {}
        if not item.get("filename") or not isinstance(location.get("row"), int):
            continue
        found.append(LintFinding(file=_relative(item["filename"], root), line=location["row"],
                                 column=location.get("column"), code=item.get("code") or "syntax",
                                 message=str(item.get("message") or "").strip()))
    return found


def parse_flake8(text: str, root: Path) -> list[LintFinding]:
    found = []
    for line in text.splitlines():
        match = _FLAKE8_LINE.match(line.strip())
        if match:
            found.append(LintFinding(file=_relative(match["path"], root), line=int(match["row"]),
                                     column=int(match["col"]), code=match["code"], message=match["text"].strip()))
    return found


def _relative(path: str, root: Path) -> str:
    candidate = Path(path)
    full = candidate if candidate.is_absolute() else root / candidate
    try:
        return full.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path


async def lint_changed_lines(store: Store, case: CaseRecord, root: Path, changed: dict[str, set[int]],
                             tool: str) -> LintReport:
    """Run the linter on the files of `changed` (path -> added line numbers); keep findings on those lines."""
    files = sorted(path for path in changed if path.endswith(".py") and (root / path).is_file())[:MAX_FILES]
    if not files:
        return LintReport(status="no_python_files", note="the change touches no Python file that still exists")
    scratch = store.state_dir / "scratch"
    linter = await available_linter(case.python, scratch)
    if linter is None:
        return LintReport(status="no_linter", files=files, note=(
            f"neither ruff nor flake8 is installed in the case's interpreter {case.python}: no linter ran. "
            "Lint the changed files with the checkout's own tooling (lintrunner in a PyTorch checkout)."))
    run = await execute(store, case, lint_argv(case.python, linter, files), tool=tool, cwd=root,
                        timeout_s=LINT_TIMEOUT_S, label=linter)
    report = LintReport(linter=linter, status="ran", files=files, run_id=run.run_id)
    if run.outcome.timed_out:
        report.status, report.note = "timed_out", f"{linter} did not finish within {LINT_TIMEOUT_S:.0f}s"
        return report
    stdout = run.stdout_text()
    try:
        found = parse_ruff(stdout, root) if linter == "ruff" else parse_flake8(stdout, root)
    except ValueError:
        found = None
    if run.outcome.exit_code != 0 or found is None:
        tail = " | ".join((run.stderr_text(4000) or stdout[-2000:]).strip().splitlines()[-3:])
        report.status = "failed"
        report.note = f"{linter} failed ({run.outcome.describe_exit()}): {tail[:500]}"
        return report
    unconfigured = ""
    if not configured(root, files, linter):
        # The linter's own defaults are not the project's style: import order is where they disagree most.
        dropped = sum(1 for f in found if f.code.startswith("I"))
        found = [f for f in found if not f.code.startswith("I")]
        unconfigured = (f" The checkout has no {linter} configuration for these files ("
                        + ("ruff.toml, or [tool.ruff] in pyproject.toml" if linter == "ruff" else ".flake8 or a "
                           "[flake8] section") + f"), so {linter} ran with its defaults, which may not be the "
                        "project's style (a PyTorch checkout configures ruff in pyproject.toml and runs lintrunner)"
                        + (f"; {dropped} import-order findings were left out" if dropped else "") + ".")
    kept = [f for f in found if f.line in changed.get(f.file, set())]
    report.findings_in_files = len(found)
    report.on_changed_lines = kept[:MAX_FINDINGS]
    others = len(found) - len(kept)
    report.note = (f"{len(kept)} of {len(found)} findings in the {len(files)} changed files are on changed lines"
                   + (f" (first {MAX_FINDINGS} shown)" if len(kept) > MAX_FINDINGS else "")
                   + (f"; {others} other finding(s) on lines the change did not touch (all of them: the output of "
                      f"run {run.run_id})" if others else "") + "." + unconfigured)
    return report
