"""What one run showed: failed or not, its signature and category, its parsed logs.

Shared by run_with_logs and the reducers, so a run counts as the same failure everywhere. Pure:
the only I/O is reading the run's own logs.
"""

from __future__ import annotations

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


def is_noise_line(line: str) -> bool:
    """Dynamo's closing hints and similar boilerplate that bury the real error."""
    stripped = line.strip()
    return stripped.startswith(_NOISE_PREFIXES) or set(stripped) <= {"-", "=", "^", "~", " "}


def tail_lines(text: str) -> list[str]:
    """The last lines that matter: Dynamo's closing hints are dropped, the error is kept."""
    kept: list[str] = []
    for line in reversed(text.splitlines()):
        if not line.strip() or is_noise_line(line):
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


def run_uri(case_id: str, run_id: str, stream: str) -> str:
    return f"case://{case_id}/runs/{run_id}/{stream}"


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
                self.signature = soft_signature(self.logs)
                if self.classification.category not in SOFT_FAILURES:
                    self.classification = self.classification.model_copy(update={"category": "graph_break"})
            elif self.classification.category == "accuracy":
                self.failed = True
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
        )
