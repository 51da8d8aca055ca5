"""Step 3, first half (localize): the backend ablation ladder, to find the layer that fails."""

from __future__ import annotations

from pt2_bug_basher.case.scripts import copy_note
from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.runs import ProgressFn, ignore_progress
from pt2_bug_basher.reduce.ladder import LocalizeResult, load_reference
from pt2_bug_basher.reduce.ladder import localize as run_ladder


async def localize(
    state: AppState, case_id: str, script: str | None = None, *, progress: ProgressFn | None = None,
) -> LocalizeResult:
    """Rerun the repro (default: the reproduction's script) at each rung of the backend ladder."""
    flow = await state.gate(ToolName.localize, case_id)
    case = flow.case
    ref = load_reference(state.store, case)
    chosen = state.case_script(case, script or str(ref.script))
    result = await run_ladder(state.store, case, ref, chosen.path, progress=progress or ignore_progress)
    note = copy_note(chosen)
    if note:
        result.notes.append(note)
    status = await state.status(case_id)
    reduced = next(s for s in status.steps if s.step == Step.reduce)
    if reduced.status in ("done", "waived"):  # never propose a reduction the case already has
        result.next_step = f"Step 3 is complete already ({reduced.evidence}). {status.next_step}"
    return result

