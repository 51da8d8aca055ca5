"""Step 13: the case's summary, once verification and review hold for the current code."""

from __future__ import annotations

import json
import re
import secrets
import shlex
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.failure_text import summarise_failure
from pt2_bug_basher.case.workflow import Waiver, Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import (
    CelebrateEvidence,
    ClassifyEvidence,
    MainCheckEvidence,
    ReduceEvidence,
    ReproduceEvidence,
    ReviewEvidence,
    TestEvidence,
    VerifyEvidence,
)
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.gitstate import still_untracked, uncommitted_files
from pt2_bug_basher.execution.review import FileStat, is_test_path, not_committed_note
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.execution.worktrees import worktree_path
from pt2_bug_basher.playbooks import EXPORT

ROTATION_KEY = "celebrations:recent"
FALLBACK = "Bug fixed, test green, review clean. Well done."
# Where a fix lives, by the torch sources it changes (the `layer` a celebration may need).
SOURCE_LAYERS = (("torch/_dynamo/", "dynamo"), ("torch/_functorch/", "aot"), ("torch/_decomp/", "aot"),
                 ("torch/_refs/", "aot"), ("torch/_prims/", "aot"), ("torch/_inductor/", "inductor"),
                 ("torch/export/", "export"), ("torch/_export/", "export"))
LOCALIZED_LAYERS = {"Dynamo": "dynamo", "AOTAutograd": "aot", "decompositions": "aot", "Inductor": "inductor",
                    EXPORT: "export"}
CATEGORY_LAYERS = {"graph_break": "dynamo", "recompile": "dynamo", "dynamo_internal": "dynamo", "triton": "inductor"}
# Review findings about the state of the working tree rather than the change itself.
WORKTREE_KINDS = {"untracked"}


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
    tests_added: list[str] = Field(default_factory=list, description="every test the case registered or the "
                                                                     "change adds, the registered one first")
    tests_unregistered: list[str] = Field(default_factory=list, description="tests the change adds that the case "
                                          "never registered: no run the server made showed them failing before "
                                          "the fix")
    failed_before: str = Field(description="how the registered test failed before the fix (the exception's first "
                                           "line)")
    rerun_command: str | None = Field(None, description="PyTorch's command to run the registered test alone")
    tests_verified: list[TestOutcomeLine] = Field(description="the tests of the verification run, with outcomes")
    review_warnings: list[str] = Field(default_factory=list, description="review notes on the change")
    sweep: str | None = Field(None, description="the regression sweep of the verification: samples, ops, "
                                                "regressions, also fixed")
    worktree_warnings: list[str] = Field(default_factory=list, description="the working tree's state (untracked "
                                                                           "files): tidy it before the PR")
    waivers: list[Waiver]
    celebration: str = Field(description="for the user; not part of the summary")
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
    seen_untracked = [s.path for s in stats if s.status == "untracked"]
    # files the review saw untracked may have been committed since (the evidence is keyed to content)
    untracked = await anyio.to_thread.run_sync(lambda: still_untracked(Path(flow.case.repo), seen_untracked))
    for s in stats:
        if s.status == "untracked" and s.path not in untracked:
            s.status = "added"
    committed_since = set(seen_untracked) - untracked
    warnings = [f for f in review_data.findings if f.severity == "warning"
                and not (f.kind in WORKTREE_KINDS and f.file in committed_since)]
    on_tree = [f.text for f in warnings if f.kind in WORKTREE_KINDS or (f.file and f.file in untracked)]
    on_change = [f.text for f in warnings if f.text not in on_tree]
    uncommitted = await anyio.to_thread.run_sync(lambda: uncommitted_files(Path(flow.case.repo)))
    if uncommitted:
        on_tree.insert(0, f"not committed yet: {', '.join(uncommitted[:10])} differ from HEAD, so the branch's "
                          "HEAD does not hold the change the evidence was gathered on")
    failure = summarise_failure(test_data.message, test_data.exception_type) if test_data else None
    registered = _node_id(test_data) if test_data else "(waived)"
    added = [registered] if test_data else []
    for record in state.store.evidence(case_id, Step.test.value):
        earlier = record.payload(TestEvidence)
        name = _node_id(earlier)
        # A test registered earlier counts while the change still adds it.
        if record.ok and (not review_data.tests_added or name in review_data.tests_added):
            added.append(name)
    seen_failing = set(added)
    added += review_data.tests_added
    line = _next_celebration(state, case_facts(flow, review_data))
    result = CelebrateResult(
        case_id=case_id, root_cause=root_cause, fix_summary=fix_summary, diff_stat=stats,
        lines_changed=review_data.lines_changed, test_added=registered, tests_added=list(dict.fromkeys(added)),
        tests_unregistered=[t for t in dict.fromkeys(review_data.tests_added) if t not in seen_failing],
        failed_before=failure.headline if failure else "the test step was waived",
        rerun_command=(failure.rerun if failure else None) or _rerun(test_data), tests_verified=tests,
        sweep=verify_data.sweep.line() if verify_data.sweep else None,
        review_warnings=on_change[:10],
        worktree_warnings=on_tree[:10], waivers=status.waivers, celebration=line, summary="", next_step="",
    )
    result.summary = _markdown(result)
    state.store.add_evidence(case_id, Step.celebrate.value, True, f"celebrated: {root_cause[:200]}",
                             tree_hash=tree, data=CelebrateEvidence(root_cause=root_cause, fix_summary=fix_summary,
                                                                 celebration=line))
    main_check = flow.latest(Step.main_check)
    main_ref = main_check.payload(MainCheckEvidence).ref if main_check else "main"
    tidy = (f"The working tree holds untracked files (worktree_warnings): {', '.join(sorted(untracked))}; some may "
            "belong to the fix, others be scratch. " if untracked else "")
    tidy += not_committed_note(uncommitted)
    result.next_step = (f"Done. Share the celebration and the summary with the user; the summary doubles as the PR "
                        f"description. {tidy}")
    if worktree_path(state.store, case_id, main_ref).exists():  # none when the main check was waived
        result.next_step += "Remove the worktree when you no longer need it: " + format_call(
            ToolName.make_worktree, case_id=case_id, action="remove", ref=main_ref)
    result.next_step = result.next_step.rstrip()
    return result


def case_facts(flow: Workflow, review: ReviewEvidence) -> dict[str, set[str]]:
    """What the case shows, for picking a celebration that fits it (see prompts/README.md)."""
    facts: dict[str, set[str]] = {}
    torch = flow.case.env.get("torch") if isinstance(flow.case.env, dict) else None
    if isinstance(torch, dict) and "cuda_available" in torch:
        facts["device"] = {"gpu" if torch.get("cuda_available") and torch.get("gpus") else "cpu"}
    classified = flow.latest_ok(Step.classify)
    reproduced = flow.latest_ok(Step.reproduce)
    category = (classified.payload(ClassifyEvidence).category if classified else None) or (
        reproduced.payload(ReproduceEvidence).category if reproduced else None)
    if category:
        facts["category"] = {category}
    localized = flow.store.localization(flow.case.case_id)
    mode = classified.payload(ClassifyEvidence).compile_mode if classified else None
    exported = (localized is not None and localized.layer == EXPORT) or category == "export" or (
        mode is not None and mode.endswith("export"))
    facts["compiler"] = {"export" if exported else "torch.compile"}
    changed = [f.path for f in review.files if f.status != "untracked" and not is_test_path(f.path)]
    layers = {layer for path in changed for prefix, layer in SOURCE_LAYERS if path.startswith(prefix)}
    if not layers:
        layer = LOCALIZED_LAYERS.get(localized.layer or "") if localized else None
        layers = {layer} if layer else ({CATEGORY_LAYERS[category]} if category in CATEGORY_LAYERS else set())
    if layers:
        facts["layer"] = layers
    reduced = flow.latest_ok(Step.reduce)
    if reduced is not None and (mode := reduced.payload(ReduceEvidence).mode):
        facts["reduced"] = {mode}
    if flow.latest_ok(Step.main_check) is not None:
        facts["main"] = {"failed"}
    return facts


def _next_celebration(state: AppState, facts: dict[str, set[str]]) -> str:
    try:
        from pt2_bug_basher.content import celebrations

        entries = celebrations()
    except Exception:  # no prompt texts in this installation
        entries = []
    fitting = [i for i, entry in enumerate(entries) if entry.fits_case(facts)]
    if not fitting:
        return FALLBACK
    try:
        recent = json.loads(state.store.get_kv(ROTATION_KEY) or "[]")
    except ValueError:
        recent = []
    keep = max(0, min(len(fitting) - 1, len(fitting) // 2))
    fresh = [i for i in fitting if i not in recent[-keep:]] if keep else fitting
    index = fresh[secrets.randbelow(len(fresh))]
    state.store.set_kv(ROTATION_KEY, json.dumps((recent + [index])[-max(len(entries) // 2, 1):]))
    return entries[index].text


def _rerun(test: TestEvidence | None) -> str | None:
    """PyTorch's way to run one test alone (`python test/x.py TestClass.test_name`), when the failure did not
    print it."""
    if test is None or not test.test_file or not test.method:
        return None
    name = f"{test.class_name}.{test.method}" if test.class_name else test.method
    return f"python {shlex.quote(test.test_file)} {shlex.quote(name)}"


def _code(text: str) -> str:
    """text as a Markdown code span, whatever backticks it holds."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _markdown(r: CelebrateResult) -> str:
    out = ["## Root cause", r.root_cause, "", "## The fix", r.fix_summary, ""]
    # untracked files are not in the change yet, apart from a new file that holds the case's tests
    test_files = {node.split("::", 1)[0] for node in r.tests_added}
    changed = [s for s in r.diff_stat if s.status != "untracked" or s.path in test_files]
    if changed:
        out.append(f"Changed ({sum(s.added + s.removed for s in changed)} lines):")
        labels = {"modified": "", "untracked": ", new"}  # a new test file is not in git yet: new in the PR
        out.extend(f"- {_code(s.path)} (+{s.added} -{s.removed}{labels.get(s.status, ', ' + s.status)})"
                   for s in changed)
        out.append("")
    out.append("## Tests")
    if not r.tests_added:
        out.append("- No test registered (the test step was waived)")
    for node in r.tests_added:
        if node == r.test_added:
            out.append(f"- Added {_code(node)}; before the fix it failed with {_code(r.failed_before)}")
            if r.rerun_command:
                out.append(f"  - run it alone: {_code(r.rerun_command)}")
        elif node in r.tests_unregistered:
            out.append(f"- Added {_code(node)}; not registered, so no run showed it failing before the fix")
        else:
            out.append(f"- Added {_code(node)}")
    passed = [t for t in r.tests_verified if t.outcome == "passed"]
    others = [t for t in r.tests_verified if t.outcome != "passed"]
    out.append(f"- Verified on the final code: {len(passed)} passed" + (f", {len(others)} other" if others else ""))
    out.extend(f"  - {_code(t.node_id)}: {t.outcome}" for t in r.tests_verified[:20])
    if r.tests_verified and all(t.node_id in r.tests_added for t in r.tests_verified):
        out.append("  - only the added tests ran: no other test was found near them in this checkout")
    if r.sweep:
        out.append(f"- Regression sweep (compiled against eager, on the fix and on main): {r.sweep}")
    if r.waivers:
        out += ["", "## Waived steps"] + [f"- {w.step.value}: {' '.join(w.reason.split())}" for w in r.waivers]
    if r.review_warnings:
        out += ["", "## Review notes"] + [f"- {' '.join(w.split())}" for w in r.review_warnings]
    return "\n".join(out)


def _node_id(test: TestEvidence) -> str:
    """The test as pytest names it: `file::Class::test` (a registered name is `Class.test`)."""
    return f"{test.test_file}::{test.test_name.replace('.', '::')}"
