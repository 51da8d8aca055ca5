"""minify — step 3: a minimal standalone repro (PyTorch's FX minifier or the source reducer)."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, CaseId, DefaultRepro, progress_reporter, tool_errors
from pt2_bug_basher.reduce.minify import MinifyResult
from pt2_bug_basher.steps import reduce


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.minify.value, title="Step 3: reduce to a minimal standalone repro", annotations=RUNS_CODE)
    @tool_errors
    async def minify(
        ctx: Context,
        case_id: CaseId,
        script: DefaultRepro = None,
        mode: Annotated[str, Field(description="'fx' (PyTorch's minifier on the failing graph), 'source' (reduce "
                                               "the script itself: graph breaks, Dynamo errors, recompiles) or "
                                               "'auto' (from the category and the localisation)")] = "auto",
        after: Annotated[str, Field(description="fx mode: dump the graph after 'aot' (Inductor failures) or after "
                                                "'dynamo' (any backend, AOTAutograd failures)")] = "aot",
        budget_s: Annotated[float | None, Field(description="time budget in seconds (default 600); when it runs "
                                                            "out, the best reduction so far is returned")] = None,
    ) -> MinifyResult:
        """Step 3. Reduce the repro while it keeps failing with the case's failure signature, and
        confirm the result in a fresh process. mode='fx' runs PyTorch's minifier (level 2 for
        crashes, 4 for accuracy) with a check string from the signature, faster trials, progress,
        and the trial output when it stops. mode='source' shrinks the script itself (statements in
        parallel, pysource-minimize, then shapes and integer constants). mode='auto' on a repro that
        is already minimal (a few statements, one or two ops in the compiled code) reduces nothing and
        records it as such, confirmed to fail the case's way; on a small one (up to 16 statements,
        8 compiled ops) its source reduction gets at most 60 s. Returns minimized_path
        (also a resource), the sizes before and after, whether it was confirmed, and next_step."""
        return await reduce.minify(state, case_id, script, mode, after, budget_s, progress=progress_reporter(ctx))
