"""make_worktree — step 5: does the registered test fail on main too? Checked in a worktree the server owns."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import progress_reporter, tool_errors
from pt2_bug_basher.steps import main_check
from pt2_bug_basher.steps.main_check import WorktreeResult

# Runs code, and action="remove" deletes a directory (only ever one the server created).
ANNOTATIONS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                              open_world_hint=True)


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.make_worktree.value, title="Step 5: check the test on main in a worktree",
              annotations=ANNOTATIONS)
    @tool_errors
    async def make_worktree(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        action: Annotated[Literal["create", "remove"],
                          Field(description="create (and run the test) or remove")] = "create",
        ref: Annotated[str, Field(description="branch, tag or commit to check out", max_length=200)] = "main",
        force: Annotated[bool, Field(description="remove or replace a worktree even if it holds changes the "
                                                 "server did not make")] = False,
        timeout_s: Annotated[float | None, Field(description="seconds for the test (default 600, "
                                                             f"max {MAX_TIMEOUT_S:.0f})")] = None,
    ) -> WorktreeResult:
        """Step 5. create: check out `ref` (default main) into a worktree the server owns (under its
        state directory), copy the registered test file into it, and run the test there with the
        case's interpreter. When torch is a develop build of the repository, the worktree's torch
        sources are the ones imported (worktree first on PYTHONPATH, compiled parts symlinked from
        your checkout). If the test fails on ref too, the step completes; if it PASSES there, the
        case stops (the test may not capture the bug, or it is already fixed). remove: deletes a
        worktree the server created; nothing else is ever touched."""
        return await main_check.make_worktree(state, case_id, action, ref, force, timeout_s,
                                              progress=progress_reporter(ctx))
