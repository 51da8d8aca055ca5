"""run_tests — step 11: the registered test and nearby tests, on the current code, read by node id."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, progress_reporter, tool_errors
from pt2_bug_basher.steps import verify
from pt2_bug_basher.steps.verify import RunTestsResult


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.run_tests.value, title="Step 11: run the tests (verification)", annotations=RUNS_CODE)
    @tool_errors
    async def run_tests(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        tests: Annotated[list[str] | None, Field(description="pytest node ids or test files, relative to the "
                                                             "repository; the registered test is always added")] = None,
        k: Annotated[str | None, Field(description="a pytest -k expression over the given files (default: the "
                                                   "registered test's file)", max_length=2000)] = None,
        where: Annotated[Literal["repo", "worktree"], Field(description="your tree (verification) or the case's "
                                                                         "worktree of main")] = "repo",
        timeout_s: Annotated[float | None, Field(description=f"seconds (default 600, max {MAX_TIMEOUT_S:.0f})")] = None,
        run_nearby: Annotated[bool | None, Field(description="also run the suggested nearby tests (default: "
                                                             "yes on where=\"repo\", no on the worktree)")] = None,
        sweep: Annotated[bool | None, Field(description="also sweep the case's ops' OpInfo samples, compiled against "
                                                        "eager, on your tree and on main (default: on where=\"repo\" "
                                                        "when few nearby tests exist)")] = None,
    ) -> RunTestsResult:
        """Step 11. Run tests with the case's interpreter (pytest, every outcome read by its exact
        node id; pytest-xdist when it is installed and there are more than a few tests) and report
        passed / failed / errored / skipped, each failure with its message, category and first
        relevant frame, collection errors apart. Suggests nearby existing tests (same class; names
        sharing keywords with the functions your diff changes) as node ids that run as given, and
        runs them too on where="repo" unless run_nearby=false. On where="repo", verification
        completes when the registered test and the chosen nearby tests pass on the current state of
        the code; any later edit makes it stale. The regression sweep compiles the OpInfo samples of
        the case's ops (and Dynamo/AOTAutograd pattern programs) against eager on your tree and on
        main: samples that newly fail block verification; newly passing and pre-existing failures are
        listed. Default: on where="repo" when few nearby tests exist (sweep=true: anywhere)."""
        return await verify.run_tests(state, case_id, tests, k, where, timeout_s, run_nearby, sweep,
                                      progress=progress_reporter(ctx))
