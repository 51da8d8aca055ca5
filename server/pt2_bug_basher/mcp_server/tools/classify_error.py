"""classify_error — step 7: which of the failure categories, on what evidence, and what to run next."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import Field

from pt2_bug_basher.domain.names import ToolName
from pt2_bug_basher.execution.state import AppState
from pt2_bug_basher.mcp_server.tools._base import RECORDS, tool_errors
from pt2_bug_basher.steps import classify
from pt2_bug_basher.steps.classify import MAX_TEXT, ClassifyResult


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.classify_error.value, title="Step 7: classify a failure", annotations=RECORDS)
    @tool_errors
    async def classify_error(
        text: Annotated[str | None, Field(description="any error output: traceback, log, issue paste",
                                          max_length=MAX_TEXT)] = None,
        run_id: Annotated[str | None, Field(description="classify the stderr of this run instead",
                                            max_length=200)] = None,
        case_id: Annotated[str | None, Field(description="record the result as this case's classification",
                                             max_length=200)] = None,
    ) -> ClassifyResult:
        """Step 7. Classify error text (or a run's stderr) into graph_break, backend_compiler_failed,
        recompile, accuracy, dynamo_internal, runtime_crash, triton, export, dynamic_shapes or unknown
        (user_error comes from runs, never from text alone), with the
        evidence lines, the compile mode and phase when visible, and from the method: the next
        diagnostic as an exact tool call, the config knobs, the key source files and the test files.
        Pure text analysis: nothing runs. Text that no rule places (no exception line, printed results,
        or an exception no rule knows that torch's own code raised) gets a guess (rules fallback:...,
        confidence at most 0.25; the last resort, learned from labelled public error text,
        fallback:learned at most 0.2), and the next step says it is one. A lone exception line is not
        guessed at: it is reproduced first, since the compile-off run tells whose code raised it.
        similar_reports names labelled public reports whose text reads most like this one (possibly the
        same bug). A pasted traceback whose torch is installed in an
        environment on this machine gets that interpreter in its check_env call. With case_id,
        completes the classification step."""
        return await classify.classify_error(state, case_id, text=text, run_id=run_id)
