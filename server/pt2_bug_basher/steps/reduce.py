"""Step 3 (reduce): minify the repro with PyTorch's FX minifier or the source reducer, and confirm it."""

from __future__ import annotations

from pathlib import Path

from pt2_bug_basher.case.scripts import copy_note
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.pytest.static_checks import test_file_hint
from pt2_bug_basher.execution.runs import ProgressFn, ignore_progress
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.playbooks import layer_of
from pt2_bug_basher.reduce.ladder import load_reference
from pt2_bug_basher.reduce.minify import MinifyResult, check_budget, check_mode, run_minify


async def minify(
    state: AppState, case_id: str, script: str | None = None, mode: str = "auto", after: str = "aot",
    budget_s: float | None = None, *, progress: ProgressFn | None = None,
) -> MinifyResult:
    """Reduce the repro (default: the reproduction's script) while it fails the case's way; record the result."""
    check_mode(mode, after)
    budget = check_budget(budget_s)
    flow = await state.gate(ToolName.minify, case_id)
    case = flow.case
    ref = load_reference(state.store, case)
    chosen = state.case_script(case, script or str(ref.script))
    result = await run_minify(state.store, case, ref, chosen.path, mode=mode, after=after, budget_s=budget,
                              progress=progress or ignore_progress)
    note = copy_note(chosen)
    if note:
        result.notes.append(note)
    if result.confirmed:  # the next step writes a test: where, in this checkout
        layer = layer_of(state.store.localization(case_id))
        result.next_step += " " + test_file_hint(Path(case.repo), ref.category, layer)
    return result
