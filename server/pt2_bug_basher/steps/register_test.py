"""Step 4: a failing unit test in a topical test file, checked statically, then run by the server."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.compare import Failure, Oracle, new_test
from pt2_bug_basher.case.workflow import Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import ReproduceEvidence, TestEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.pytest import session, static_checks
from pt2_bug_basher.execution.pytest.results import FailureInfo, TestOutcome, analyse
from pt2_bug_basher.execution.pytest.static_checks import StaticCheck
from pt2_bug_basher.execution.runs import ProgressFn, check_timeout
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.playbooks import layer_of


class RegisterTestResult(BaseModel):
    ok: bool = Field(description="the test fails the way the reproduction does: registered")
    case_id: str
    test_file: str
    test_name: str
    node_id: str | None = Field(None, description="the pytest node id that ran")
    outcome: str = Field(description="failed, error, passed, skipped, collection_error or not_run")
    failure: FailureInfo | None = Field(None, description="what the failure looked like")
    reproduction: str | None = Field(None, description="the reproduction's failure, for comparison")
    comparison: str = Field(description="why the failure does or does not match the reproduction")
    warnings: list[str] = Field(default_factory=list)
    run_id: str | None = None
    recorded: bool = False
    next_step: str


class _Failing(NamedTuple):
    """The registered test's failure that matches the reproduction's: the test's outcome, and what it showed."""

    outcome: TestOutcome
    info: FailureInfo


async def register_test(state: AppState, case_id: str, test_file: str, test_name: str,
                        timeout_s: float | None = None, *, progress: ProgressFn | None = None) -> RegisterTestResult:
    """Check the test file statically, run the test, and register it if it fails like the reproduction."""
    flow = await state.gate(ToolName.register_test, case_id)
    case = flow.case
    repo = Path(case.repo).resolve()
    path = state.confine(case, test_file, "test_file")
    if not path.is_relative_to(repo):
        raise InvalidInput(f"test_file {test_file!r} resolves to {path}, outside the case's repository {repo}.")
    repro_record = flow.latest_ok(Step.reproduce)
    repro = repro_record.payload(ReproduceEvidence) if repro_record is not None else None
    category = repro.category if repro else None
    layer = layer_of(state.store.localization(case_id))
    check = _checked(case_id, repo, path, test_name, category, layer)
    warnings = []
    if not await anyio.to_thread.run_sync(_tracked, repo, check.test_file):
        warnings.append(static_checks.new_test_file_note(repo, check.test_file, category, layer))
    tree_hash = await anyio.to_thread.run_sync(lambda: flow.tree_hash)
    timeout = check_timeout(timeout_s)
    cwd, notes = session.repo_cwd(case, repo, check.test_file)
    warnings.extend(notes)
    ran, generated = await _run(state, flow, check, cwd, repo, timeout, progress)
    keyword = f"{check.class_name} and {check.method}" if generated else None
    result = RegisterTestResult(
        ok=False, case_id=case_id, test_file=check.test_file, test_name=check.qualified, outcome="not_run",
        comparison="", warnings=warnings, run_id=ran.run_id, next_step="",
        reproduction=(f"{repro.exception_type or 'no exception'} ({category}): "
                      f"{(repro.message or '')[:200]}") if repro else None,
    )
    retry = "Fix the test, then: " + format_call(ToolName.register_test, case_id=case_id,
                                                 test_file=check.test_file, test_name=check.qualified)
    failing = _judge(result, ran, repro, check)
    if failing is None:
        return _refused(state, flow, result, check, tree_hash, retry)
    _register(state, result, check, failing, keyword, tree_hash)
    return result


def _checked(case_id: str, repo: Path, path: Path, test_name: str, category: str | None,
             layer: str | None) -> StaticCheck:
    """The test file's static check; refused, with the fix and the call to retry, when it finds problems."""
    check = static_checks.check_test_file(repo, path, test_name)
    if check.problems:
        message = f"register_test refused {check.test_file}: " + "; ".join(check.problems) + "."
        if static_checks.topical_problem(check.test_file) or not path.is_file():
            message += " " + static_checks.test_file_hint(repo, category, layer)
        message += " Fix it, then: " + format_call(ToolName.register_test, case_id=case_id, test_file="<file>",
                                                   test_name="<TestClass.test_name>")
        raise InvalidInput(message)
    return check


async def _run(state: AppState, flow: Workflow, check: StaticCheck, cwd: Path, repo: Path, timeout: float,
               progress: ProgressFn | None) -> tuple[session.PytestRun, bool]:
    """The test's pytest run, and whether it ran as generated variants (chosen by exact names): a test that
    no node id names runs again that way."""

    async def run(generated: bool) -> session.PytestRun:
        return await session.run_pytest(
            state.store, flow.case, [check.test_file] if generated else [check.node_id], cwd=cwd, rootdir=repo,
            only=check.qualified if generated else None, tool=ToolName.register_test.value, timeout_s=timeout,
            progress=progress, label=f"pytest {check.qualified}" + (" (generated variants)" if generated else ""))

    generated = check.instantiated
    ran = await run(generated)
    if not generated and not ran.report.tests and not ran.report.collection_errors:
        generated = True  # no test by that node id: its variants have generated names
        ran = await run(generated)
    return ran, generated


def _judge(result: RegisterTestResult, ran: session.PytestRun, repro: ReproduceEvidence | None,
           check: StaticCheck) -> _Failing | None:
    """The run's outcome and comparison, into the result; the failure when it matches the reproduction's."""
    report = ran.report
    if report.collection_errors:
        err = report.collection_errors[0]
        result.outcome = "collection_error"
        result.comparison = (f"pytest could not collect {err.node_id}: {err.message}. The test file does not "
                             "import or has an error at module level; that is not the bug")
        return None
    # Only the test itself ran: its node id, or (generated) its variants, selected by exact names.
    matched = report.tests
    if not matched:
        result.comparison = f"pytest ran no test: {ran.usage_error or 'nothing was collected'}"
        return None
    failing = [t for t in matched if t.outcome in ("failed", "error")]
    if not failing:
        outcome = matched[0]
        result.node_id, result.outcome = outcome.node_id, outcome.outcome
        if outcome.outcome == "skipped":
            result.comparison = f"the test was skipped ({outcome.message}); a skipped test proves nothing"
        else:
            result.comparison = ("the test PASSES on the current code, so it does not capture the bug. Make it "
                                 "exercise the failing configuration of the repro (backend, dynamic, dtype, "
                                 "inputs) and assert on the behaviour that is wrong")
        return None
    outcome = failing[0]
    info, seen = analyse(outcome)
    result.node_id, result.outcome, result.failure = outcome.node_id, outcome.outcome, info
    if outcome.outcome == "error":
        result.comparison = (f"the test errored outside its body (setup or teardown): {info.message[:300]}; "
                             "that is not the bug")
        return None
    match = Oracle(Failure.recorded(repro), new_test(check.test_file)).judge_failure(seen)
    result.comparison = match.reason
    if not match.matches:
        return None
    if repro is None:
        result.comparison = "the reproduction step was waived, so the failure is not compared: " + match.reason
    return _Failing(outcome, info)


def _register(state: AppState, result: RegisterTestResult, check: StaticCheck, failing: _Failing,
              keyword: str | None, tree_hash: str) -> None:
    """Record the test as the case's registered test, and lead on to the check on main."""
    info = failing.info
    result.ok = True
    state.store.add_evidence(
        result.case_id, Step.test.value, True,
        f"{check.qualified} in {check.test_file} fails: {info.exception_type or 'failure'} ({info.category})"[:500],
        tree_hash=tree_hash, run_id=result.run_id,
        data=TestEvidence(test_file=check.test_file, test_name=check.qualified, class_name=check.class_name,
                          method=check.method, node_id=failing.outcome.node_id, keyword=keyword,
                          message=info.message, category=info.category, signature=info.signature,
                          exception_type=info.exception_type, frame=info.frame, comparison=result.comparison),
    )
    result.recorded = True
    result.next_step = ("Confirm it fails on main too, in a worktree: "
                        + format_call(ToolName.make_worktree, case_id=result.case_id, action="create", ref="main")
                        + ". Settle the test's code first: an edit after that check "
                        "(anything beyond comments, layout or import order) makes it stale and the check is redone.")


def _refused(state: AppState, flow: Workflow, result: RegisterTestResult, check: StaticCheck, tree_hash: str,
             retry: str) -> RegisterTestResult:
    """Record a failed attempt only while no test is registered (a registered test stays registered)."""
    result.next_step = retry
    if flow.latest_ok(Step.test) is None:
        state.store.add_evidence(
            result.case_id, Step.test.value, False,
            f"{check.qualified}: {result.outcome} — {result.comparison}"[:500], tree_hash=tree_hash,
            run_id=result.run_id, data=TestEvidence(test_file=check.test_file, test_name=check.qualified,
                                                    outcome=result.outcome),
        )
    return result


def _tracked(repo: Path, rel: str) -> bool:
    from pt2_bug_basher.execution.gitstate import GIT_TIMEOUT_S, open_repo

    try:
        git_repo = open_repo(repo)
        return bool(git_repo.git.ls_files("--", rel, kill_after_timeout=GIT_TIMEOUT_S).strip())
    except Exception:  # not a git repository, or git failed: no warning
        return True
