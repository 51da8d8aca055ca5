"""review_changes — step 12: the diff against main, the server's own findings, and the self-review checklist."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RECORDS, tool_errors
from pt2_bug_basher.steps import review
from pt2_bug_basher.steps.review import ReviewResult


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.review_changes.value, title="Step 12: self-review the change", annotations=RECORDS)
    @tool_errors
    async def review_changes(
        case_id: Annotated[str, Field(max_length=200)],
    ) -> ReviewResult:
        """Step 12. The diff of your tree against the merge base with main (committed, uncommitted
        and untracked files), with findings the server checks itself — leftover print(/breakpoint()/
        pdb in changed non-test source lines (blocking), the registered test missing from the diff
        (blocking), conflict markers (blocking), files outside the usual places, untracked files,
        config changes, very large diffs (warnings) — the checkout's linter (ruff, else flake8, when
        the case's interpreter has one) on the changed lines, with file:line (warnings), the tests the
        change adds, and the self-review checklist to apply. With no blocking finding the review step
        completes for the current state of the code."""
        return await review.review_changes(state, case_id)
