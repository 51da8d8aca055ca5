"""check_env — step 1: resolve the interpreter, probe torch, open a case."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel, Field

from pt2_bug_basher.case.paths import confine
from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.environment import CheckEnvResult, start_case
from pt2_bug_basher.mcp_server.tools._base import RECORDS, tool_errors


class EnvironmentChoice(BaseModel):
    conda_env: str = Field("", description="name of the conda env or virtualenv (leave empty to give a path)")
    python: str = Field("", description="full path of the Python interpreter (leave empty to give an env name)")


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.check_env.value, title="Step 1: check the environment", annotations=RECORDS)
    @tool_errors
    async def check_env(
        ctx: Context,
        choice: Annotated[ElicitationResult[EnvironmentChoice], Resolve(_ask_for_environment)],
        conda_env: Annotated[str | None, Field(description="conda env (or virtualenv) name", max_length=200)] = None,
        python: Annotated[str | None, Field(description="path of the Python interpreter to use", max_length=4096)] = None,
        repo: Annotated[str | None, Field(description="repository being fixed (default: the server's)", max_length=4096)] = None,
    ) -> CheckEnvResult:
        """Step 1. Find the interpreter (explicit python, else the named conda env, else the active env,
        else the server's own), import torch there in a subprocess, and report its version, git
        version, location (is it a develop build of `repo`?), CUDA/GPU, Triton and the TORCH_LOGS
        names it registers. On success opens a case and returns its case_id."""
        repo_path = confine(repo or str(state.config.default_repo), state.config.allowed_roots, "repo")
        if not repo_path.is_dir():
            raise InvalidInput(f"repo {repo_path} is not a directory. Pass the path of the repository being fixed.")
        if not conda_env and not python and getattr(choice, "action", None) == "accept":
            conda_env, python = choice.data.conda_env or None, choice.data.python or None
        total = 2
        await ctx.report_progress(0, total, "importing torch in the target interpreter")
        result = await start_case(state.store, repo_path, conda_env=conda_env, python=python)
        await ctx.report_progress(total, total, "done")
        return result


def _ask_for_environment(
    ctx: Context, conda_env: str | None = None, python: str | None = None
) -> EnvironmentChoice | Elicit[EnvironmentChoice]:
    """Ask the user through MCP elicitation when no env is active, none was named, and the client can."""
    import os

    from pt2_bug_basher.execution.environment import active_environment

    caps = ctx.client_capabilities
    if conda_env or python or active_environment(dict(os.environ)) is not None:
        return EnvironmentChoice()
    if caps is None or getattr(caps, "elicitation", None) is None:
        return EnvironmentChoice()
    return Elicit(
        "No conda env or virtualenv is active and none was named. Which environment reproduces the "
        "failure? Give an env name or an interpreter path (leave both empty to use the server's own).",
        EnvironmentChoice,
    )
