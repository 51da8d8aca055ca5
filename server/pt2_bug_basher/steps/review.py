"""Step 12: the diff against main, the server's own findings, and the self-review checklist."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.case.workflow import Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.evidence import (
    FileStatRecord,
    FindingRecord,
    MainCheckEvidence,
    ReviewEvidence,
    VerifyEvidence,
)
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.gitstate import uncommitted_files
from pt2_bug_basher.execution.lint import LintReport, lint_changed_lines
from pt2_bug_basher.execution.review import FileStat, Finding, not_committed_note
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.steps._registered import registered_test

MAX_DIFF_CHARS = 12000
FALLBACK_CHECKLIST = (
    "Check the test is in the topical file and fails without the fix; the fix addresses the root cause at the "
    "layer that owns the invariant, is minimal, leaves config defaults alone and adds no recompiles or graph "
    "breaks; no debugging leftovers."
)


class ReviewResult(BaseModel):
    ok: bool = Field(description="no blocking finding: the review step is complete for this state of the code")
    base: str = Field(description="the merge base with main the diff is taken against")
    files: list[FileStat]
    lines_changed: int
    findings: list[Finding] = Field(description="what the server found itself (lint findings on changed lines "
                                                "included); blocking ones must be fixed")
    lint: LintReport = Field(description="the checkout's linter (ruff, else flake8) on the changed lines")
    tests_added: list[str] = Field(default_factory=list, description="test functions the change adds")
    checklist: str = Field(description="the self-review checklist: apply every item to the diff")
    diff: str = Field(description=f"the diff (first {MAX_DIFF_CHARS} characters)")
    diff_truncated: bool = False
    recorded: bool = False
    sweep: str | None = Field(None, description="the regression sweep of the latest verification")
    next_step: str


async def review_changes(state: AppState, case_id: str) -> ReviewResult:
    """Diff the tree against main, check it, and record the review (complete when nothing blocks)."""
    from pt2_bug_basher.execution import review

    flow = await state.gate(ToolName.review_changes, case_id)
    case = flow.case
    test = registered_test(flow)
    main_check = flow.latest(Step.main_check)
    main_ref = review.main_ref_for(main_check.payload(MainCheckEvidence) if main_check else None)
    repo = Path(case.repo).resolve()

    def work():
        tree = flow.tree_hash
        diff = review.diff_against(repo, main_ref)
        found = review.findings(diff, repo, test.test_file, test.method)
        return tree, diff, found, review.lint_targets(diff, repo), review.added_tests(diff, repo)

    tree, diff, found, targets, tests_added = await anyio.to_thread.run_sync(work)
    pending = sorted({c.path for c in diff.files if c.status == "untracked"}
                     | set(await anyio.to_thread.run_sync(uncommitted_files, repo)))
    lint = await lint_changed_lines(state.store, case, repo, targets, ToolName.review_changes.value)
    only_removed = sorted(c.path for c in diff.files if c.path.endswith(".py") and not c.added and not c.binary
                          and c.status != "deleted")
    if only_removed:
        lint.note = (lint.note + f" Not linted: {', '.join(only_removed[:5])} (the change only removes lines "
                     "there).").strip()
    found += [Finding(severity="warning", kind="lint", file=f.file, line=f.line,
                      text=f"{lint.linter} {f.code} at {f.where}: {f.message}") for f in lint.on_changed_lines]
    blocking = [f for f in found if f.severity == "blocking"]
    stats = review.diff_stat(diff)
    ok = not blocking
    verdict = f"{len(blocking)} blocking findings ({blocking[0].text[:120]})" if blocking else "no blocking finding"
    summary = (f"{len(stats)} files, {diff.lines_changed} lines against {main_ref}: {verdict}, "
               f"{len(found) - len(blocking)} warnings")
    state.store.add_evidence(
        case_id, Step.review.value, ok, summary[:500], tree_hash=tree,
        data=ReviewEvidence(base=diff.base_commit, main_ref=main_ref,
                            files=[FileStatRecord(**s.model_dump()) for s in stats],
                            lines_changed=diff.lines_changed,
                            findings=[FindingRecord(**f.model_dump()) for f in found], tests_added=tests_added,
                            linter=lint.linter, lint_status=lint.status),
    )
    try:
        from pt2_bug_basher.content import prompt_file

        checklist = checklist_for_checkout(prompt_file("review_checklist.md"), repo, [test.test_file])
    except Exception:  # an installation without the prompt texts still reviews
        checklist = FALLBACK_CHECKLIST
    in_test = [f for f in lint.on_changed_lines if f.file == test.test_file]
    redo = (format_call(ToolName.make_worktree, case_id=case_id, action="create")
            + " (an edit to the registered test's code, not only its comments, layout or import order, makes the "
            "check on main stale), then ") if in_test else ""
    again = format_call(ToolName.review_changes, case_id=case_id) + " again"
    if ok:
        lint_first = (f"Fix the {len(lint.on_changed_lines)} lint findings on changed lines (first at "
                      f"{lint.on_changed_lines[0].where}). " if lint.on_changed_lines else "")
        next_step = (f"{lint_first}Apply the checklist to the diff; fix anything it turns up (then {redo}"
                     f"{format_call(ToolName.run_tests, case_id=case_id)} and {again}). "
                     f"{not_committed_note(pending)}When all holds: "
                     + format_call(ToolName.celebrate, case_id=case_id, root_cause="...", fix_summary="..."))
    else:
        first = blocking[0]
        where = (f" at {first.file}:{first.line}" if first.file and first.line
                 else (f" in {first.file}" if first.file else ""))
        next_step = (f"Fix the blocking findings first ({first.text}{where}), then "
                     f"{format_call(ToolName.run_tests, case_id=case_id, run_nearby=True)} and {again}.")
    return ReviewResult(
        ok=ok, base=f"{main_ref} @ {diff.base_commit[:12]}", files=stats, lines_changed=diff.lines_changed,
        findings=found, lint=lint, tests_added=tests_added, checklist=checklist, diff=diff.text[:MAX_DIFF_CHARS],
        diff_truncated=len(diff.text) > MAX_DIFF_CHARS, recorded=True, next_step=next_step, sweep=_sweep_line(flow),
    )


def _sweep_line(flow: Workflow) -> str | None:
    """The latest verification's sweep, as one line."""
    verified = flow.latest_ok(Step.verify)
    swept = verified.payload(VerifyEvidence).sweep if verified is not None else None
    return swept.line() if swept is not None else None


_NAMED_PATH = re.compile(r"`((?:test|torch)/[\w./-]+)`")
ABSENT = " (upstream, not in this checkout)"
# the checklist's example homes for a new test, in parentheses: replaced by the case's own test file
_HOME_EXAMPLES = re.compile(r"the topical file for the area \(e\.g\. [^()]*\)")


def checklist_for_checkout(text: str, repo: Path, homes: list[str]) -> str:
    """The checklist with the case's own test file(s) named as the home, in place of other areas' examples, and
    every repository path it names that the checkout lacks marked as upstream only."""
    here = [f"`{rel}`" for rel in homes if (repo / rel).is_file()]
    if here:
        home = f"the topical file for the area (the registered test is in {', '.join(here)})"
        text = _HOME_EXAMPLES.sub(lambda _: home, text, count=1)

    def mark(match: re.Match[str]) -> str:
        rel = match.group(1)
        found = (repo / rel).is_dir() if rel.endswith("/") else (repo / rel).is_file()
        return match.group(0) if found else match.group(0) + ABSENT

    text = _NAMED_PATH.sub(mark, text)
    return text
