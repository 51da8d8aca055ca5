"""What a finished process left: its outcome, and the read-only view of a recorded run that analysis judges.

Plain data: execution makes these (execution.runner, execution.runs); analysis reads them without importing
the code that runs processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass
class ProcessOutcome:
    argv: list[str]
    exit_code: int | None
    signal_name: str | None
    timed_out: bool
    cancelled: bool
    duration_s: float
    pid: int
    stdout_path: Path | None = None
    stderr_path: Path | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_cut: int = 0
    stderr_cut: int = 0
    killed_pids: list[int] = field(default_factory=list)
    log_errors: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.cancelled:
            return "cancelled"
        if self.timed_out:
            return "timeout"
        return "finished"

    def describe_exit(self) -> str:
        if self.timed_out:
            return f"killed after the timeout ({self.duration_s:.1f}s)"
        if self.cancelled:
            return "cancelled; the process group was killed"
        if self.signal_name:
            return f"killed by {self.signal_name}"
        return f"exit code {self.exit_code}"


class RunOutput(Protocol):
    """A recorded run as analysis reads it (execution.runs.RunResult is one)."""

    run_id: str
    outcome: ProcessOutcome
    env_add: dict[str, str]
    forked_from: str | None

    def stderr_text(self, limit: int = ...) -> str: ...

    def stdout_text(self, limit: int = ...) -> str: ...
