"""run_with_logs — steps 2 and 6: reproduce (repeat ≥ 2) and collect TORCH_LOGS, parsed into structure."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.repro import MAX_REPEAT, RunWithLogsResult
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools import _base as base
from pt2_bug_basher.steps import reproduce


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.run_with_logs.value, title="Steps 2 and 6: reproduce and collect logs",
              annotations=base.RUNS_CODE)
    @base.tool_errors
    async def run_with_logs(
        ctx: Context,
        case_id: base.CaseId,
        script: Annotated[str, Field(description="the repro script; a .py file outside the case's repository runs "
                                                 "from a copy the case keeps", max_length=4096)],
        args: base.ScriptArgs = None,
        logs: base.LogsArg = None,
        repeat: Annotated[int, Field(description=f"runs of the same command (1-{MAX_REPEAT}), in parallel where "
                                                 "cores allow; 2 or more completes the reproduction step")] = 2,
        trace: Annotated[bool, Field(description="also set TORCH_TRACE and run tlparse on the first run")] = False,
        env: base.EnvArg = None,
        cwd: Annotated[str | None, Field(description="working directory (default: the script's)",
                                         max_length=4096)] = None,
        timeout_s: base.PerRunTimeout = None,
        where: base.WhereRun = "case",
    ) -> RunWithLogsResult:
        """Steps 2 and 6. Run the repro with the case's interpreter (repeat times, in parallel within
        the cores) and return a compact failure record: exception, innermost user and torch frames,
        a signature stable across runs, the category, graph breaks and recompiles parsed from the
        logs, the generated kernels' code when the logs print output code, and the stderr lines that
        matter. Full logs are resources. With the guards or recompiles log on
        (logs="guards,recompiles"), `dynamo` says what Dynamo compiled, whether later calls
        recompiled, and the guards on each input. With repeat ≥ 2 and the same signature every
        time, the reproduction step completes; with `logs` after the main check, the logs step
        completes. where="main" runs it against the main-check worktree's sources instead: recorded
        runs, compared with your reproduction, completing no step."""
        return await reproduce.run_with_logs(state, case_id, script, args, logs, repeat, trace, env, cwd, timeout_s,
                                             where, progress=base.progress_reporter(ctx))
