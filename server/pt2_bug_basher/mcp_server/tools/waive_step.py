"""waive_step — skip a gate explicitly, with a reason that stays on the record."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import BaseModel, Field

from pt2_bug_basher.case.workflow import Waiver, waive
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RECORDS, tool_errors


class WaiveResult(BaseModel):
    waived: Waiver
    waivers: list[Waiver] = Field(description="every waiver of the case; all appear in the final summary")
    next_step: str


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.waive_step.value, title="Waive a step, with a reason", annotations=RECORDS)
    @tool_errors
    async def waive_step(
        case_id: Annotated[str, Field(max_length=200)],
        step: Annotated[Step, Field(description="the step whose gate is waived")],
        reason: Annotated[str, Field(description="why the step does not apply (kept on the record)", max_length=2000)],
    ) -> WaiveResult:
        """Waive one step's gate explicitly, with a reason. Waivers are listed wherever the case's
        status is shown and in the final summary. The environment and celebrate steps cannot be
        waived; root_cause and fix have no gate."""
        record = waive(state.store, case_id, step.value if isinstance(step, Step) else str(step), reason)
        status = (await state.status(case_id))
        return WaiveResult(
            waived=Waiver(step=Step(record.step), reason=record.reason),
            waivers=status.waivers,
            next_step=status.next_step,
        )
