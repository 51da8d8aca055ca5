"""What one run showed: failed or not, its signature and category, its parsed logs.

Shared by run_with_logs and the reducers, so a run counts as the same failure everywhere. Pure:
the only I/O is reading the run's own logs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.failure import (
    OWN_MARK,
    Frame,
    RaisedIn,
    compared_item,
    normalise_message,
    normalise_numbers,
)
from pt2_bug_basher.domain.names import USER_ERROR
from pt2_bug_basher.domain.process import RunOutput

if TYPE_CHECKING:
    from pt2_bug_basher.analysis.torch_logs import LogSummary

PARSE_BYTES = 4 * 1024 * 1024
TAIL_LINES = 15
TAIL_LINE_CHARS = 300
# Categories a script can show while exiting 0: what the logs or its own output report.
SOFT_FAILURES = ("graph_break", "accuracy", "recompile")
# The environment of the differential run: torch.compile returns what it is given, and nothing is compiled.
COMPILE_OFF_ENV = {"TORCHDYNAMO_DISABLE": "1"}

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
    raised_in: RaisedIn | None = Field(None, description=(
        "whose code raised the final exception: the program's, torch's own, or code torch compiled or generated"))
    compiled_callable: str | None = Field(None, description=(
        "raised in a function of the script that torch.compile's compiled code called (a callable the script's "
        "backend returned): `function (file:line)`"))
    compared: str | None = Field(None, description=(
        "a mismatch in a compared tuple or list: the item the assertion names, as the script writes it "
        "(`item [1] is `x.grad` (repro.py:12)`)"))


def is_noise_line(line: str) -> bool:
    """Dynamo's closing hints and similar boilerplate that bury the real error, and the server's probes' lines."""
    stripped = line.strip()
    return stripped.startswith((*_NOISE_PREFIXES, OWN_MARK)) or set(stripped) <= {"-", "=", "^", "~", " "}


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
        if after_traceback and not kept and _LOG_RECORD_PREFIX.match(line):
            continue
        kept.append(line[:TAIL_LINE_CHARS])
        if len(kept) >= TAIL_LINES:
            break
    return list(reversed(kept))


def soft_signature(logs: LogSummary) -> str | None:
    """For a run that exited 0 but showed graph breaks: the set of break reasons and places."""
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


# a glog record of TORCH_LOGS (failure.py's _LOG_PREFIX also takes torchrun, vLLM and pytest prefixes): printed after
# a plain traceback, such records are exit-time statistics, and a warning quoted as evidence drops it
_LOG_RECORD_PREFIX = re.compile(r"^(?:\[rank\d+\]:)?[VDIWEC]\d{4} [\d:.]+ +\d+ \S+\] (?:\[[^\]]*\] )*")


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

    def __init__(self, result: RunOutput) -> None:
        from pt2_bug_basher.analysis.classify import classify, guessed
        from pt2_bug_basher.analysis.failure import compiled_callable_frame, own_backend_frame, parse, raised_in
        from pt2_bug_basher.analysis.torch_logs import parse_logs

        outcome = result.outcome
        self.result = result
        self.compile_off = all(result.env_add.get(k) == v for k, v in COMPILE_OFF_ENV.items())
        self.stderr = result.stderr_text(PARSE_BYTES)
        stdout = result.stdout_text(PARSE_BYTES)
        self.logs = parse_logs(self.stderr + "\n" + stdout)
        crashed = outcome.exit_code != 0 or outcome.timed_out
        text = self.stderr if crashed or not stdout.strip() else stdout[-200_000:] + "\n" + self.stderr
        self.classification = classify(text, exit_code=outcome.exit_code, signal_name=outcome.signal_name)
        failure = self.classification.failure
        self.signature: str | None = failure.signature if failure is not None else None
        self.failed = crashed
        parsed = parse(text) if crashed else None
        backend = own_backend_frame(parsed) if parsed else None
        self.own_backend = _where(backend)
        self.compiled_callable = _where(compiled_callable_frame(parsed)) if parsed and not backend else None
        raised = raised_in(parsed) if parsed else None
        self.raised_in: RaisedIn | None = raised[0] if raised else None
        self.raised_at = f"{raised[1].file}:{raised[1].line} in {raised[1].function}" if raised else None
        # a failed comparison raises: which item differs, read from the parse already made (a crash's category
        # stays as classified)
        self.compared = compared_item(parsed, text) if parsed and self.classification.category == "accuracy" \
            else None
        if not crashed and not self.compile_off:  # with compilation off, the exit status alone decides
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
            own_backend=self.own_backend, raised_in=self.raised_in, compiled_callable=self.compiled_callable,
            compared=self.compared if c.category == "accuracy" else None,
        )


def _where(frame: Frame | None) -> str | None:
    return f"{frame.function} ({frame.file}:{frame.line})" if frame is not None else None


# --------------------------------------------------------------------------------------------
# The verdict: what the runs, the compile-off run, the logs and localize say together

USER_ERROR_ADVICE = "fails without torch.compile too: not a compiler bug"
OWN_BACKEND_ADVICE = ("raised in the script's own backend {backend}, which torch.compile calls with the captured "
                      "graph: a bug of that backend, not of PyTorch's compiler")
_EXPORT_RE = re.compile(r"\btorch\.export\b|\bfrom torch import export\b|\btorch\._export\b|torch/_?export/"
                        r"|\bexport\(|\btorch\._dynamo\.export\b")
_COMPILER_EXCEPTIONS = ("torch._dynamo", "torch._inductor", "BackendCompilerFailed", "InductorError",
                        "TorchRuntimeError", "Unsupported", "torch._subclasses", "torch.fx")
# Exceptions in which the compiler reports an error of the op it ran (on fake tensors): the type it names
# (`got RuntimeError(...)`) is the one the program raises without compilation.
_COMPILER_WRAPPERS = ("TorchRuntimeError", "BackendCompilerFailed", "InternalTorchDynamoError", "InductorError")


# Failures only compilation can show: the compile-off run always passes, so it decides nothing about fault.
COMPILE_ONLY_CATEGORIES = {"recompile": "recompiles", "graph_break": "breaks a graph"}

# How the run with compilation off (TORCHDYNAMO_DISABLE=1) ended, read against the compiled runs' failure.
OffReading = Literal["passes", "same_failure", "needs_compilation", "other_failure", "no_exception"]
# Whose bug the runs show: None when they do not decide it.
Fault = Literal["compiler", "program", "own_backend", "pytorch_outside_compiler"]


class Verdict(BaseModel):
    """The diagnosis from everything the server ran, and the evidence behind it."""

    category: str | None = Field(None, description="the failure's category; None when nothing failed")
    confidence: float | None = None
    reproduced: bool = False
    compiler_at_fault: bool | None = Field(None, description=(
        "True: passes with compilation off; False: fails without torch.compile too, or in the script's own "
        "backend; None: not decided (a recompile or graph break, which compilation off can never show, or a "
        "compile-off run that fails another way)"))
    fault: Fault | None = Field(None, description=(
        "whose bug: the compiler's, the program's own (user_error), the script's own backend (user_error), or "
        "PyTorch's outside the compiler (the same failure raised inside torch without compilation); None: not "
        "decided"))
    compile_off_reading: OffReading | None = Field(None, description=(
        "how the run with compilation off ended: passes (exit 0, whatever it printed), the same failure, another "
        "one because the script uses what only compilation provides, another failure, or no Python exception"))
    own_backend: str | None = Field(None, description="the script's own backend (or the callable it returned) "
                                                      "that raised: `function (file:line)`")
    evidence: list[str] = Field(default_factory=list, description="what decided it: run ids and the lines")
    playbook: str | None = Field(None, description="the playbook whose source and test files apply (localize's "
                                                   "layer wins over the category)")
    advice: str | None = None


def uses_export(*texts: str) -> bool:
    """torch.export (which TORCHDYNAMO_DISABLE does not turn off) in the script or the traceback."""
    return any(_EXPORT_RE.search(text) for text in texts if text)


def _short(exception_type: str | None) -> str:
    return (exception_type or "").rsplit(".", 1)[-1]


def _message_head(message: str | None) -> str:
    first = next((line for line in (message or "").splitlines() if line.strip()), "")
    return normalise_numbers(normalise_message(first))


def _same_failure(compiled: FailureSummary, off: RunVerdict) -> bool:
    """The compile-off run raised what the compiled runs raised: the same signature; the same exception type
    with the same message or from the same line of the program; or the exception the compiler's wrapper names
    (Dynamo ran the op on fake tensors and it failed there as it does for real)."""
    if off.signature == compiled.signature:
        return True
    failure = off.classification.failure
    off_type, compiled_type = _short(failure.exception_type if failure else None), _short(compiled.exception_type)
    if not off_type:
        return False
    if off_type == compiled_type:
        off_frame = failure.user_frame if failure else None
        same_line = off_frame is not None and compiled.user_frame == f"{off_frame.file}:{off_frame.line} in " \
                                                                     f"{off_frame.function}"
        return same_line or _message_head(failure.message if failure else None) == _message_head(compiled.message)
    return compiled_type in _COMPILER_WRAPPERS and re.search(rf"\b{re.escape(off_type)}\b", compiled.message or "")\
        is not None


# What only compiled objects and torch.compile's own APIs have: the compile-off run that fails on one of these
# fails because compilation is off, which says nothing about the compiled runs' failure.
_NEEDS_COMPILATION: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"has no attribute '(_orig_mod|_torchdynamo_orig_callable|_compiled_call_impl|get_compiler_config"
                r"|dynamo_ctx)'"), "an attribute only a compiled object has ({0})"),
    (re.compile(r"torch\._dynamo\.exc\.\w+|torch\._dynamo is disabled|TORCHDYNAMO_DISABLE"),
     "torch._dynamo, which needs compilation ({0})"),
)


def needs_compilation(off: RunVerdict) -> str | None:
    """Why the compile-off run failed for want of compilation, if its exception says so."""
    failure = off.classification.failure
    if failure is None:
        return None
    said = f"{failure.exception_type}: {failure.message or ''}"
    for pattern, why in _NEEDS_COMPILATION:
        if (m := pattern.search(said)) is not None:
            return why.format(m.group(m.lastindex or 0))
    return None


def read_compile_off(compiled: FailureSummary, off: RunVerdict) -> OffReading:
    """The exit status first: exit 0 is a pass, whatever the run printed."""
    outcome = off.result.outcome
    if outcome.exit_code == 0 and not outcome.timed_out:
        return "passes"
    failure = off.classification.failure
    if outcome.timed_out or outcome.signal_name or failure is None or not failure.exception_type:
        return "no_exception"
    if _same_failure(compiled, off):
        return "same_failure"
    return "needs_compilation" if needs_compilation(off) else "other_failure"


# What the compile-off run's reading means, by a condition on the runs (see _condition):
# (reading, condition) -> (fault, the evidence line's text after "run <id> (TORCHDYNAMO_DISABLE=1) ")
Condition = Literal["program", "torch", "compile_only", "compiled_callable", "any"]
OFF_RULES: dict[tuple[OffReading, Condition], tuple[Fault | None, str]] = {
    ("same_failure", "program"): (
        "program", "fails with the same failure, raised in the program's own code ({raised_at}): " + USER_ERROR_ADVICE),
    ("same_failure", "torch"): (
        "pytorch_outside_compiler",
        "fails with the same failure, raised inside torch ({raised_at}) without compilation: not the compiler's "
        "bug; PyTorch's outside the compiler, unless torch refuses what the program passes it (check the call)"),
    ("same_failure", "any"): ("program", "fails with the same failure: " + USER_ERROR_ADVICE),
    ("needs_compilation", "any"): (
        None, "fails another way ({signature}) because the script uses {why} and compilation is off: it cannot "
              "judge the compiled runs' failure (compiler at fault: not decided; the compiled runs' evidence "
              "decides)"),
    ("other_failure", "any"): (
        None, "fails another way ({signature}): without compilation the program goes elsewhere, so it cannot "
              "judge the compiled runs' failure (compiler at fault: not decided; the compiled runs' evidence "
              "decides)"),
    ("no_exception", "any"): (
        None, "also failed ({signature}); a crash without a Python exception does not settle whose bug it is"),
    ("passes", "compile_only"): (
        None, "passes, as it must: without compilation nothing {compile_only}, so it cannot tell a compiler bug "
              "from the compiler doing what the code asks (compiler at fault: not decided; the logged reasons "
              "decide)"),
    ("passes", "compiled_callable"): (
        "own_backend", "passes: the failure was raised in {callable}, a function of the script that only the "
                       "compiled code calls (what its backend returned): a bug of that backend, not of "
                       "PyTorch's compiler"),
    ("passes", "any"): ("compiler", "passes: the failure needs torch.compile"),
}
FAULT_AT_COMPILER: dict[Fault | None, bool | None] = {
    "compiler": True, "program": False, "own_backend": False, "pytorch_outside_compiler": False, None: None}


def _condition(reading: OffReading, failure: FailureSummary, off: RunVerdict) -> Condition:
    if reading == "same_failure" and off.raised_in in ("program", "torch"):
        return "program" if off.raised_in == "program" else "torch"
    if reading == "passes" and failure.category in COMPILE_ONLY_CATEGORIES:
        return "compile_only"
    if reading == "passes" and failure.compiled_callable:
        return "compiled_callable"
    return "any"


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
            verdict.evidence.append(f"run {logged[0].result.run_id}: {_LOG_RECORD_PREFIX.sub('', line)}")
    if compile_off is not None and not export_used:
        verdict.compile_off_reading = read_compile_off(failure, compile_off)
    if failure.own_backend:
        # torch.compile only handed the graph over: the compile-off run passes because the backend never runs
        verdict.category, verdict.compiler_at_fault, verdict.confidence = USER_ERROR, False, 0.9
        verdict.fault, verdict.own_backend = "own_backend", failure.own_backend
        verdict.advice = OWN_BACKEND_ADVICE.format(backend=failure.own_backend)
        verdict.evidence.append(f"runs {runs}: {verdict.advice}")
    elif export_used:
        verdict.evidence.append("torch.export in the script or traceback: the compile-off run cannot tell "
                                "(TORCHDYNAMO_DISABLE does not turn export off)")
    elif compile_off is not None and verdict.compile_off_reading is not None:
        _judge_compile_off(verdict, failure, compile_off, agree)
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


def _judge_compile_off(verdict: Verdict, failure: FailureSummary, off: RunVerdict, agree: list[bool]) -> None:
    """Apply OFF_RULES' row for the compile-off run's reading."""
    assert verdict.compile_off_reading is not None
    reading = verdict.compile_off_reading
    condition = _condition(reading, failure, off)
    fault, says = OFF_RULES.get((reading, condition)) or OFF_RULES[(reading, "any")]
    verdict.fault, verdict.compiler_at_fault = fault, FAULT_AT_COMPILER[fault]
    line = says.format(raised_at=off.raised_at, signature=off.signature, why=needs_compilation(off),
                       compile_only=COMPILE_ONLY_CATEGORIES.get(failure.category),
                       callable=failure.compiled_callable)
    verdict.evidence.append(f"run {off.result.run_id} (TORCHDYNAMO_DISABLE=1) {line}")
    if fault == "program":
        verdict.category, verdict.advice = USER_ERROR, USER_ERROR_ADVICE
        verdict.confidence = 0.95 if off.signature == failure.signature else 0.85
    elif fault == "own_backend":
        verdict.category, verdict.confidence, verdict.own_backend = USER_ERROR, 0.9, failure.compiled_callable
        verdict.advice = OWN_BACKEND_ADVICE.format(backend=failure.compiled_callable)
    elif reading == "no_exception":
        agree.append(False)
    elif fault == "compiler":
        agree.append(True)
        exc = failure.exception_type or ""
        mismatch = exc.endswith("AssertionError") or failure.category == "accuracy"
        # a mismatch is the program's comparison failing: an exception raised inside compiled or generated code
        # (an FX graph's torch._assert, Inductor's output code) is the compiled code's failure, never accuracy
        in_program = failure.raised_in in ("program", None)
        if mismatch and in_program and not any(name in exc for name in _COMPILER_EXCEPTIONS):
            verdict.category = "accuracy"
            verdict.confidence = max(verdict.confidence or 0, 0.9)
            verdict.evidence.append(f"run {off.result.run_id}: the assertion holds without compilation, so the "
                                    "compiled result differs from eager: accuracy")
