"""localize — step 3 (first half): the backend ablation ladder, to find the layer that fails."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, progress_reporter, tool_errors
from pt2_bug_basher.reduce.ladder import LocalizeResult, load_reference
from pt2_bug_basher.reduce.ladder import localize as run_ladder


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.localize.value, title="Step 3: localise the failing layer (backend ladder)",
              annotations=RUNS_CODE)
    @tool_errors
    async def localize(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        script: Annotated[str | None, Field(description="the repro (default: the one the reproduction step ran)",
                                            max_length=4096)] = None,
    ) -> LocalizeResult:
        """Rerun the repro with torch.compile's backend swapped (eager, aot_eager,
        aot_eager_decomp_partition, inductor) and, at the lowest failing backend, with dynamic=False
        and dynamic=True, without editing the script. Returns one table of which configurations fail
        the case's way (and which fail differently), the layer that implies (Dynamo, AOTAutograd,
        decompositions, Inductor, dynamic shapes), how failures were compared, and the minify call
        that fits."""
        flow = await state.gate(ToolName.localize, case_id)
        case = flow.case
        ref = load_reference(state.store, case)
        path = state.confine(case, script, "script") if script else ref.script
        if not path.is_file():
            raise InvalidInput(f"script {path} does not exist or is not a file.")
        return await run_ladder(state.store, case, ref, path, progress=progress_reporter(ctx))
