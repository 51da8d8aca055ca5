"""celebrate — step 13: the case's summary, once verification and review hold for the current code."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RECORDS, tool_errors
from pt2_bug_basher.steps import celebrate as step
from pt2_bug_basher.steps.celebrate import CelebrateResult


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.celebrate.value, title="Step 13: celebrate", annotations=RECORDS)
    @tool_errors
    async def celebrate(
        case_id: Annotated[str, Field(max_length=200)],
        root_cause: Annotated[str, Field(description="the root cause, in a few sentences", max_length=4000)],
        fix_summary: Annotated[str, Field(description="what the fix changes and why", max_length=4000)],
    ) -> CelebrateResult:
        """Step 13. Only once verification and review both hold for the current state of the code.
        Returns the case's summary — root cause, what changed (diff stat) and why, every test added
        (the registered one with its failure before the fix), the tests verified with their outcomes,
        review notes, any waivers — as structure and as Markdown ready for a PR description; apart from
        it, warnings about the working tree (untracked files) and a celebration that fits the case."""
        return await step.celebrate(state, case_id, root_cause, fix_summary)
