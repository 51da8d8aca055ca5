"""collect_debug_artifacts — step 8: rerun with TORCH_COMPILE_DEBUG, index graphs, IR and generated code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from pydantic import Field

from pt2_bug_basher.artifacts.collect import (
    CollectArtifactsResult,
    Target,
    carried_env,
    collect,
    evidence_summary,
    resolve_artifact,
)
from pt2_bug_basher.case.pages import read_page
from pt2_bug_basher.case.state import AppState
from pt2_bug_basher.case.store import CaseRecord
from pt2_bug_basher.domain.errors import BugBasherError, InvalidInput, NotFound
from pt2_bug_basher.domain.evidence import ReproduceEvidence
from pt2_bug_basher.domain.names import Step, ToolName
from pt2_bug_basher.execution.repro import check_args
from pt2_bug_basher.execution.runs import MAX_TIMEOUT_S, check_env_additions, check_timeout
from pt2_bug_basher.mcp_server.tools._base import RUNS_CODE, progress_reporter, tool_errors


def register(mcp: MCPServer, state: AppState) -> None:
    @mcp.tool(name=ToolName.collect_debug_artifacts.value, title="Step 8: inspect what the compiler produced",
              annotations=RUNS_CODE)
    @tool_errors
    async def collect_debug_artifacts(
        ctx: Context,
        case_id: Annotated[str, Field(max_length=200)],
        script: Annotated[str | None, Field(description="the repro script (default: the script of run_id, else "
                                                        "the case's reproduction)", max_length=4096)] = None,
        run_id: Annotated[str | None, Field(description="rerun the command of this earlier run",
                                            max_length=200)] = None,
        args: Annotated[list[str] | None, Field(description="arguments for the script")] = None,
        trace: Annotated[bool, Field(description="also set TORCH_TRACE and run tlparse: Dynamo and AOT graphs "
                                                 "of each compile")] = False,
        env: Annotated[dict[str, str] | None, Field(description="extra environment variables")] = None,
        timeout_s: Annotated[float | None, Field(description=f"seconds (default 600, max {MAX_TIMEOUT_S:.0f})")] = None,
    ) -> CollectArtifactsResult:
        """Step 8. Rerun the repro with TORCH_COMPILE_DEBUG=1 (compile caches off, a debug directory of
        the case's own) and index what the compiler wrote: per compiled graph (forward, backward,
        inference) its FX graph before and after Inductor's passes, the IR before and after fusion,
        the generated C++/Triton code, plus the Dynamo debug log and anything else. Each graph is
        summarised (node count, ops with counts, inputs with shapes/dtypes/strides, kernels with the
        FX nodes they compute); for a failure, the graph and kernel it happened in, from the
        traceback's frame in generated code or the compiler's error. Every file is a resource
        case://<case_id>/artifacts/<path>, read in pages (?page=N)."""
        flow = await state.gate(ToolName.collect_debug_artifacts, case_id)
        case = flow.case
        target = resolve_target(state, case, script, run_id, check_args(args) if args else None)
        result = await collect(
            state.store, case, target, trace=trace, env_add=check_env_additions(env),
            timeout_s=check_timeout(timeout_s), progress=progress_reporter(ctx),
        )
        ok, summary, data = evidence_summary(result)
        state.store.add_evidence(case.case_id, Step.artifacts.value, ok, summary, data=data, run_id=result.run_id)
        result.recorded.append(Step.artifacts.value)
        result.next_step = await next_step(state, result, ok)
        return result

    @mcp.resource("case://{case_id}/artifacts/{+path}{?page}", name="debug-artifact", mime_type="text/plain",
                  description="A file collect_debug_artifacts indexed (graphs, IR, generated code, logs), "
                              "in pages of 64 KiB (?page=N, from 1)")
    def debug_artifact(case_id: str, path: str, page: int = 1) -> str:
        try:
            file = resolve_artifact(state.store, case_id, path)
            return read_page(file, page, f"case://{case_id}/artifacts/{path}")
        except NotFound as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        except BugBasherError as exc:
            raise ResourceError(str(exc)) from exc


def resolve_target(
    state: AppState, case: CaseRecord, script: str | None, run_id: str | None, args: list[str] | None,
) -> Target:
    """The command to rerun: the given script, an earlier run's command, or the case's reproduction."""
    if script and run_id:
        raise InvalidInput("pass script or run_id, not both: run_id reruns that run's own script.")
    if script:
        path = _script(state, case, script, "script")
        return Target([case.python, str(path), *(args or [])], path.parent, str(path), source="script")
    if run_id:
        run = state.store.get_run(run_id, case.case_id)
        argv = list(run.argv)
        if len(argv) < 2 or argv[0] != case.python:
            raise InvalidInput(
                f"run {run_id} did not run a script with the case's Python ({case.python}): it ran "
                f"{' '.join(argv[:3])[:200]}. Pass the run of a repro script, or script=\"<repro.py>\"."
            )
        rest = argv[1:]
        if rest[0].startswith("-"):
            # `python -m pytest ...` or similar, recorded by this server: rerun it as it was.
            if args:
                raise InvalidInput(f"run {run_id} ran `python {rest[0]} ...`, not a script: args cannot replace "
                                   "its arguments; pass script=... instead.")
            command, shown = [case.python, *rest], " ".join(rest[:2])
            cwd = _cwd(state, case, run.cwd, Path(case.repo))
        else:
            path = _script(state, case, rest[0], f"the script of run {run_id}")
            command = [case.python, str(path), *(args if args is not None else rest[1:])]
            shown = str(path)
            cwd = _cwd(state, case, run.cwd, path.parent)
        return Target(command, cwd, shown, env=carried_env(run.env), source=f"run {run_id}")
    records = state.store.evidence(case.case_id, Step.reproduce.value)
    scripted = [p for p in (r.payload(ReproduceEvidence) for r in records) if p.script]
    if not scripted:
        raise InvalidInput(
            "no script to rerun: pass script=\"<repro.py>\" or run_id=\"<run>\" (the case has no reproduction "
            f"on record; step 2 is run_with_logs(case_id=\"{case.case_id}\", script=\"<repro.py>\", repeat=2))."
        )
    repro = scripted[-1]
    path = _script(state, case, repro.script, "the case's reproduction script")
    repro_args = args if args is not None else list(repro.args)
    return Target([case.python, str(path), *repro_args], path.parent, str(path), source="reproduction")


def _script(state: AppState, case: CaseRecord, script: str, what: str) -> Path:
    path = state.confine(case, script, what)
    if not path.is_file():
        raise InvalidInput(f"{what} {path} does not exist or is not a file.")
    return path


def _cwd(state: AppState, case: CaseRecord, cwd: str, fallback: Path) -> Path:
    try:
        path = state.confine(case, cwd, "cwd")
    except InvalidInput:
        return fallback
    return path if path.is_dir() else fallback


async def next_step(state: AppState, result: CollectArtifactsResult, ok: bool) -> str:
    after = (await state.status(result.case_id)).next_step
    call = f'collect_debug_artifacts(case_id="{result.case_id}", run_id="{result.run_id}"'
    if not ok:
        return ("TORCH_COMPILE_DEBUG wrote nothing: the script may not reach torch.compile with the Inductor backend, "
                "or it fails before Inductor (Dynamo, AOTAutograd). Check stderr "
                f"({result.stderr}); for Dynamo/AOT failures use run_with_logs with a logs preset or {call}, "
                "trace=True).")
    failure = result.failure
    if failure is not None and (failure.kernel or failure.graph):
        where = f"kernel {failure.kernel} of graph {failure.graph}" if failure.kernel else f"graph {failure.graph}"
        read = failure.output_code or next((g.dir_uri for g in result.graphs if g.name == failure.graph), "")
        line = f" (line {failure.output_code_line})" if failure.output_code_line else ""
        nodes = f"; it computes the FX nodes {', '.join(failure.fx_nodes[:8])}" if failure.fx_nodes else ""
        graph_dir = next((g.dir_uri for g in result.graphs if g.name == failure.graph), None)
        fx = f", compared with {graph_dir}fx_graph_transformed.py and ir_post_fusion.txt" if graph_dir else ""
        return (f"The failure ({failure.phase or 'unknown phase'}) is in {where}: read {read}{line}{nodes}{fx}. "
                f"Find which lowering or codegen produced the wrong code. Then: {after}")
    if failure is not None:
        return (f"The failure is not in generated code ({failure.how}). Read the graphs ({result.index}) to see "
                f"what reached Inductor, and the stderr ({result.stderr}). Then: {after}")
    return (f"The run passed with TORCH_COMPILE_DEBUG ({result.exit}); the artifacts show the compiled code, but "
            "not the failure: check the script runs the failing configuration. Then: " + after)
