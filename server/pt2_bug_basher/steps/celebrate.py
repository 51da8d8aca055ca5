"""Step 13: the case's summary, once verification and review hold for the current code."""

from __future__ import annotations

import json
import secrets

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.review import FileStat
from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.case.workflow import Waiver
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import (
    CelebrateEvidence,
    MainCheckEvidence,
    ReviewEvidence,
    TestEvidence,
    VerifyEvidence,
)
from pt2_bug_basher.domain.names import Step, ToolName

ROTATION_KEY = "celebrations:recent"
FALLBACK = ["Bug fixed, test green, review clean. Well done."]


class TestOutcomeLine(BaseModel):
    node_id: str
    outcome: str


class CelebrateResult(BaseModel):
    case_id: str
    root_cause: str
    fix_summary: str
    diff_stat: list[FileStat] = Field(description="what changed, per file")
    lines_changed: int
    test_added: str = Field(description="the registered test: it failed before the fix, on your tree and on main")
    failed_before: str = Field(description="how the test failed before the fix")
    tests_verified: list[TestOutcomeLine] = Field(description="the tests of the verification run, with outcomes")
    review_warnings: list[str] = Field(default_factory=list)
    waivers: list[Waiver]
    celebration: str
    summary: str = Field(description="the whole summary as Markdown, ready for a PR description")
    next_step: str


async def celebrate(state: AppState, case_id: str, root_cause: str, fix_summary: str) -> CelebrateResult:
    """The case's summary as structure and as Markdown, with a celebration; recorded as the last step."""
    root_cause, fix_summary = root_cause.strip(), fix_summary.strip()
    if len(root_cause) < 20 or len(fix_summary) < 20:
        raise InvalidInput("give the root cause and the fix summary in a sentence or more each (20+ characters).")
    flow = await state.gate(ToolName.celebrate, case_id)
    tree = await anyio.to_thread.run_sync(lambda: flow.tree_hash)
    test = flow.latest_ok(Step.test)
    verify = flow.latest_ok(Step.verify)
    review = flow.latest_ok(Step.review)
    status = flow.status()
    test_data = test.payload(TestEvidence) if test else None
    verify_data = verify.payload(VerifyEvidence) if verify else VerifyEvidence()
    review_data = review.payload(ReviewEvidence) if review else ReviewEvidence()
    stats = [FileStat(path=s.path, status=s.status or "modified", added=s.added or 0, removed=s.removed or 0)
             for s in review_data.files]
    tests = [TestOutcomeLine(node_id=t.node_id, outcome=t.outcome) for t in verify_data.tests][:50]
    warnings = [f.text for f in review_data.findings if f.severity == "warning"][:10]
    failed_before = (f"{test_data.exception_type or 'failure'} ({test_data.category}): "
                     f"{(test_data.message or '')[:300]}") if test_data else "the test step was waived"
    line = _next_celebration(state)
    result = CelebrateResult(
        case_id=case_id, root_cause=root_cause, fix_summary=fix_summary, diff_stat=stats,
        lines_changed=review_data.lines_changed,
        test_added=f"{test_data.test_file}::{test_data.test_name}" if test_data else "(waived)",
        failed_before=failed_before, tests_verified=tests, review_warnings=warnings, waivers=status.waivers,
        celebration=line, summary="", next_step="",
    )
    result.summary = _markdown(result)
    state.store.add_evidence(case_id, Step.celebrate.value, True, f"celebrated: {root_cause[:200]}",
                             tree_hash=tree, data=CelebrateEvidence(root_cause=root_cause, fix_summary=fix_summary,
                                                                 celebration=line))
    main_check = flow.latest(Step.main_check)
    main_ref = main_check.payload(MainCheckEvidence).ref if main_check else "main"
    result.next_step = ("Done. Share the summary with the user; it doubles as the PR description. Remove the "
                        f'worktree when you no longer need it: make_worktree(case_id="{case_id}", action="remove", '
                        f'ref="{main_ref}")')
    return result


def _next_celebration(state: AppState) -> str:
    try:
        from pt2_bug_basher.content import celebrations

        lines = celebrations() or FALLBACK
    except Exception:  # no prompt texts in this installation
        lines = FALLBACK
    try:
        recent = json.loads(state.store.get_kv(ROTATION_KEY) or "[]")
    except ValueError:
        recent = []
    keep = max(0, min(len(lines) - 1, len(lines) // 2))
    fresh = [i for i in range(len(lines)) if i not in recent[-keep:]] if keep else list(range(len(lines)))
    index = fresh[secrets.randbelow(len(fresh))]
    state.store.set_kv(ROTATION_KEY, json.dumps((recent + [index])[-max(keep, 1):]))
    return lines[index]


def _markdown(r: CelebrateResult) -> str:
    out = ["## Root cause", r.root_cause, "", "## The fix", r.fix_summary, ""]
    if r.diff_stat:
        out.append(f"Changed ({r.lines_changed} lines):")
        out.extend(f"- `{s.path}` (+{s.added} -{s.removed}{', ' + s.status if s.status != 'modified' else ''})"
                   for s in r.diff_stat)
        out.append("")
    out += ["## Tests", f"- Added `{r.test_added}`; before the fix it failed with {r.failed_before}"]
    passed = [t for t in r.tests_verified if t.outcome == "passed"]
    others = [t for t in r.tests_verified if t.outcome != "passed"]
    out.append(f"- Verified on the final code: {len(passed)} passed" + (f", {len(others)} other" if others else ""))
    out.extend(f"  - `{t.node_id}`: {t.outcome}" for t in r.tests_verified[:20])
    if r.waivers:
        out += ["", "## Waived steps"] + [f"- {w.step.value}: {w.reason}" for w in r.waivers]
    if r.review_warnings:
        out += ["", "## Review notes"] + [f"- {w}" for w in r.review_warnings]
    out += ["", "```", r.celebration, "```"]
    return "\n".join(out)
