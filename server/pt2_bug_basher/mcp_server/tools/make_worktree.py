"""make_worktree — step 5: does the registered test fail on main too? Checked in a worktree the server owns."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.errors import BugBasherError, InvalidInput
from pt2_bug_basher.domain.evidence import MainCheckEvidence, TestEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.pytest_runs import FailureInfo
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S, check_timeout, execute
from pt2_bug_basher.mcp_server.tools._base import progress_reporter, tool_errors

TORCH_MARKER = "PT2BB-TORCH:"
# Runs code, and action="remove" deletes a directory (only ever one the server created).
ANNOTATIONS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                              open_world_hint=True)


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


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.make_worktree.value, title="Step 5: check the test on main in a worktree",
              annotations=ANNOTATIONS)
    @tool_errors
    async def make_worktree(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        action: Annotated[Literal["create", "remove"], Field(description="create (and run the test) or remove")] = "create",
        ref: Annotated[str, Field(description="branch, tag or commit to check out", max_length=200)] = "main",
        force: Annotated[bool, Field(description="remove or replace a worktree even if it holds changes the "
                                                 "server did not make")] = False,
        timeout_s: Annotated[float | None, Field(description=f"seconds for the test (default 600, max {MAX_TIMEOUT_S:.0f})")] = None,
    ) -> WorktreeResult:
        """Step 5. create: check out `ref` (default main) into a worktree the server owns (under its
        state directory), copy the registered test file into it, and run the test there with the
        case's interpreter. When torch is a develop build of the repository, the worktree's torch
        sources are the ones imported (worktree first on PYTHONPATH, compiled parts symlinked from
        your checkout). If the test fails on ref too, the step completes; if it PASSES there, the
        case stops (the test may not capture the bug, or it is already fixed). remove: deletes a
        worktree the server created; nothing else is ever touched."""
        from pt2_bug_basher.execution import pytest_runs as testing
        from pt2_bug_basher.execution import worktrees

        if action == "remove":
            case = state.store.get_case(case_id)
            path = await worktrees.remove(state.store, case, ref, force=force)
            return WorktreeResult(action="remove", ok=True, ref=ref, worktree=str(path),
                                  next_step=(await state.status(case_id)).next_step)
        if action != "create":
            raise InvalidInput(f"action must be 'create' or 'remove', not {action!r}.")
        worktrees.check_ref(ref)
        flow = await state.gate(ToolName.make_worktree, case_id)
        case = flow.case
        test = testing.registered_test(flow)
        torch_from_repo = bool((case.env.get("torch") or {}).get("imported_from_repo"))
        created = await worktrees.create(state.store, case, ref, test.test_file, torch_from_repo, force=force)
        record = created.record
        cwd, env_add, notes = worktrees.run_environment(record)
        result = WorktreeResult(
            action="create", ok=False, ref=ref, worktree=str(created.path), commit=record.commit,
            test=test.node_id, linked_build_outputs=len(record.linked), replaced=created.replaced, notes=notes,
            next_step="",
        )
        timeout = check_timeout(timeout_s)
        progress = progress_reporter(ctx)
        if torch_from_repo:
            await _check_torch_source(state, case, cwd, env_add, created.path, result, timeout)
        keyword = test.keyword
        selectors = [test.test_file] if keyword else [test.node_id]
        ran = await testing.run_pytest(state.store, case, selectors, cwd=cwd, rootdir=created.path, keyword=keyword,
                                       env_add=env_add, tool=ToolName.make_worktree.value, timeout_s=timeout,
                                       progress=progress, label=f"pytest on {ref}")
        result.run_id = ran.run_id
        retry = f'make_worktree(case_id="{case_id}", action="create", ref="{ref}")'
        data = MainCheckEvidence(ref=ref, commit=record.commit, worktree=str(created.path), node_id=test.node_id)
        report = ran.report
        if report.collection_errors:
            err = report.collection_errors[0]
            result.outcome = "collection_error"
            result.next_step = (f"On {ref} pytest could not collect the test file ({err.message}). The test depends "
                                f"on something that is not on {ref}: make it self-contained, register it again, "
                                f"then {retry}.")
            return result
        matched = [t for t in report.tests if t.node_id == test.node_id] or report.tests
        if not matched:
            result.outcome = "not_run"
            result.next_step = f"pytest ran no test on {ref}: {ran.usage_error or 'nothing collected'}. Check the test name, then {retry}."
            return result
        failing = [t for t in matched if t.outcome in ("failed", "error")]
        if not failing:
            outcome = matched[0]
            result.outcome = outcome.outcome
            if outcome.outcome == "skipped":
                result.next_step = (f"The test was skipped on {ref} ({outcome.message}): make it run there, "
                                    f"then {retry}.")
                return result
            state.store.add_evidence(
                case_id, Step.main_check.value, False,
                f"{test.test_name} PASSES on {ref} ({record.commit[:12]}) — the test may not capture the bug, "
                "or it is already fixed", run_id=ran.run_id, data=data.model_copy(update={"outcome": "passed"}),
            )
            result.recorded = True
            status = (await state.status(case_id))
            result.stopped = status.stopped
            result.next_step = (
                f"Stopped: the test passes on {ref} — it may not capture the bug, or the bug is already fixed there. "
                + (status.stopped or "")
            )
            return result
        outcome = failing[0]
        info, _ = testing.analyse(outcome)
        result.outcome, result.failure = outcome.outcome, info
        same, why = _same_failure(info, test)
        if not same:
            result.next_step = (f"The test fails on {ref}, but not the way it fails on your tree: {why}. Make the "
                                f"test depend only on what {ref} has, register it again, then {retry}.")
            return result
        state.store.add_evidence(
            case_id, Step.main_check.value, True,
            f"{test.test_name} fails on {ref} ({record.commit[:12]}) too: {info.exception_type or 'failure'}"[:500],
            run_id=ran.run_id,
            data=data.model_copy(update={"outcome": outcome.outcome, "message": info.message,
                                         "exception_type": info.exception_type, "category": info.category,
                                         "torch_file": result.torch_file}),
        )
        result.ok = result.recorded = True
        result.next_step = (await state.status(case_id)).next_step
        return result


def _same_failure(info: FailureInfo, test: TestEvidence) -> tuple[bool, str]:
    from pt2_bug_basher.execution.pytest_runs import TEST_BUG_EXCEPTIONS, short_type

    here, there = short_type(test.exception_type), short_type(info.exception_type)
    if there in TEST_BUG_EXCEPTIONS and there != here:
        return False, f"{info.exception_type}: {info.message[:200]} (a missing name or module on that ref)"
    if here and there == here:
        return True, "same exception type"
    if test.category and info.category == test.category and test.category != "unknown":
        return True, "same category"
    return False, (f"{info.exception_type or 'failure'} ({info.category}) there, "
                   f"{test.exception_type or 'failure'} ({test.category}) on your tree")


async def _check_torch_source(state: AppState, case: Any, cwd: Path, env_add: dict[str, str], worktree: Path,
                              result: WorktreeResult, timeout: float) -> None:
    """Import torch exactly as the test run will, and require it to come from the worktree."""
    argv = [case.python, "-c", f"import torch; print({TORCH_MARKER!r} + torch.__file__)"]
    run = await execute(state.store, case, argv, tool=ToolName.make_worktree.value, cwd=cwd, env_add=env_add,
                        timeout_s=min(timeout, 300.0), label="import torch in the worktree")
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
