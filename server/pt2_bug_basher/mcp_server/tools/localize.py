"""localize — step 3 (first half): the backend ablation ladder, to find the layer that fails."""

from __future__ import annotations

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, CaseId, DefaultRepro, progress_reporter, tool_errors
from pt2_bug_basher.reduce.ladder import LocalizeResult
from pt2_bug_basher.steps import localize as localize_step


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.localize.value, title="Step 3: localise the failing layer (backend ladder)",
              annotations=RUNS_CODE)
    @tool_errors
    async def localize(ctx: Context, case_id: CaseId, script: DefaultRepro = None) -> LocalizeResult:
        """Rerun the repro with torch.compile's backend swapped (eager, aot_eager,
        aot_eager_decomp_partition, inductor) and, at the lowest failing backend, with dynamic=False
        and dynamic=True, without editing the script. Returns one table of which configurations fail
        the case's way (and which fail differently), the layer that implies (Dynamo, AOTAutograd,
        decompositions, Inductor, dynamic shapes), how failures were compared, and the minify call
        that fits. When backend='eager' already fails without an error from Dynamo (a wrong result),
        one more run with TORCH_LOGS=guards,recompiles says what Dynamo compiled, whether later calls
        recompiled and what each input was guarded on; suspicious guard shapes come with suspects
        (file, line, function) in the case's own torch."""
        return await localize_step.localize(state, case_id, script, progress=progress_reporter(ctx))
