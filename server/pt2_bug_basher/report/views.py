"""The case report's view objects: plain data that the HTML and Markdown renderers lay out."""

from __future__ import annotations

import json
import math
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from pt2_bug_basher.case.store import RunRecord

STATUS_LABELS = {
    "done": "done", "waived": "waived", "stale": "stale", "failed": "failed", "stopped": "stopped",
    "pending": "pending", "agent": "agent's work",
}
STATUS_ICONS = {"done": "✔", "waived": "⤼", "stale": "≈", "failed": "✘", "stopped": "■", "pending": "·",
                "agent": "✎"}
MAX_RUNS_SHOWN = 200
MAX_TEXT = 2000
MAX_CHARTS = 4
STDERR_READ = 4 * 1024 * 1024


# --------------------------------------------------------------------------------------------
# View objects


@dataclass
class Attempt:
    id: int
    ok: bool
    summary: str
    run_id: str | None
    at: float
    rel: str
    when: str


@dataclass
class StepView:
    number: int
    step: str
    title: str
    status: str
    evidence: str | None
    run_id: str | None
    tool_call: str
    at: float | None
    when: str
    rel: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def label(self) -> str:
        return STATUS_LABELS.get(self.status, self.status)

    @property
    def icon(self) -> str:
        return STATUS_ICONS.get(self.status, "?")


@dataclass
class RunView:
    run_id: str
    tool: str
    command: str
    cwd: str
    env: dict[str, str]
    status: str
    kind: str
    """ok, failed, signal, timeout, interrupted, cancelled, running"""
    outcome: str
    duration: str
    duration_s: float | None
    started_at: float
    when: str
    rel: str
    result: str
    stdout_uri: str
    stderr_uri: str


@dataclass
class EvidenceLineView:
    line_no: int | None
    text: str
    rule: str


@dataclass
class ClassificationView:
    category: str
    secondary: list[str]
    summary: str
    ok: bool
    run_id: str | None
    when: str
    lines: list[EvidenceLineView]
    source: str
    history: list[Attempt]


@dataclass
class LadderRowView:
    backend: str
    dynamic: str
    outcome: str
    run_id: str
    seconds: str
    failure: str


@dataclass
class LocalizationView:
    first_failing: str | None
    layer: str | None
    signature: str | None
    rows: list[LadderRowView]
    source: str


@dataclass
class MinifyAttempt:
    mode: str
    ok: bool
    summary: str
    unit: str
    before: int | None
    after: int | None
    path: str
    comparison: str
    budget_exhausted: bool
    when: str
    points: list[tuple[float, float]]
    """(seconds since the attempt started, size)"""
    chart: str = ""
    """inline SVG (already escaped)"""


@dataclass
class TestLine:
    node_id: str
    outcome: str


@dataclass
class TestsView:
    registered: dict[str, str] | None
    on_main: dict[str, str] | None
    verify: dict[str, Any] | None
    review: dict[str, Any] | None
    history: list[Attempt]


@dataclass
class WaiverView:
    step: str
    reason: str
    when: str


@dataclass
class CaseReport:
    case_id: str
    repo: str
    python: str
    torch: str
    created: str
    generated: str
    complete: int
    total: int  # the steps the server checks; the agent's own (root cause, fix) are named in agent_steps
    agent_steps: str
    stopped: str | None
    next_step: str
    steps: list[StepView]
    runs: list[RunView]
    runs_hidden: int
    classification: ClassificationView | None
    localization: LocalizationView | None
    minify: list[MinifyAttempt]
    tests: TestsView
    artifacts: list[dict[str, str]]
    waivers: list[WaiverView]
    summary: dict[str, str] | None
    timeline: str = ""
    """inline SVG (already escaped)"""
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Values read defensively from the store


def when_text(t: float | None) -> str:
    if t is None or not isinstance(t, (int, float)) or not math.isfinite(t):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def span_text(seconds: float | None) -> str:
    if seconds is None or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return ""
    seconds = max(0.0, float(seconds))
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def relative_text(t: float | None, t0: float) -> str:
    if t is None or not isinstance(t, (int, float)):
        return ""
    return "+" + span_text(t - t0)


def clip(value: Any, limit: int = MAX_TEXT) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str) if not isinstance(
        value, (int, float, bool)) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return None


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def command_text(argv: Any) -> str:
    if not isinstance(argv, list):
        return clip(argv)
    try:
        return shlex.join(str(a) for a in argv)
    except Exception:  # noqa: BLE001 - a malformed record still shows something
        return " ".join(map(str, argv))


def run_view(run: RunRecord, t0: float) -> RunView:
    status = run.status or "?"
    duration_s = (run.ended_at - run.started_at) if run.ended_at and run.started_at else None
    if status == "running":
        kind, outcome = "running", "still running (or its server is alive)"
    elif status == "timeout":
        kind, outcome = "timeout", "killed after the timeout"
    elif status == "interrupted":
        kind, outcome = "interrupted", "interrupted: its server stopped"
    elif status == "cancelled" and run.tool == "localize":
        kind, outcome = "cancelled", ("stopped by localize: a backend below it already failed the case's way (or "
                                      "the localize call was cancelled)")
    elif status == "cancelled":
        kind, outcome = "cancelled", "cancelled with its call"
    elif status == "stopped":
        kind, outcome = "stopped", "warm interpreter that forked the runs; stopped by the server"
    elif run.signal:
        kind, outcome = "signal", f"killed by {run.signal}"
    elif run.exit_code == 0:
        kind, outcome = "ok", "exit 0"
    elif run.exit_code is not None:
        kind, outcome = "failed", f"exit {run.exit_code}"
    else:
        kind, outcome = "failed", status
    result = as_dict(run.result)
    shown = []
    for key, value in result.items():
        if isinstance(value, (dict, list)) or value is None:
            continue
        shown.append(f"{key}={clip(value, 160)}")
    env = {str(k): clip(v, 300) for k, v in as_dict(run.env).items()
           if k not in ("PYTHONUNBUFFERED", "PYTHONFAULTHANDLER")}
    return RunView(
        run_id=run.run_id, tool=run.tool, command=command_text(run.argv), cwd=clip(run.cwd), env=env, status=status,
        kind=kind, outcome=outcome, duration=span_text(duration_s) if duration_s is not None else "",
        duration_s=duration_s, started_at=run.started_at, when=when_text(run.started_at),
        rel=relative_text(run.started_at, t0),
        result=", ".join(shown)[:MAX_TEXT], stdout_uri=f"case://{run.case_id}/runs/{run.run_id}/stdout",
        stderr_uri=f"case://{run.case_id}/runs/{run.run_id}/stderr",
    )
