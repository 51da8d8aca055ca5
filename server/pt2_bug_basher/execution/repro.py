"""Run a repro repeatedly (in parallel) and summarise what the runs printed: the work behind steps 2 and 6."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.break_sites import break_site_suspects
from pt2_bug_basher.analysis.guards import DynamoDecisions, has_guard_trees, logs_recompiles, summarise_guards
from pt2_bug_basher.analysis.suspects import exception_suspects
from pt2_bug_basher.analysis.torch_logs import (
    AotMetadata,
    CapturedGraph,
    LoggedKernel,
    LogSummary,
    aot_metadata,
    captured_graphs,
    logged_kernels,
)
from pt2_bug_basher.analysis.verdict import (
    COMPILE_OFF_ENV,
    FailureSummary,
    RunOutcome,
    RunVerdict,
    Verdict,
    tail_lines,
)
from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.digest import file_digest
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import Suspect
from pt2_bug_basher.domain.process import RunOutput
from pt2_bug_basher.execution.cpus import parallel_runs
from pt2_bug_basher.execution.runs import ProgressFn, RunResult, execute, python_argv
from pt2_bug_basher.execution.tlparse import TraceSummary, run_tlparse, trace_summary
from pt2_bug_basher.execution.warm import WarmRequest

WITH_CONFIG = Path(__file__).resolve().parents[1] / "_probes" / "with_config.py"
MAX_REPEAT = 8
MAX_ARGS = 200
SILENT_LOGS = "graph_breaks,recompiles"


class GraphBreakInfo(BaseModel):
    reason: str
    location: str | None = None
    count: int


class RecompileInfo(BaseModel):
    function: str | None = None
    reason: str
    guard: str | None = None
    count: int


class OnMain(BaseModel):
    """Where a run with where="main" ran: the main-check worktree, its ref and commit."""

    ref: str
    commit: str
    worktree: str
    script: str = Field(description="the script as run: copied to its place in the worktree when it is the case's")
    same_as_case: str | None = Field(None, description=(
        "how the failure compares with the case's reproduction (signature or exception); None: it differs"))


class RunWithLogsResult(BaseModel):
    case_id: str
    script: str
    command: list[str]
    env_added: dict[str, str]
    runs: list[RunOutcome]
    reproduced: bool = Field(description="every run failed, with the same signature")
    same_signature: bool = Field(description="the runs failed with one signature (false when none failed)")
    failure: FailureSummary | None = None
    graph_breaks: list[GraphBreakInfo] = Field(default_factory=list)
    graph_break_total: int = 0
    recompiles: list[RecompileInfo] = Field(default_factory=list)
    graphs_compiled: int | None = Field(None, description="FX graphs compiled, from the logs that are on (with only "
                                                          "guards/recompiles: one per compiled entry, at most)")
    frames_compiled: int | None = Field(None, description="frame compilations (first compiles and recompiles), "
                                                          "from the logs that are on")
    dynamo: DynamoDecisions | None = Field(None, description=(
        "with the guards or recompiles log on: what Dynamo compiled, whether later calls recompiled, the guards "
        "on each input and guard shapes that let a compiled entry be reused wrongly"))
    graphs: list[CapturedGraph] = Field(default_factory=list, description=(
        "with the graph_code log on: the FX graphs Dynamo captured, the code the backend is handed (a size or a "
        "value Dynamo folded into a constant shows as one)"))
    aot_metadata: list[AotMetadata] = Field(default_factory=list, description=(
        "with the aot_graphs log on: per compiled graph, the inputs AOTAutograd copies mutations back to and the "
        "outputs it regenerates outside the graph as aliases of inputs (what its runtime wrappers do)"))
    tail: list[str] = Field(default_factory=list, description="the last lines of stderr that matter")
    suspects: list[Suspect] = Field(default_factory=list, description=(
        "an exception raised inside torch: its innermost torch frames that are not compile plumbing, innermost "
        "first; a guard shape the guard logs flag: the builder function that wraps such a value, then the guard's "
        "builder (file relative to the torch checkout)"))
    kernels: list[LoggedKernel] = Field(default_factory=list, description=(
        "the generated kernels (C++ cpp_fused_* or Triton triton_*) from the output_code log of the run shown, "
        "with their source-node comment and code (bounded; the full log is the run's stderr)"))
    kernels_left_out: list[str] = Field(default_factory=list, description="kernels whose code did not fit")
    trace: TraceSummary | None = None
    inductor_config: dict[str, object] = Field(default_factory=dict,
                                               description="Inductor config set before the script ran")
    compile_off: RunOutcome | None = Field(None, description="the run with compilation off (TORCHDYNAMO_DISABLE=1)")
    logged_runs: list[RunOutcome] = Field(default_factory=list, description=(
        f"reruns with TORCH_LOGS={SILENT_LOGS} of a script that exited 0: what they show decides"))
    verdict: Verdict | None = Field(None, description="the diagnosis from all runs, with the evidence behind it")
    recorded: list[str] = Field(default_factory=list, description="workflow evidence this call recorded")
    on_main: OnMain | None = Field(None, description="where=\"main\": the worktree, ref and commit it ran against")
    notes: list[str] = Field(default_factory=list)
    next_step: str


script_digest = file_digest


def check_args(args: list[str] | None) -> list[str]:
    args = list(args or [])
    if len(args) > MAX_ARGS:
        raise InvalidInput(f"pass at most {MAX_ARGS} script arguments.")
    for arg in args:
        if "\x00" in arg or len(arg) > 32768:
            raise InvalidInput("script arguments must be strings under 32 KiB without NUL bytes.")
    return args


def check_repeat(repeat: int) -> int:
    if repeat < 1 or repeat > MAX_REPEAT:
        raise InvalidInput(f"repeat must be between 1 and {MAX_REPEAT}, not {repeat}.")
    return repeat


async def run_repro(
    store: Store,
    case: CaseRecord,
    script: Path,
    *,
    args: list[str],
    logs_spec: str | None,
    repeat: int,
    trace: bool,
    env_add: dict[str, str],
    timeout_s: float,
    cwd: Path | None,
    progress: ProgressFn | None,
    tool: str = "run_with_logs",
    inductor_config: dict[str, object] | None = None,
    differential: bool = False,
    layer: str | None = None,
    run_note: dict[str, str] | None = None,
) -> RunWithLogsResult:
    """Run the script `repeat` times (in parallel within the usable CPUs) and summarise what the runs showed.

    `differential`: one more run in the same batch with compilation off, and, when every run exits 0 without
    logs asked for, reruns with graph-break and recompile logs. Records the runs, not the workflow evidence:
    the reproduce and logs steps decide what they prove. `run_note` is added to every run's stored result."""
    argv = _argv(case, script, args, inductor_config)
    results, trace_dirs = await _run_batch(
        store, case, argv, script, logs_spec=logs_spec, repeat=repeat, trace=trace, env_add=env_add,
        timeout_s=timeout_s, cwd=cwd, progress=progress, tool=tool, differential=differential)
    # in a worker thread: reading the runs' output, and a learned guess may fit its model (once per process)
    verdicts = await anyio.to_thread.run_sync(lambda: [RunVerdict(r) if r is not None else None for r in results])
    parsed = [v for v in verdicts[:repeat] if v is not None]
    compile_off = verdicts[repeat] if differential else None
    _record_runs(store, [*parsed, *([compile_off] if compile_off else [])], run_note or {})
    logged: list[RunVerdict] = []
    exited_clean = all(p.result.outcome.exit_code == 0 and not p.result.outcome.timed_out for p in parsed)
    if differential and not logs_spec and exited_clean and not all(
            p.failed and p.classification.category == "accuracy" for p in parsed):
        logged = await _logged_reruns(store, case, argv, script, repeat=repeat, env_add=env_add, timeout_s=timeout_s,
                                      cwd=cwd, progress=progress, tool=tool, run_note=run_note or {})
    first = parsed[0]
    deciding = logged if logged and any(v.failed for v in logged) else parsed
    signatures = {p.signature for p in deciding}
    all_failed = all(p.failed for p in deciding)
    same = all_failed and len(signatures) == 1
    result = RunWithLogsResult(
        case_id=case.case_id, script=str(script), command=argv, env_added={**parsed[0].result.env_add},
        runs=[p.outcome_model(case.case_id) for p in parsed], reproduced=same,
        same_signature=len(signatures) == 1 and any(p.failed for p in deciding),
        inductor_config=dict(inductor_config or {}), next_step="",
        compile_off=compile_off.outcome_model(case.case_id) if compile_off else None,
        logged_runs=[v.outcome_model(case.case_id) for v in logged],
    )
    forked = [r for r in [*results, *(v.result for v in logged)] if r is not None and r.forked_from]
    _add_run_notes(result, forked, parsed)
    failing = next((p for p in deciding if p.failed), None)
    if failing is not None:
        result.failure = failing.failure_summary()
        result.tail = tail_lines(failing.stderr)
        if failing.classification.category != "accuracy":  # a mismatch is raised by the comparison
            raised = exception_suspects(failing.stderr)
            named = {(s.file, s.function) for s in raised}
            # a graph break's site and what decided it, ahead of the frames Dynamo re-raised it from
            result.suspects = [s for s in break_site_suspects(failing.stderr, case.torch_dir)
                               if (s.file, s.function) not in named] + raised
    result.kernels, result.kernels_left_out = logged_kernels((failing or first).stderr)
    if differential:
        result.verdict = _verdict(result, script, deciding, compile_off, logged, layer)
    _add_logged_summary(result, logged[0].logs if logged else first.logs, (failing or first).stderr)
    if logs_spec and (has_guard_trees(first.stderr) or logs_recompiles(logs_spec)):
        _add_dynamo(result, case, first, logs_spec)
    if trace and trace_dirs:
        tlparse = await run_tlparse(store, case, trace_dirs[0], store.case_dir(case.case_id) / "tlparse"
                                    / parsed[0].result.run_id, tool=tool, progress=progress)
        result.trace = trace_summary(tlparse)
    return result


def _argv(case: CaseRecord, script: Path, args: list[str], inductor_config: dict[str, object] | None) -> list[str]:
    """The command that runs the script, through WITH_CONFIG when Inductor config is set first."""
    if inductor_config:
        sets = [item for key, value in inductor_config.items() for item in ("--set", f"{key}={json.dumps(value)}")]
        return [case.python, str(WITH_CONFIG), *sets, "--", str(script), *args]
    return python_argv(case, script, args)


async def _run_batch(
    store: Store, case: CaseRecord, argv: list[str], script: Path, *, logs_spec: str | None, repeat: int,
    trace: bool, env_add: dict[str, str], timeout_s: float, cwd: Path | None, progress: ProgressFn | None,
    tool: str, differential: bool,
) -> tuple[list[RunResult | None], list[Path]]:
    """The `repeat` runs (in parallel within the usable CPUs) and, when `differential`, the run with compilation
    off; with the trace directories of the runs that wrote one."""
    extra = dict(env_add)
    if logs_spec:
        extra["TORCH_LOGS"] = logs_spec
    case_dir = store.case_dir(case.case_id)
    trace_dirs: list[Path] = []
    total = repeat + (1 if differential else 0)
    results: list[RunResult | None] = [None] * total
    limiter = anyio.CapacityLimiter(parallel_runs(repeat))

    async def one(index: int) -> None:
        run_env = dict(extra)
        label = f"{script.name} run {index + 1}/{repeat}"
        if index == repeat:  # the differential run: no compilation, so no compile logs or trace either
            run_env = {**{k: v for k, v in env_add.items() if k != "TORCH_TRACE"}, **COMPILE_OFF_ENV}
            label = f"{script.name} with compilation off"
            # It compiles nothing (an import and an eager run): it starts beside the compiled runs, forked from
            # the warm interpreter of their environment when its imports did not read what differs
            # (TORCHDYNAMO_DISABLE is read when torch.compile is called; TORCH_LOGS is configured again).
            results[index] = await execute(store, case, argv, tool=tool, cwd=cwd or script.parent, env_add=run_env,
                                           timeout_s=timeout_s, progress=progress, label=label,
                                           warm=WarmRequest())
            return
        if trace:
            trace_dir = case_dir / "traces" / f"{os.getpid()}-{anyio.current_time():.0f}-{index}"
            trace_dir.mkdir(parents=True, exist_ok=True)
            trace_dirs.append(trace_dir)
            run_env["TORCH_TRACE"] = str(trace_dir)
        async with limiter:
            # Runs that share one environment fork from one warm interpreter (a trace gives each its own).
            results[index] = await execute(
                store, case, argv, tool=tool, cwd=cwd or script.parent, env_add=run_env, timeout_s=timeout_s,
                progress=progress, label=label, warm=None if trace else WarmRequest(),
            )

    async with anyio.create_task_group() as group:
        for index in range(total):
            group.start_soon(one, index)
    return results, trace_dirs


def _record_runs(store: Store, verdicts: list[RunVerdict], run_note: dict[str, str]) -> None:
    """Store each run's failed flag, signature and category (and `run_note`) with its result."""
    for v in verdicts:
        store.set_run_result(v.result.run_id, {
            "failed": v.failed, "signature": v.signature, "category": v.classification.category, **run_note,
        })


def _add_run_notes(result: RunWithLogsResult, forked: list[RunOutput], parsed: list[RunVerdict]) -> None:
    """Notes on the runs forked from a warm interpreter, and on logs that could not be fully written."""
    if forked:
        result.notes.append(
            f"runs {', '.join(r.run_id for r in forked)}: separate processes forked from the case's warm interpreter "
            f"{', '.join(sorted({str(r.forked_from) for r in forked}))} (torch imported once; reseeded like a new "
            "interpreter, sharing its string-hash seed)")
    for p in parsed:
        for error in p.result.outcome.log_errors:
            result.notes.append(f"run {p.result.run_id}: its log could not be fully written ({error}); is the "
                                "disk full? The run itself finished; its parsed result rests on what was written.")


def _add_logged_summary(result: RunWithLogsResult, merged: LogSummary, stderr: str) -> None:
    """Graph breaks, recompiles and compile counts from the logs of the run shown; AOTAutograd's metadata."""
    result.graph_breaks = [GraphBreakInfo(reason=b.reason[:300], location=b.location, count=b.count)
                           for b in merged.graph_breaks[:12]]
    result.graph_break_total = merged.total_graph_break_count
    result.recompiles = [RecompileInfo(function=r.function, reason=r.reason[:300], guard=(r.guard or "")[:300] or None,
                                       count=r.count) for r in merged.recompiles[:12]]
    result.graphs_compiled, result.frames_compiled = merged.graphs_compiled, merged.frames_compiled
    result.graphs = captured_graphs(stderr)
    result.aot_metadata = aot_metadata(stderr)


def _add_dynamo(result: RunWithLogsResult, case: CaseRecord, first: RunVerdict, logs_spec: str) -> None:
    """What Dynamo decided, from the first run's guard and recompile logs; the suspects its flags name."""
    result.dynamo = summarise_guards(first.stderr, recompiles_logged=logs_recompiles(logs_spec) or None,
                                     run_id=first.result.run_id, logs=logs_spec)
    if result.dynamo.flags and not result.suspects:  # as localize names them from the same flags
        from pt2_bug_basher.execution.dynamo_guards import suspects_for

        torch_file = (case.env.get("torch") or {}).get("file")
        result.suspects = suspects_for(result.dynamo.flags, Path(torch_file).parent if torch_file else None)


async def _logged_reruns(
    store: Store, case: CaseRecord, argv: list[str], script: Path, *, repeat: int, env_add: dict[str, str],
    timeout_s: float, cwd: Path | None, progress: ProgressFn | None, tool: str, run_note: dict[str, str],
) -> list[RunVerdict]:
    """A script that exited 0 may still have broken graphs or hit the recompile limit: rerun it with those logs."""
    results: list[RunResult | None] = [None] * repeat
    limiter = anyio.CapacityLimiter(parallel_runs(repeat))

    async def one(index: int) -> None:
        async with limiter:
            results[index] = await execute(
                store, case, argv, tool=tool, cwd=cwd or script.parent,
                env_add={**env_add, "TORCH_LOGS": SILENT_LOGS}, timeout_s=timeout_s, progress=progress,
                label=f"{script.name} with TORCH_LOGS={SILENT_LOGS} {index + 1}/{repeat}", warm=WarmRequest(),
            )

    async with anyio.create_task_group() as group:
        for index in range(repeat):
            group.start_soon(one, index)
    logged = await anyio.to_thread.run_sync(lambda: [RunVerdict(r) for r in results if r is not None])
    _record_runs(store, logged, run_note)
    return logged


def _verdict(result: RunWithLogsResult, script: Path, deciding: list[RunVerdict], compile_off: RunVerdict | None,
             logged: list[RunVerdict], layer: str | None) -> Verdict:
    """Decide from every run, and let the verdict's category and confidence stand for the failure's."""
    from pt2_bug_basher.analysis.verdict import decide, uses_export

    try:
        script_text = script.read_text(errors="replace")[:1_000_000]
    except OSError:
        script_text = ""
    failing = next((p for p in deciding if p.failed), None)
    export_used = uses_export(script_text, failing.stderr if failing else "")
    verdict = decide(result.failure, result.reproduced, [p.result.run_id for p in deciding],
                     compile_off=compile_off, export_used=export_used, logged=logged, layer=layer)
    if result.failure is not None and verdict.category is not None:
        result.failure.category, result.failure.confidence = verdict.category, verdict.confidence or 0.0
    return verdict
