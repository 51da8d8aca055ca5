"""Step 5: does the registered test fail on main too? Checked in a worktree the server owns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.compare import Failure, on_other_ref, same_failure
from pt2_bug_basher.case.store import CaseRecord
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.digest import python_source_digest, test_function_of
from pt2_bug_basher.domain.errors import BugBasherError, InvalidInput
from pt2_bug_basher.domain.evidence import MainCheckEvidence, TestEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution import warm
from pt2_bug_basher.execution.pytest.results import FailureInfo, TestOutcome, analyse
from pt2_bug_basher.execution.pytest.session import PytestRun, run_pytest
from pt2_bug_basher.execution.runs import ProgressFn, check_timeout, execute
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.execution.warm import WarmRequest
from pt2_bug_basher.steps._registered import qualified_name, registered_test

TORCH_MARKER = "PT2BB-TORCH:"


class WorktreeResult(BaseModel):
    action: str
    ok: bool = Field(description="create: the test fails on ref the way it fails on your tree; remove: removed")
    ref: str
    worktree: str
    commit: str | None = None
    test: str | None = Field(None, description="the registered test that ran there")
    outcome: str | None = Field(None, description="failed, error, passed, skipped, collection_error or not_run")
    failure: FailureInfo | None = None
    torch_file: str | None = Field(None, description="where torch was imported from inside the worktree run")
    imports_worktree_sources: bool | None = None
    linked_build_outputs: int = Field(0, description="untracked build outputs symlinked from the primary checkout")
    replaced: bool = Field(False, description="an earlier worktree of the server at that path was replaced")
    recorded: bool = False
    stopped: str | None = Field(None, description="why the case is stopped, when the test passes on ref")
    notes: list[str] = Field(default_factory=list)
    run_id: str | None = None
    next_step: str


@dataclass(frozen=True)
class _OnRef:
    """The registered test's run on the ref: what the check records, and the call that redoes it."""

    case_id: str
    ref: str
    commit: str
    test: TestEvidence
    ran: PytestRun
    data: MainCheckEvidence

    @property
    def retry(self) -> str:
        return format_call(ToolName.make_worktree, case_id=self.case_id, action="create", ref=self.ref)


async def make_worktree(state: AppState, case_id: str, action: str = "create", ref: str = "main",
                        force: bool = False, timeout_s: float | None = None, *,
                        progress: ProgressFn | None = None) -> WorktreeResult:
    """create: check out `ref` in a server-owned worktree and run the registered test there;
    remove: delete a worktree the server created."""
    from pt2_bug_basher.execution import worktrees

    if action == "remove":
        return await _remove(state, case_id, ref, force)
    if action != "create":
        raise InvalidInput(f"action must be 'create' or 'remove', not {action!r}.")
    worktrees.check_ref(ref)
    flow = await state.gate(ToolName.make_worktree, case_id)
    case = flow.case
    test = registered_test(flow)
    torch_from_repo = case.torch_from_repo
    # the test as copied into the worktree (its file's other tests left out)
    test_digest = python_source_digest(Path(case.repo) / test.test_file, test_function_of(test.node_id))
    created = await worktrees.create(state.store, case, ref, test.test_file, torch_from_repo, force=force)
    record = created.record
    cwd, env_add, notes = worktrees.run_environment(record)
    result = WorktreeResult(
        action="create", ok=False, ref=ref, worktree=str(created.path), commit=record.commit,
        test=test.node_id, linked_build_outputs=len(record.linked), replaced=created.replaced, notes=notes,
        next_step="",
    )
    if await anyio.to_thread.run_sync(worktrees.head_commit, Path(case.repo)) == record.commit:
        result.notes.append(
            f"{ref} is the commit the repository is on ({record.commit[:12]}): your branch has no commit of its own "
            f"yet, so the check runs the code you are on without your uncommitted edits; failing here says the bug "
            f"is on {ref} already.")
    timeout = check_timeout(timeout_s)
    if torch_from_repo:
        await _check_torch_source(state, case, cwd, env_add, created.path, result, timeout)
    generated = bool(test.keyword)
    ran = await run_pytest(state.store, case, [test.test_file] if generated else [test.node_id], cwd=cwd,
                           rootdir=created.path, only=qualified_name(test) if generated else None, env_add=env_add,
                           tool=ToolName.make_worktree.value, timeout_s=timeout, progress=progress,
                           label=f"pytest on {ref}")
    result.run_id = ran.run_id
    data = MainCheckEvidence(ref=ref, commit=record.commit, worktree=str(created.path), node_id=test.node_id,
                             test_file=test.test_file, test_sha256=test_digest)
    return await _judge(state, _OnRef(case_id, ref, record.commit, test, ran, data), result)


async def _remove(state: AppState, case_id: str, ref: str, force: bool) -> WorktreeResult:
    """Delete the server's worktree of `ref`, and stop the warm interpreter that used it."""
    from pt2_bug_basher.execution import worktrees

    case = state.store.get_case(case_id)
    path = await worktrees.remove(state.store, case, ref, force=force)
    await anyio.to_thread.run_sync(warm.stop_using, path)
    return WorktreeResult(action="remove", ok=True, ref=ref, worktree=str(path),
                          next_step=(await state.status(case_id)).next_step)


async def _judge(state: AppState, on: _OnRef, result: WorktreeResult) -> WorktreeResult:
    """The run's outcome on the ref: recorded when the test fails there as on your tree (or passes there,
    which stops the case); else what to change, then the call to redo the check."""
    ref, report = on.ref, on.ran.report
    if report.collection_errors:
        err = report.collection_errors[0]
        result.outcome = "collection_error"
        result.next_step = (f"On {ref} pytest could not collect the test file ({err.message}). The test depends "
                            f"on something that is not on {ref}: make it self-contained, register it again, "
                            f"then {on.retry}.")
        return result
    matched = [t for t in report.tests if t.node_id == on.test.node_id] or report.tests
    if not matched:
        result.outcome = "not_run"
        result.next_step = (f"pytest ran no test on {ref}: {on.ran.usage_error or 'nothing collected'}. "
                            f"Check the test name, then {on.retry}.")
        return result
    failing = [t for t in matched if t.outcome in ("failed", "error")]
    if not failing:
        return await _not_failing(state, on, result, matched[0])
    outcome = failing[0]
    info, seen = analyse(outcome)
    result.outcome, result.failure = outcome.outcome, info
    match = same_failure(seen, Failure.recorded(on.test), on_other_ref(ref))
    if not match.matches:
        result.next_step = (f"The test fails on {ref}, but not the way it fails on your tree: {match.reason}. Make "
                            f"the test depend only on what {ref} has, register it again, then {on.retry}.")
        return result
    state.store.add_evidence(
        on.case_id, Step.main_check.value, True,
        f"{on.test.test_name} fails on {ref} ({on.commit[:12]}) too: {info.exception_type or 'failure'}"[:500],
        run_id=on.ran.run_id,
        data=on.data.model_copy(update={"outcome": outcome.outcome, "message": info.message,
                                        "exception_type": info.exception_type, "category": info.category,
                                        "torch_file": result.torch_file}),
    )
    result.ok = result.recorded = True
    result.next_step = (await state.status(on.case_id)).next_step
    return result


async def _not_failing(state: AppState, on: _OnRef, result: WorktreeResult, outcome: TestOutcome) -> WorktreeResult:
    """Skipped on the ref: make it run there. Passing there: recorded, and the case stops."""
    ref = on.ref
    result.outcome = outcome.outcome
    if outcome.outcome == "skipped":
        result.next_step = (f"The test was skipped on {ref} ({outcome.message}): make it run there, "
                            f"then {on.retry}.")
        return result
    state.store.add_evidence(
        on.case_id, Step.main_check.value, False,
        f"{on.test.test_name} PASSES on {ref} ({on.commit[:12]}) — the test may not capture the bug, "
        "or it is already fixed", run_id=on.ran.run_id, data=on.data.model_copy(update={"outcome": "passed"}),
    )
    result.recorded = True
    status = await state.status(on.case_id)
    result.stopped = status.stopped
    result.next_step = (
        f"Stopped: the test passes on {ref} — it may not capture the bug, or the bug is already fixed there. "
        + (status.stopped or "")
    )
    return result


async def _check_torch_source(state: AppState, case: CaseRecord, cwd: Path, env_add: dict[str, str],
                              worktree: Path, result: WorktreeResult, timeout: float) -> None:
    """Import torch exactly as the test run will, and require it to come from the worktree."""
    argv = [case.python, "-c", f"import torch; print({TORCH_MARKER!r} + torch.__file__)"]
    run = await execute(state.store, case, argv, tool=ToolName.make_worktree.value, cwd=cwd, env_add=env_add,
                        timeout_s=min(timeout, 300.0), label="import torch in the worktree", warm=WarmRequest())
    line = next((ln for ln in run.stdout_text().splitlines() if ln.startswith(TORCH_MARKER)), None)
    if line is None:
        tail = " | ".join(run.stderr_text(4000).strip().splitlines()[-4:])
        raise BugBasherError(
            f"torch does not import in the worktree {worktree} ({run.outcome.describe_exit()}): {tail}. The "
            "compiled parts of the develop build may be missing from the primary checkout (run_id "
            f"{run.run_id})."
        )
    torch_file = Path(line[len(TORCH_MARKER):].strip())
    result.torch_file = str(torch_file)
    result.imports_worktree_sources = torch_file.is_relative_to(worktree)
    if not result.imports_worktree_sources:
        raise BugBasherError(
            f"in the worktree, torch is imported from {torch_file}, not from the worktree {worktree}: the check "
            "would test your tree's sources, not the ref's. Is torch installed as a develop build of the repository?"
        )
