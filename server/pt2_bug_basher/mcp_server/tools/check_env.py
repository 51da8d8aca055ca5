"""check_env — step 1: resolve the interpreter, probe torch, open a case."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import Resolve
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.elicitation import answered, ask_for_environment
from pt2_bug_basher.mcp_server.tools._base import RECORDS, progress_reporter, tool_errors
from pt2_bug_basher.steps import environment
from pt2_bug_basher.steps.environment import CheckEnvResult, EnvironmentChoice


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.check_env.value, title="Step 1: check the environment", annotations=RECORDS)
    @tool_errors
    async def check_env(
        ctx: Context,
        choice: Annotated[ElicitationResult[EnvironmentChoice], Resolve(ask_for_environment)],
        conda_env: Annotated[str | None, Field(description="conda env (or virtualenv) name", max_length=200)] = None,
        python: Annotated[str | None, Field(description="path of the Python interpreter to use",
                                            max_length=4096)] = None,
        repo: Annotated[str | None, Field(description="repository being fixed (default: the server's)",
                                          max_length=4096)] = None,
    ) -> CheckEnvResult:
        """Step 1. Find the interpreter (explicit python, else the named conda env, else the active env,
        else the server's own), import torch there in a subprocess, and report its version, git
        version, location (is it a develop build of `repo`?), CUDA/GPU, Triton and how many TORCH_LOGS
        names it registers (listed by the resource case://<case_id>/torch-logs). On success opens a
        case and returns its case_id."""
        return await environment.check_env(state, conda_env, python, repo, ask=answered(choice),
                                           progress=progress_reporter(ctx))
