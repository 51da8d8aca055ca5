"""minify — step 3: a minimal standalone repro (PyTorch's FX minifier or the source reducer)."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from pydantic import Field

from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.domain.errors import InvalidInput, NotFound
from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, progress_reporter, tool_errors
from pt2_bug_basher.reduce.ladder import load_reference
from pt2_bug_basher.reduce.minify import MinifyResult, check_budget, check_mode, run_minify


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.minify.value, title="Step 3: reduce to a minimal standalone repro", annotations=RUNS_CODE)
    @tool_errors
    async def minify(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        script: Annotated[str | None, Field(description="the repro (default: the one the reproduction step ran)",
                                            max_length=4096)] = None,
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
        parallel, pysource-minimize, then shapes and integer constants). Returns minimized_path
        (also a resource), the sizes before and after, whether it was confirmed, and next_step."""
        check_mode(mode, after)
        budget = check_budget(budget_s)
        flow = await state.gate(ToolName.minify, case_id)
        case = flow.case
        ref = load_reference(state.store, case)
        path = state.confine(case, script, "script") if script else ref.script
        if not path.is_file():
            raise InvalidInput(f"script {path} does not exist or is not a file.")
        return await run_minify(state.store, case, ref, path, mode=mode, after=after, budget_s=budget,
                                progress=progress_reporter(ctx))

    @mcp.resource("case://{case_id}/minified/{name}", name="minified-repro", mime_type="text/x-python",
                  description="A reduced repro written by minify")
    def minified(case_id: str, name: str) -> str:
        try:
            state.store.get_case(case_id)
        except NotFound as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        if "/" in name or "\\" in name or name.startswith("."):
            raise ResourceNotFoundError(f"no minified repro named {name!r}")
        path = state.store.state_dir / "cases" / case_id / "minified" / name
        if not path.is_file():
            raise ResourceNotFoundError(f"no minified repro named {name!r} in case {case_id}")
        return path.read_text(errors="replace")
