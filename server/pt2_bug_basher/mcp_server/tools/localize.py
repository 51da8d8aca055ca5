"""localize — step 3 (first half): the backend ablation ladder, to find the layer that fails."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import (
    RUNS_CODE,
    BisectBudget,
    CaseId,
    DefaultRepro,
    GoodRef,
    NearMisses,
    progress_reporter,
    tool_errors,
)
from pt2_bug_basher.reduce.bisect import DEFAULT_BUDGET_S
from pt2_bug_basher.reduce.ladder import LocalizeResult
from pt2_bug_basher.steps import localize as localize_step


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.localize.value, title="Step 3: localise the failing layer (backend ladder)",
              annotations=RUNS_CODE)
    @tool_errors
    async def localize(ctx: Context, case_id: CaseId, script: DefaultRepro = None,
                       bisect_budget_s: BisectBudget = DEFAULT_BUDGET_S,
                       near_misses: NearMisses = None, good_ref: GoodRef = None) -> LocalizeResult:
        """Rerun the repro with torch.compile's backend swapped (eager, aot_eager,
        aot_eager_decomp_partition, inductor) and, at the lowest failing backend, with dynamic=False
        and dynamic=True, without editing the script. Below a failing decomposition or Inductor
        backend, PyTorch's compiler-bisector subsystems (passes, config switches, lowerings,
        decompositions) are switched off side by side, then the guilty one's applications are
        searched down to one. When backend='eager' already fails without an error from Dynamo (a
        wrong result), one more run with TORCH_LOGS=guards,recompiles,side_effects says what Dynamo
        compiled, whether later calls recompiled, what each input was guarded on, and which of the
        caller's objects it mutated and wrote back. When an exception raised inside torch used a None, one
        more run records which compiler functions returned a None of their own just before it. Returns the table, the
        layer (Dynamo, AOTAutograd, decompositions, Inductor, dynamic shapes), the bisection or the
        guard summary, suspects as file:line in torch's source (most likely first; for a lowering,
        also the code generation that ran only when that op was lowered), how failures were
        compared, and the minify call that fits. near_misses: your own passing copies of the repro,
        contrasted with the failing runs. good_ref: where the repro passed before (a regression): the
        lines changed since then that failing runs ran become suspects even when no run passes here."""
        return await localize_step.localize(state, case_id, script, bisect_budget_s=bisect_budget_s,
                                            progress=progress_reporter(ctx), near_misses=near_misses or (),
                                            good_ref=good_ref)
