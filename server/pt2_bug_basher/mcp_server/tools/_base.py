"""Shared glue for the tool modules: error translation, annotations, progress and common argument types."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal, ParamSpec, TypeVar

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from pt2_bug_basher.domain.errors import BugBasherError
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S, ProgressFn
from pt2_bug_basher.playbooks import logs_argument_description

P = ParamSpec("P")
R = TypeVar("R")


def tool_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Anticipated failures become tool errors whose message reaches the model."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except BugBasherError as exc:
            raise ToolError(str(exc)) from exc

    return wrapper


READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
RECORDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
RUNS_CODE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)

# Arguments several tools take, described the same way everywhere.
CaseId = Annotated[str, Field(max_length=200)]
ScriptArgs = Annotated[list[str] | None, Field(description="arguments for the script")]
LogsArg = Annotated[str | None, Field(description=logs_argument_description(), max_length=2000)]
PerRunTimeout = Annotated[float | None, Field(description=f"per run, seconds (default 600, max {MAX_TIMEOUT_S:.0f})")]
EnvArg = Annotated[dict[str, str] | None, Field(description="extra environment variables")]
WhereRun = Annotated[Literal["case", "main"], Field(description=(
    "'case': your tree; 'main': the case's main-check worktree (make_worktree), its sources first on the path, "
    "the script copied to its place there; such runs are recorded but complete no step"))]
DefaultRepro = Annotated[str | None, Field(description="the repro (default: the one the reproduction step ran)",
                                           max_length=4096)]


def progress_reporter(ctx: Context) -> ProgressFn:
    """A progress callback for runs: every call sends a notification with a rising counter."""
    count = 0

    async def report(message: str) -> None:
        nonlocal count
        count += 1
        # A client that went away must not kill the run's bookkeeping.
        with contextlib.suppress(Exception):
            await ctx.report_progress(count, None, message)

    return report

# localize's: the agent's near misses, and the commit where the repro passed
NearMisses = Annotated[list[str] | None, Field(max_length=6, description=(
    "copies of the repro you changed in one way so that they pass (or fail differently): each runs at the failing "
    "backend under coverage, and what its run did not execute splits the lines every failing run ran"))]
GoodRef = Annotated[str | None, Field(max_length=200, description=(
    "a commit of the case's repository where the repro passed (it worked before a pull: ORIG_HEAD, a hash, a tag, "
    "HEAD~3): every line changed since then that a failing run ran is a suspect, passing runs or not"))]
BisectBudget = Annotated[float, Field(ge=0, le=7200, description="seconds for the bisection below the backend; "
                                                                 "0 skips it (the ladder alone)")]
