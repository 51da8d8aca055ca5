"""register_test — step 4: a failing unit test in a topical test file, checked and run by the server."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, progress_reporter, tool_errors
from pt2_bug_basher.steps import register_test as step
from pt2_bug_basher.steps.register_test import RegisterTestResult


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.register_test.value, title="Step 4: register a failing unit test", annotations=RUNS_CODE)
    @tool_errors
    async def register_test(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        test_file: Annotated[str, Field(description="the test file, relative to the repository "
                                                    "(e.g. test/dynamo/test_repros.py)", max_length=4096)],
        test_name: Annotated[str, Field(description="TestClass.test_method, or test_method if unique in the file",
                                        max_length=400)],
        timeout_s: Annotated[float | None, Field(description=f"seconds (default 600, max {MAX_TIMEOUT_S:.0f})")] = None,
    ) -> RegisterTestResult:
        """Step 4. Check the unit test you wrote, then run it. Checked by parsing the file: it is a
        topical test file (never test/dynamo/test_misc.py; better files are suggested from the
        case's category), the class derives from torch.testing._internal.common_utils.TestCase, the
        file ends with `if __name__ == "__main__": run_tests()`, the named test exists. Then pytest
        runs it with the case's interpreter on the current tree: it must FAIL, the same way as the
        reproduction (same category, same signature or exception type). A passing test or one
        failing for another reason (import error, typo) is not registered."""
        return await step.register_test(state, case_id, test_file, test_name, timeout_s,
                                        progress=progress_reporter(ctx))
