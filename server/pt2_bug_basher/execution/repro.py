"""Steps 2 and 6: run a repro (repeatedly, in parallel), parse what it printed, record evidence."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, Field

from pt2_bug_basher.case.store import CaseRecord, Store
from pt2_bug_basher.domain.errors import InvalidInput
from pt2_bug_basher.domain.evidence import LogsEvidence, ReproduceEvidence
from pt2_bug_basher.domain.names import Step
from pt2_bug_basher.execution.runs import RunResult, execute, python_argv
from pt2_bug_basher.execution.tlparse import TraceSummary, run_tlparse

WITH_CONFIG = Path(__file__).resolve().parents[1] / "_probes" / "with_config.py"
MAX_REPEAT = 8
MAX_ARGS = 200
TAIL_LINES = 15
TAIL_LINE_CHARS = 300
PARSE_BYTES = 4 * 1024 * 1024
# Categories a script can show while exiting 0: what the logs or its own output report.
_SOFT_FAILURES = ("graph_break", "accuracy", "recompile")


class RunOutcome(BaseModel):
    run_id: str
    exit: str = Field(description="exit code, signal name, timeout or cancellation, in words")
    exit_code: int | None
    signal: str | None = None
    timed_out: bool = False
    duration_s: float
    failed: bool
    signature: str | None = None
    stdout: str = Field(description="resource URI of the full stdout")
    stderr: str = Field(description="resource URI of the full stderr")
    output_bytes: int
    cut_bytes: int = Field(0, description="bytes dropped from the middle of the logs (head and tail kept)")


class FailureSummary(BaseModel):
    category: str
    secondary: list[str] = Field(default_factory=list)
    confidence: float
    exception_type: str | None = None
    message: str | None = None
    user_frame: str | None = None
    torch_frame: str | None = None
    signature: str | None = None
    evidence: list[str] = Field(default_factory=list, description="the lines that decided the category")


class GraphBreakInfo(BaseModel):
    reason: str
    location: str | None = None
    count: int


class RecompileInfo(BaseModel):
    function: str | None = None
    reason: str
    guard: str | None = None
    count: int


class RunWithLogsResult(BaseModel):
    case_id: str
    script: str
    command: list[str]
    env_added: dict[str, str]
    runs: list[RunOutcome]
    reproduced: bool = Field(description="every run failed, with the same signature")
    same_signature: bool
    failure: FailureSummary | None = None
    graph_breaks: list[GraphBreakInfo] = Field(default_factory=list)
    graph_break_total: int = 0
    recompiles: list[RecompileInfo] = Field(default_factory=list)
    graphs_compiled: int | None = None
    frames_compiled: int | None = None
    tail: list[str] = Field(default_factory=list, description="the last lines of stderr that matter")
    trace: TraceSummary | None = None
    inductor_config: dict[str, object] = Field(default_factory=dict,
                                               description="Inductor config set before the script ran")
    recorded: list[str] = Field(default_factory=list, description="workflow evidence this call recorded")
    notes: list[str] = Field(default_factory=list)
    next_step: str


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


def parallelism(repeat: int) -> int:
    return max(1, min(repeat, os.cpu_count() or 1))


def _uri(case_id: str, run_id: str, stream: str) -> str:
    return f"case://{case_id}/runs/{run_id}/{stream}"


def _tail(text: str) -> list[str]:
    """The last lines that matter: Dynamo's closing hints are dropped, the error is kept."""
    kept: list[str] = []
    for line in reversed(text.splitlines()):
        if not line.strip() or is_noise_line(line):
            continue
        kept.append(line[:TAIL_LINE_CHARS])
        if len(kept) >= TAIL_LINES:
            break
    return list(reversed(kept))


_NOISE_PREFIXES = (
    "Set TORCHDYNAMO_VERBOSE=1",
    "You can suppress this exception",
    "import torch._dynamo",
    "torch._dynamo.config.suppress_errors",
    "For more information, run with TORCH_LOGS",
    "To execute this test, run the following",
    "Traceback (most recent call last)",
)


def is_noise_line(line: str) -> bool:
    """Dynamo's closing hints and similar boilerplate that bury the real error."""
    stripped = line.strip()
    return stripped.startswith(_NOISE_PREFIXES) or set(stripped) <= {"-", "=", "^", "~", " "}


def _soft_signature(summary: Any) -> str | None:
    """For a run that exited 0 but showed graph breaks: the set of break reasons and places."""
    from pt2_bug_basher.analysis.failure import normalise_message

    if not summary.graph_breaks:
        return None
    parts = sorted({f"{normalise_message(b.reason)[:120]}@{b.location}" for b in summary.graph_breaks})
    return "graph_breaks|" + ";".join(parts)


class RunVerdict:
    """What one run showed: failed or not, its signature and category, its parsed logs."""

    def __init__(self, result: RunResult) -> None:
        from pt2_bug_basher.analysis.classify import classify
        from pt2_bug_basher.analysis.torch_logs import parse_logs

        outcome = result.outcome
        self.result = result
        self.stderr = result.stderr_text(PARSE_BYTES)
        stdout = result.stdout_text(PARSE_BYTES)
        self.logs = parse_logs(self.stderr + "\n" + stdout)
        crashed = outcome.exit_code != 0 or outcome.timed_out
        text = self.stderr if crashed or not stdout.strip() else stdout[-200_000:] + "\n" + self.stderr
        self.classification = classify(text, exit_code=outcome.exit_code, signal_name=outcome.signal_name)
        failure = self.classification.failure
        self.signature: str | None = failure.signature if failure is not None else None
        self.failed = crashed
        if not crashed:
            if self.logs.graph_breaks:
                self.failed = True
                self.signature = _soft_signature(self.logs)
                if self.classification.category not in _SOFT_FAILURES:
                    self.classification = self.classification.model_copy(update={"category": "graph_break"})
            elif self.classification.category in ("accuracy",):
                self.failed = True
        if outcome.timed_out:
            self.signature = f"timeout|{self.signature or ''}"

    def outcome_model(self, case_id: str) -> RunOutcome:
        o = self.result.outcome
        return RunOutcome(
            run_id=self.result.run_id, exit=o.describe_exit(), exit_code=o.exit_code, signal=o.signal_name,
            timed_out=o.timed_out, duration_s=round(o.duration_s, 2), failed=self.failed, signature=self.signature,
            stdout=_uri(case_id, self.result.run_id, "stdout"), stderr=_uri(case_id, self.result.run_id, "stderr"),
            output_bytes=o.stdout_bytes + o.stderr_bytes, cut_bytes=o.stdout_cut + o.stderr_cut,
        )

    def failure_summary(self) -> FailureSummary:
        c = self.classification
        f = c.failure
        frame = (lambda fr: f"{fr.file}:{fr.line} in {fr.function}" if fr is not None else None)
        return FailureSummary(
            category=c.category, secondary=list(c.secondary), confidence=c.confidence,
            exception_type=f.exception_type if f else None, message=(f.message or "")[:500] if f else None,
            user_frame=frame(f.user_frame) if f else None, torch_frame=frame(f.torch_frame) if f else None,
            signature=self.signature, evidence=[f"{e.line_no}: {e.text}" for e in c.evidence[:6]],
        )


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
    progress,
    main_check_done: bool,
    tool: str = "run_with_logs",
    inductor_config: dict[str, object] | None = None,
) -> RunWithLogsResult:
    argv = python_argv(case, script, args)
    if inductor_config:
        sets = [item for key, value in inductor_config.items() for item in ("--set", f"{key}={json.dumps(value)}")]
        argv = [case.python, str(WITH_CONFIG), *sets, "--", str(script), *args]
    extra = dict(env_add)
    if logs_spec:
        extra["TORCH_LOGS"] = logs_spec
    case_dir = store.case_dir(case.case_id)
    trace_dirs: list[Path] = []
    results: list[RunResult | None] = [None] * repeat
    limiter = anyio.CapacityLimiter(parallelism(repeat))

    async def one(index: int) -> None:
        run_env = dict(extra)
        if trace:
            trace_dir = case_dir / "traces" / f"{os.getpid()}-{anyio.current_time():.0f}-{index}"
            trace_dir.mkdir(parents=True, exist_ok=True)
            trace_dirs.append(trace_dir)
            run_env["TORCH_TRACE"] = str(trace_dir)
        async with limiter:
            results[index] = await execute(
                store, case, argv, tool=tool, cwd=cwd or script.parent, env_add=run_env, timeout_s=timeout_s,
                progress=progress, label=f"{script.name} run {index + 1}/{repeat}",
            )

    async with anyio.create_task_group() as group:
        for index in range(repeat):
            group.start_soon(one, index)

    parsed = [RunVerdict(r) for r in results if r is not None]
    for p in parsed:
        store.set_run_result(p.result.run_id, {
            "failed": p.failed, "signature": p.signature, "category": p.classification.category,
        })
    first = parsed[0]
    signatures = {p.signature for p in parsed}
    all_failed = all(p.failed for p in parsed)
    same = all_failed and len(signatures) == 1
    result = RunWithLogsResult(
        case_id=case.case_id, script=str(script), command=argv, env_added={**parsed[0].result.env_add},
        runs=[p.outcome_model(case.case_id) for p in parsed], reproduced=same, same_signature=len(signatures) == 1,
        inductor_config=dict(inductor_config or {}), next_step="",
    )
    for p in parsed:
        for error in p.result.outcome.log_errors:
            result.notes.append(f"run {p.result.run_id}: its log could not be fully written ({error}); is the "
                                "disk full? The run itself finished; its parsed result rests on what was written.")
    failing = next((p for p in parsed if p.failed), None)
    if failing is not None:
        result.failure = failing.failure_summary()
        result.tail = _tail(failing.stderr)
    merged = first.logs
    result.graph_breaks = [GraphBreakInfo(reason=b.reason[:300], location=b.location, count=b.count)
                           for b in merged.graph_breaks[:12]]
    result.graph_break_total = merged.total_graph_break_count
    result.recompiles = [RecompileInfo(function=r.function, reason=r.reason[:300], guard=(r.guard or "")[:300] or None,
                                       count=r.count) for r in merged.recompiles[:12]]
    result.graphs_compiled, result.frames_compiled = merged.graphs_compiled, merged.frames_compiled
    if trace and trace_dirs:
        result.trace = await run_tlparse(trace_dirs[0], case_dir / "tlparse" / parsed[0].result.run_id,
                                         store.state_dir / "scratch")
    _record(store, case, script, args, parsed, result, logs_spec, main_check_done)
    return result


def _record(
    store: Store, case: CaseRecord, script: Path, args: list[str], parsed: list[RunVerdict],
    result: RunWithLogsResult, logs_spec: str | None, main_check_done: bool,
) -> None:
    run_ids = [p.result.run_id for p in parsed]
    n = len(parsed)
    failures = sum(p.failed for p in parsed)
    if n >= 2:
        if result.reproduced and result.failure is not None:
            f = result.failure
            summary = f"{script.name} failed {n}/{n} times with the same signature ({f.category}): {f.signature}"
            store.add_evidence(case.case_id, Step.reproduce.value, True, summary[:500], run_id=run_ids[0],
                               data=ReproduceEvidence(
                                   script=str(script), args=args, signature=f.signature, category=f.category,
                                   exception_type=f.exception_type, message=f.message, run_ids=run_ids, repeat=n))
            result.recorded.append("reproduce")
        else:
            why = (f"failed {failures}/{n} times" if failures != n
                   else f"failed every time but with {len({p.signature for p in parsed})} different signatures")
            store.add_evidence(case.case_id, Step.reproduce.value, False, f"{script.name} {why}", run_id=run_ids[0],
                               data=ReproduceEvidence(script=str(script), run_ids=run_ids,
                                                      signatures=sorted(str(p.signature) for p in parsed)))
    if logs_spec and main_check_done and failures:
        summary = (f"TORCH_LOGS={logs_spec}: {result.graph_break_total} graph breaks, "
                   f"{sum(r.count for r in result.recompiles)} recompiles, {result.graphs_compiled} graphs")
        store.add_evidence(case.case_id, Step.logs.value, True, summary, run_id=run_ids[0],
                           data=LogsEvidence(logs=logs_spec, run_ids=run_ids))
        result.recorded.append("logs")
