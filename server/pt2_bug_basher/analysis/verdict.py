"""What one run showed: failed or not, its signature and category, its parsed logs.

Shared by run_with_logs and the reducers, so a run counts as the same failure everywhere. Pure:
the only I/O is reading the run's own logs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from pt2_bug_basher.analysis.torch_logs import LogSummary
    from pt2_bug_basher.execution.runs import RunResult

PARSE_BYTES = 4 * 1024 * 1024
TAIL_LINES = 15
TAIL_LINE_CHARS = 300
# Categories a script can show while exiting 0: what the logs or its own output report.
SOFT_FAILURES = ("graph_break", "accuracy", "recompile")

_NOISE_PREFIXES = (
    "Set TORCHDYNAMO_VERBOSE=1",
    "You can suppress this exception",
    "import torch._dynamo",
    "torch._dynamo.config.suppress_errors",
    "For more information, run with TORCH_LOGS",
    "To execute this test, run the following",
    "Traceback (most recent call last)",
)


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
    own_backend: str | None = Field(None, description=(
        "the script's own backend raised the failure: `function (file:line)`; torch.compile only called it"))


def is_noise_line(line: str) -> bool:
    """Dynamo's closing hints and similar boilerplate that bury the real error."""
    stripped = line.strip()
    return stripped.startswith(_NOISE_PREFIXES) or set(stripped) <= {"-", "=", "^", "~", " "}


# TORCH_LOGS records of generated code: run_with_logs gives their kernels a field of their own.
_CODE_LOG_MARKS = ("] [__output_code]", "] [__kernel_code]")


def tail_lines(text: str) -> list[str]:
    """The last lines that matter: Dynamo's closing hints and logged generated code are dropped, the error is kept.
    Below a plain traceback, the log records printed after it (caches' statistics at exit) are dropped too."""
    kept: list[str] = []
    lines = text.splitlines()
    after_traceback = any(line.startswith("Traceback (most recent call last)") for line in lines)
    for line in reversed(lines):
        if not line.strip() or is_noise_line(line) or any(mark in line for mark in _CODE_LOG_MARKS):
            continue
        if after_traceback and not kept and _LOG_PREFIX.match(line):
            continue
        kept.append(line[:TAIL_LINE_CHARS])
        if len(kept) >= TAIL_LINES:
            break
    return list(reversed(kept))


def soft_signature(logs: LogSummary) -> str | None:
    """For a run that exited 0 but showed graph breaks: the set of break reasons and places."""
    from pt2_bug_basher.analysis.failure import normalise_message

    if not logs.graph_breaks:
        return None
    parts = sorted({f"{normalise_message(b.reason)[:120]}@{b.location}" for b in logs.graph_breaks})
    return "graph_breaks|" + ";".join(parts)


def recompile_signature(logs: LogSummary) -> str:
    """For a run that exited 0 after hitting the recompile limit: the functions recompiled."""
    functions = sorted({r.function or "?" for r in logs.recompiles})
    return "recompile_limit|" + ";".join(functions)


# Dynamo's own warnings on stderr when it gives up on a frame rather than raising.
_DYNAMO_WARNINGS = re.compile(
    r"torch\._dynamo hit config\.\w*(?:recompile|cache_size)_limit|cache_size_limit|cache size limit"
    r"|recompile_limit reached|Graph break(?: \(user stack suppressed due to duplicate graph break\))? in user code"
    r"|Graph Break Reason|Skipping frame|skipping:? |falling back to eager|fall back to eager"
    r"|torch\._dynamo\.convert_frame: \[WARNING\]", re.IGNORECASE)
MAX_WARNINGS = 8


_LOG_PREFIX = re.compile(r"^(?:\[rank\d+\]:)?[VDIWEC]\d{4} [\d:.]+ +\d+ \S+\] (?:\[[^\]]*\] )*")


def dynamo_warnings(text: str) -> list[str]:
    """The lines where Dynamo says it hit a limit, broke a graph, skipped a frame or fell back to eager."""
    found: list[str] = []
    for line in text.splitlines():
        if "dynamo" not in line.lower() and "graph break" not in line.lower() and "eager" not in line.lower():
            continue
        if _DYNAMO_WARNINGS.search(line):
            found.append(line.strip()[:TAIL_LINE_CHARS])
            if len(found) >= MAX_WARNINGS:
                break
    return found


def run_uri(case_id: str, run_id: str, stream: str) -> str:
    return f"case://{case_id}/runs/{run_id}/{stream}"


class RunVerdict:
    """What one run showed: failed or not, its signature and category, its parsed logs."""

    def __init__(self, result: RunResult) -> None:
        from pt2_bug_basher.analysis.classify import classify, guessed
        from pt2_bug_basher.analysis.failure import own_backend_frame, parse
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
        backend = own_backend_frame(parse(text)) if crashed else None
        self.own_backend = f"{backend.function} ({backend.file}:{backend.line})" if backend else None
        if not crashed:
            if self.logs.recompile_limit_hit:
                self.failed = True
                self.signature = recompile_signature(self.logs)
                self.classification = self.classification.model_copy(update={"category": "recompile"})
            elif self.logs.graph_breaks:
                self.failed = True
                self.signature = soft_signature(self.logs)
                if self.classification.category not in SOFT_FAILURES:
                    self.classification = self.classification.model_copy(update={"category": "graph_break"})
            elif self.classification.category == "accuracy" and not guessed(self.classification):
                self.failed = True  # a printed mismatch; a guess from words ("nan") does not fail a run that passed
        if outcome.timed_out:
            self.signature = f"timeout|{self.signature or ''}"

    def outcome_model(self, case_id: str) -> RunOutcome:
        o = self.result.outcome
        run_id = self.result.run_id
        return RunOutcome(
            run_id=run_id, exit=o.describe_exit(), exit_code=o.exit_code, signal=o.signal_name,
            timed_out=o.timed_out, duration_s=round(o.duration_s, 2), failed=self.failed, signature=self.signature,
            stdout=run_uri(case_id, run_id, "stdout"), stderr=run_uri(case_id, run_id, "stderr"),
            output_bytes=o.stdout_bytes + o.stderr_bytes, cut_bytes=o.stdout_cut + o.stderr_cut,
        )

    def failure_summary(self) -> FailureSummary:
        c = self.classification
        f = c.failure

        def frame(fr) -> str | None:
            return f"{fr.file}:{fr.line} in {fr.function}" if fr is not None else None

        return FailureSummary(
            category=c.category, secondary=list(c.secondary), confidence=c.confidence,
            exception_type=f.exception_type if f else None, message=(f.message or "")[:500] if f else None,
            user_frame=frame(f.user_frame) if f else None, torch_frame=frame(f.torch_frame) if f else None,
            signature=self.signature, evidence=[f"{e.line_no}: {e.text}" for e in c.evidence[:6]],
            own_backend=self.own_backend,
        )


# --------------------------------------------------------------------------------------------
# The verdict: what the runs, the compile-off run, the logs and localize say together

USER_ERROR = "user_error"
USER_ERROR_ADVICE = "fails without torch.compile too: not a compiler bug"
OWN_BACKEND_ADVICE = ("raised in the script's own backend {backend}, which torch.compile calls with the captured "
                      "graph: a bug of that backend, not of PyTorch's compiler")
_EXPORT_RE = re.compile(r"\btorch\.export\b|\bfrom torch import export\b|\btorch\._export\b|torch/_?export/"
                        r"|\bexport\(|\btorch\._dynamo\.export\b")
_COMPILER_EXCEPTIONS = ("torch._dynamo", "torch._inductor", "BackendCompilerFailed", "InductorError",
                        "TorchRuntimeError", "Unsupported", "torch._subclasses", "torch.fx")


# Failures only compilation can show: the compile-off run always passes, so it decides nothing about fault.
COMPILE_ONLY_CATEGORIES = {"recompile": "recompiles", "graph_break": "breaks a graph"}


class Verdict(BaseModel):
    """The diagnosis from everything the server ran, and the evidence behind it."""

    category: str | None = Field(None, description="the failure's category; None when nothing failed")
    confidence: float | None = None
    reproduced: bool = False
    compiler_at_fault: bool | None = Field(None, description=(
        "True: passes with compilation off; False: fails without torch.compile too; None: not decided (a "
        "recompile or graph break, which compilation off can never show, stays None)"))
    evidence: list[str] = Field(default_factory=list, description="what decided it: run ids and the lines")
    playbook: str | None = Field(None, description="the playbook whose source and test files apply (localize's "
                                                   "layer wins over the category)")
    advice: str | None = None


def uses_export(*texts: str) -> bool:
    """torch.export (which TORCHDYNAMO_DISABLE does not turn off) in the script or the traceback."""
    return any(_EXPORT_RE.search(text) for text in texts if text)


def _same_way(compiled: FailureSummary, off: RunVerdict) -> tuple[bool, str]:
    """Whether the compile-off run failed as the compiled runs did, and how closely."""
    if not off.failed or off.result.outcome.timed_out or off.result.outcome.signal_name:
        return False, ""
    if off.signature == compiled.signature:
        return True, "the same signature"
    off_failure = off.classification.failure
    off_type = (off_failure.exception_type or "") if off_failure else ""
    short = off_type.rsplit(".", 1)[-1]
    if short and (short == (compiled.exception_type or "").rsplit(".", 1)[-1] or short in (compiled.message or "")):
        return True, f"the same exception ({short})"
    return True, f"another failure ({off.signature})"


def decide(
    failure: FailureSummary | None, reproduced: bool, run_ids: list[str], *, compile_off: RunVerdict | None = None,
    export_used: bool = False, logged: list[RunVerdict] | None = None, layer: str | None = None,
) -> Verdict:
    """Combine the text classifier's reading with what running the program differently showed."""
    verdict = Verdict(reproduced=reproduced)
    runs = ", ".join(run_ids)
    if failure is None:
        verdict.evidence.append(f"runs {runs}: exit 0, nothing reported")
        if logged:
            verdict.evidence.append("runs {} with TORCH_LOGS=graph_breaks,recompiles: no graph break, no recompile "
                                    "limit".format(", ".join(v.result.run_id for v in logged)))
        if compile_off is not None:
            verdict.evidence.append(f"run {compile_off.result.run_id} (compile off): "
                                    + ("failed" if compile_off.failed else "passed"))
        return verdict
    verdict.category, verdict.confidence = failure.category, failure.confidence
    head = failure.evidence[0] if failure.evidence else (failure.signature or failure.category)
    verdict.evidence.append(f"runs {runs}: {head}")
    agree: list[bool] = []
    if logged:
        for v in logged:
            if v.logs.recompile_limit_hit:
                reasons = "; ".join(sorted({r.reason[:120] for r in v.logs.recompiles})[:3]) or "no reason logged"
                verdict.evidence.append(f"run {v.result.run_id}: recompile limit hit ({reasons})")
            elif v.logs.graph_breaks:
                b = v.logs.graph_breaks[0]
                verdict.evidence.append(f"run {v.result.run_id}: {v.logs.total_graph_break_count} graph breaks "
                                        f"in the logs ({b.reason[:120]} at {b.location})")
        for line in dynamo_warnings(logged[0].stderr)[:2]:
            verdict.evidence.append(f"run {logged[0].result.run_id}: {_LOG_PREFIX.sub('', line)}")
    if failure.own_backend:
        # torch.compile only handed the graph over: the compile-off run passes because the backend never runs
        verdict.category, verdict.compiler_at_fault, verdict.confidence = USER_ERROR, False, 0.9
        verdict.advice = OWN_BACKEND_ADVICE.format(backend=failure.own_backend)
        verdict.evidence.append(f"runs {runs}: {verdict.advice}")
    elif export_used:
        verdict.evidence.append("torch.export in the script or traceback: the compile-off run cannot tell "
                                "(TORCHDYNAMO_DISABLE does not turn export off)")
    elif compile_off is not None:
        off_id = compile_off.result.run_id
        same, how = _same_way(failure, compile_off)
        if same and failure.exception_type:
            verdict.category, verdict.compiler_at_fault = USER_ERROR, False
            verdict.confidence = 0.95 if how.startswith("the same") else 0.7
            verdict.advice = USER_ERROR_ADVICE
            verdict.evidence.append(f"run {off_id} (TORCHDYNAMO_DISABLE=1) fails with {how}: {USER_ERROR_ADVICE}")
        elif compile_off.failed:
            verdict.evidence.append(f"run {off_id} (TORCHDYNAMO_DISABLE=1) also failed ({compile_off.signature}); "
                                    "a crash without a Python exception does not settle whose bug it is")
            agree.append(False)
        elif compile_off.result.outcome.exit_code == 0 and failure.category in COMPILE_ONLY_CATEGORIES:
            verdict.evidence.append(
                f"run {off_id} (TORCHDYNAMO_DISABLE=1) passes, as it must: without compilation nothing "
                f"{COMPILE_ONLY_CATEGORIES[failure.category]}, so it cannot tell a compiler bug from the compiler "
                "doing what the code asks (compiler at fault: not decided; the logged reasons decide)")
        elif compile_off.result.outcome.exit_code == 0:
            verdict.compiler_at_fault = True
            verdict.evidence.append(f"run {off_id} (TORCHDYNAMO_DISABLE=1) passes: the failure needs torch.compile")
            agree.append(True)
            exc = failure.exception_type or ""
            mismatch = exc.endswith("AssertionError") or failure.category == "accuracy"
            if mismatch and not any(name in exc for name in _COMPILER_EXCEPTIONS):
                verdict.category = "accuracy"
                verdict.confidence = max(verdict.confidence or 0, 0.9)
                verdict.evidence.append(f"run {off_id}: the assertion holds without compilation, so the compiled "
                                        "result differs from eager: accuracy")
    if layer:
        from pt2_bug_basher.playbooks import focus

        verdict.evidence.append(f"localize: the failure is in {layer}")
        verdict.playbook = focus(verdict.category, layer).playbook
    if not reproduced:
        agree.append(False)
    if verdict.category != USER_ERROR and verdict.confidence is not None and agree:
        # each piece of execution evidence that agrees adds confidence, each that does not takes it away
        shift = 0.05 * sum(1 if a else -1 for a in agree)
        verdict.confidence = round(min(0.99, max(0.05, verdict.confidence + shift)), 2)
    verdict.evidence = list(dict.fromkeys(verdict.evidence))
    return verdict
