"""get_workflow — the method (no case) or a case's steps, evidence and single next step."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import BaseModel, Field

from pt2_bug_basher.case.workflow import CaseStatus
from pt2_bug_basher.content import skill_body
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import READ_ONLY, tool_errors


class WorkflowResult(BaseModel):
    skill: str | None = Field(None, description="the whole debugging method (when no case_id is given)")
    case: CaseStatus | None = Field(None, description="the case's steps with status and evidence")
    next_step: str


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.get_workflow.value, title="The method, or where a case stands", annotations=READ_ONLY)
    @tool_errors
    async def get_workflow(
        case_id: Annotated[str | None, Field(description="a case from check_env", max_length=200)] = None,
    ) -> WorkflowResult:
        """Without case_id: the whole debugging method (the skill text). With case_id: each of the
        13 steps with its status (done, waived, stale, failed, stopped, pending), the evidence the
        server observed, the waivers, and the single next step as an exact tool call."""
        if case_id is None:
            return WorkflowResult(
                skill=skill_body(),
                next_step='Start a case: check_env(conda_env="<env>") (or python="<path>").',
            )
        status = (await state.status(case_id))
        return WorkflowResult(case=status, next_step=status.next_step)
