"""run_with_logs with where="main": a script run against the sources of the case's main-check worktree.

The runs are recorded under the case like any other, each one's result noted with the ref and commit
it ran against. They complete no step: the reproduction and the logs are about the case's own tree,
and the main check is the registered test's, not a script's. What the runs showed is compared with
the case's reproduction, so the answer says whether the failure is on main too.
"""

from __future__ import annotations

from pathlib import Path

from pt2_bug_basher.analysis.compare import Failure, same_failure, script_on_other_ref
from pt2_bug_basher.analysis.failure import normalise_message
from pt2_bug_basher.case.workflow import SPEC, Workflow
from pt2_bug_basher.domain.calls import format_call
from pt2_bug_basher.domain.errors import InvalidInput, NotFound
from pt2_bug_basher.domain.evidence import ReproduceEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution import worktrees
from pt2_bug_basher.execution.pytest.session import pythonpath_with
from pt2_bug_basher.execution.repro import OnMain, RunWithLogsResult, run_repro
from pt2_bug_basher.execution.runs import ProgressFn
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.steps.logs import LogsRequest


async def run_on_main(
    state: AppState, flow: Workflow, script: Path, *, args: list[str], request: LogsRequest, repeat: int, trace: bool,
    cwd: Path | None, timeout_s: float, progress: ProgressFn | None,
) -> RunWithLogsResult:
    """Run the script `repeat` times with the worktree's sources first; record the runs, no evidence."""
    case = flow.case
    record = _main_worktree(state, flow)
    _, wt_env, wt_notes = worktrees.run_environment(record)
    if "PYTHONPATH" not in wt_env:
        raise InvalidInput(
            f"where=\"main\" cannot run against {record.ref}'s torch here: {'; '.join(wt_notes)}. The case's torch "
            "is an installed build, so a run in the worktree would import that same torch. Run against main's "
            "torch from an environment whose torch is a develop build of the repository."
        )
    worktree = Path(record.path)
    placed = await worktrees.place_script(state.store, record, script)
    primary = Path(record.repo).resolve()
    if cwd is not None and cwd.is_relative_to(primary):
        cwd = worktree / cwd.relative_to(primary)
        if not cwd.is_dir():
            raise InvalidInput(f"cwd has no counterpart on {record.ref}: {cwd} is not a directory in the worktree.")
    user_path = request.env if "PYTHONPATH" in request.env else None
    env_add = {**request.env, "PYTHONPATH": pythonpath_with(worktree, user_path)}
    against = f"{record.ref}@{record.commit[:12]}"
    result = await run_repro(
        state.store, case, placed, args=args, logs_spec=request.spec, repeat=repeat, trace=trace, env_add=env_add,
        timeout_s=timeout_s, cwd=cwd, progress=progress, inductor_config=request.inductor_config,
        differential=repeat >= 2, run_note={"against": against},
    )
    on_main = OnMain(ref=record.ref, commit=record.commit, worktree=str(worktree), script=str(placed))
    result.on_main = on_main
    if placed != script:
        result.notes.append(f"the script ran from its place in the worktree, {placed}, so that what it imports "
                            f"from beside it comes from {record.ref} too")
    result.notes.append(f"ran against {record.ref} at {record.commit[:12]} ({worktree} first on PYTHONPATH); "
                        "these runs complete no workflow step")
    comparison = _compare(flow, result, on_main)
    status = await state.status(case.case_id)
    result.next_step = f"{comparison} Workflow: {status.next_step}"
    return result


def _main_worktree(state: AppState, flow: Workflow) -> worktrees.WorktreeRecord:
    case_id = flow.case.case_id
    try:
        return worktrees.case_worktree(state.store, flow.case)
    except NotFound:
        create = format_call(ToolName.make_worktree, case_id=case_id, action="create", ref="main")
        before = "" if flow.is_complete(Step.test) else (
            f" It checks out main and runs the registered test there, so register the test first: "
            f"{SPEC[Step.test].opening(case_id)}.")
        raise InvalidInput(f"where=\"main\" runs the script in the case's main-check worktree, and the case has "
                           f"none yet. Create it: {create}, then call again.{before}") from None


def _compare(flow: Workflow, result: RunWithLogsResult, on_main: OnMain) -> str:
    """One sentence: how the runs on main compare with the case's reproduction."""
    where = f"{on_main.ref} ({on_main.commit[:12]})"
    deciding = result.logged_runs if any(r.failed for r in result.logged_runs) else result.runs
    failing = [r for r in deciding if r.failed]
    failure = result.failure
    if failure is None or not failing:
        shown = f"does not fail on {where}"
    else:
        shown = f"fails on {where} {len(failing)}/{len(deciding)} times with {failure.signature}"
    reproduction = flow.latest_ok(Step.reproduce)
    if reproduction is None:
        return f"The script {shown}; the case has no reproduction on your tree to compare it with."
    if failure is None or not failing:
        return (f"The script {shown}, where your tree's reproduction fails: the bug may be fixed on "
                f"{on_main.ref}, or come from your tree's changes.")
    reasons = sorted({normalise_message(b.reason)[:120] for b in result.graph_breaks})
    seen = Failure(signature=failure.signature, category=failure.category, exception_type=failure.exception_type,
                   message=failure.message, graph_break_reasons=reasons)
    wanted = Failure.recorded(reproduction.payload(ReproduceEvidence))
    match = same_failure(seen, wanted, script_on_other_ref(on_main.ref))
    on_main.same_as_case = match.level
    if match.matches:
        return f"The script {shown}: the same failure as your tree's reproduction ({match.reason})."
    return f"The script {shown}, not the way your tree's reproduction fails: {match.reason}."
