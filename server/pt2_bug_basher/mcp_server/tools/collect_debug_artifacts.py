"""collect_debug_artifacts — step 8: rerun with TORCH_COMPILE_DEBUG, index graphs, IR and generated code."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from pt2_bug_basher.artifacts.collect import CollectArtifactsResult
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, CaseId, EnvArg, ScriptArgs, progress_reporter, tool_errors
from pt2_bug_basher.steps import artifacts


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.collect_debug_artifacts.value, title="Step 8: inspect what the compiler produced",
              annotations=RUNS_CODE)
    @tool_errors
    async def collect_debug_artifacts(
        ctx: Context,
        case_id: CaseId,
        script: Annotated[str | None, Field(description="the repro script (default: the script of run_id, else "
                                                        "the case's reproduction)", max_length=4096)] = None,
        run_id: Annotated[str | None, Field(description="rerun the command of this earlier run",
                                            max_length=200)] = None,
        args: ScriptArgs = None,
        trace: Annotated[bool, Field(description="also set TORCH_TRACE and run tlparse: Dynamo and AOT graphs "
                                                 "of each compile")] = False,
        env: EnvArg = None,
        timeout_s: Annotated[float | None, Field(description=f"seconds (default 600, max {MAX_TIMEOUT_S:.0f})")] = None,
    ) -> CollectArtifactsResult:
        """Step 8. Rerun the repro with TORCH_COMPILE_DEBUG=1 (compile caches off, a debug directory of
        the case's own) and index what the compiler wrote: per compiled graph (forward, backward,
        inference) its FX graph before and after Inductor's passes, the IR before and after fusion,
        the generated C++/Triton code, plus the Dynamo debug log and anything else. Each graph is
        summarised (node count, ops with counts, inputs with shapes/dtypes/strides, kernels with the
        FX nodes they compute); for a failure, the graph and kernel it happened in, from the
        traceback's frame in generated code or the compiler's error; for a wrong result, the kernels
        that write the graph output that differs, with their ops, their code and the code-generation
        functions that wrote their lines or made the code text in them (recorded during the run, those
        that compute the stored output first). Every file is a resource
        case://<case_id>/artifacts/<path>, read in pages (?page=N)."""
        return await artifacts.collect_debug_artifacts(state, case_id, script, run_id, args, trace, env, timeout_s,
                                                       progress=progress_reporter(ctx))
