"""register_test — step 4: a failing unit test in a topical test file, checked and run by the server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import ReproduceEvidence, TestEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.pytest_runs import FailureInfo
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S, check_timeout
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, progress_reporter, tool_errors


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


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.register_test.value, title="Step 4: register a failing unit test", annotations=RUNS_CODE)
    @tool_errors
    async def register_test(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        test_file: Annotated[str, Field(description="the test file, relative to the repository "
                                                    "(e.g. test/dynamo/test_repros.py)", max_length=4096)],
        test_name: Annotated[str, Field(description="TestClass.test_method, or test_method if unique in the file",
                                        max_length=400)],
        timeout_s: Annotated[float | None, Field(description=f"seconds (default 600, max {MAX_TIMEOUT_S:.0f})")] = None,
    ) -> RegisterTestResult:
        """Step 4. Check the unit test you wrote, then run it. Checked by parsing the file: it is a
        topical test file (never test/dynamo/test_misc.py; better files are suggested from the
        case's category), the class derives from torch.testing._internal.common_utils.TestCase, the
        file ends with `if __name__ == "__main__": run_tests()`, the named test exists. Then pytest
        runs it with the case's interpreter on the current tree: it must FAIL, the same way as the
        reproduction (same category, same signature or exception type). A passing test or one
        failing for another reason (import error, typo) is not registered."""
        from pt2_bug_basher.execution import pytest_runs as testing

        flow = await state.gate(ToolName.register_test, case_id)
        case = flow.case
        repo = Path(case.repo).resolve()
        path = state.confine(case, test_file, "test_file")
        if not path.is_relative_to(repo):
            raise InvalidInput(f"test_file {test_file!r} resolves to {path}, outside the case's repository {repo}.")
        repro_record = flow.latest_ok(Step.reproduce)
        repro = repro_record.payload(ReproduceEvidence) if repro_record is not None else None
        category = repro.category if repro else None
        check = testing.check_test_file(repo, path, test_name)
        if check.problems:
            message = f"register_test refused {check.test_file}: " + "; ".join(check.problems) + "."
            if testing.topical_problem(check.test_file) or not path.is_file():
                files = testing.suggest_test_files(repo, category)
                message += (f" Better homes for a {category or 'compiler'} test: " + ", ".join(files[:5]) + ".")
            message += (f' Fix it, then: register_test(case_id="{case_id}", test_file="<file>", '
                        'test_name="<TestClass.test_name>")')
            raise InvalidInput(message)
        warnings = []
        if not _tracked(repo, check.test_file):
            warnings.append(f"{check.test_file} is a new file: prefer an existing topical file ("
                            + ", ".join(testing.suggest_test_files(repo, category)[:3]) + ")")
        tree_hash = await anyio.to_thread.run_sync(lambda: flow.tree_hash)
        timeout = check_timeout(timeout_s)
        progress = progress_reporter(ctx)
        keyword = f"{check.class_name} and {check.method}" if check.instantiated else None
        selectors = [check.test_file] if keyword else [check.node_id]
        cwd, notes = testing.repo_cwd(case, repo, check.test_file)
        warnings.extend(notes)
        ran = await testing.run_pytest(state.store, case, selectors, cwd=cwd, rootdir=repo, keyword=keyword,
                                       tool=ToolName.register_test.value, timeout_s=timeout, progress=progress,
                                       label=f"pytest {check.qualified}")
        if not keyword and not ran.report.tests and not ran.report.collection_errors:
            # Generated test names (device or parametrized variants): select by keyword instead.
            keyword = f"{check.class_name} and {check.method}"
            ran = await testing.run_pytest(state.store, case, [check.test_file], cwd=cwd, rootdir=repo,
                                           keyword=keyword, tool=ToolName.register_test.value, timeout_s=timeout,
                                           progress=progress, label=f"pytest -k {keyword}")
        result = RegisterTestResult(
            ok=False, case_id=case_id, test_file=check.test_file, test_name=check.qualified, outcome="not_run",
            comparison="", warnings=warnings, run_id=ran.run_id, next_step="",
            reproduction=(f"{repro.exception_type or 'no exception'} ({category}): "
                          f"{(repro.message or '')[:200]}") if repro else None,
        )
        retry = (f'Fix the test, then: register_test(case_id="{case_id}", test_file="{check.test_file}", '
                 f'test_name="{check.qualified}")')
        report = ran.report
        if report.collection_errors:
            err = report.collection_errors[0]
            result.outcome = "collection_error"
            result.comparison = (f"pytest could not collect {err.node_id}: {err.message}. The test file does not "
                                 "import or has an error at module level; that is not the bug")
            result.next_step = retry
            return _refused(state, flow, result, check, tree_hash, ran)
        matched = [t for t in report.tests if _is_registered(t, check)] or report.tests
        if not matched:
            result.comparison = f"pytest ran no test: {ran.usage_error or 'nothing was collected'}"
            result.next_step = retry
            return _refused(state, flow, result, check, tree_hash, ran)
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
            result.next_step = retry
            return _refused(state, flow, result, check, tree_hash, ran)
        outcome = failing[0]
        info, classification = testing.analyse(outcome)
        result.node_id, result.outcome, result.failure = outcome.node_id, outcome.outcome, info
        if outcome.outcome == "error":
            result.comparison = (f"the test errored outside its body (setup or teardown): {info.message[:300]}; "
                                 "that is not the bug")
            result.next_step = retry
            return _refused(state, flow, result, check, tree_hash, ran)
        if repro:
            comparison = testing.compare_with_reproduction(info, classification, repro, check.test_file)
        else:
            comparison = testing.compare_with_reproduction(info, classification, None, check.test_file)
            if comparison.matches:
                comparison.reason = "the reproduction step was waived, so the failure is not compared: " + comparison.reason
        result.comparison = comparison.reason
        if not comparison.matches:
            result.next_step = retry
            return _refused(state, flow, result, check, tree_hash, ran)
        result.ok = True
        state.store.add_evidence(
            case_id, Step.test.value, True,
            f"{check.qualified} in {check.test_file} fails: {info.exception_type or 'failure'} ({info.category})"[:500],
            tree_hash=tree_hash, run_id=ran.run_id,
            data=TestEvidence(test_file=check.test_file, test_name=check.qualified, class_name=check.class_name,
                              method=check.method, node_id=outcome.node_id, keyword=keyword,
                              message=info.message, category=info.category, signature=info.signature,
                              exception_type=info.exception_type, frame=info.frame, comparison=comparison.reason),
        )
        result.recorded = True
        result.next_step = (f'Confirm it fails on main too, in a worktree: make_worktree(case_id="{case_id}", '
                            'action="create", ref="main")')
        return result


def _is_registered(outcome: Any, check: Any) -> bool:
    if outcome.node_id == check.node_id:
        return True
    return check.method in outcome.name and (check.class_name or "") in outcome.classname


def _refused(state: AppState, flow: Any, result: RegisterTestResult, check: Any, tree_hash: str, ran: Any):
    """Record a failed attempt only while no test is registered (a registered test stays registered)."""
    if flow.latest_ok(Step.test) is None:
        state.store.add_evidence(
            result.case_id, Step.test.value, False,
            f"{check.qualified}: {result.outcome} — {result.comparison}"[:500], tree_hash=tree_hash,
            run_id=ran.run_id, data=TestEvidence(test_file=check.test_file, test_name=check.qualified,
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
