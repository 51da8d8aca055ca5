"""The case report: a case as a person wants to see it, as self-contained HTML or as Markdown.

`build_report` reads everything the store holds about a case (the workflow's view of the 13 steps,
every evidence record with its time, the runs, waivers, the localisation table and the
minification attempts) into plain view objects; `render_html` and `render_markdown` only lay them
out. The HTML needs nothing from the network and carries no JavaScript: inline CSS, inline SVG
charts. Everything that came from a script, a log or the user is escaped: Jinja2 autoescaping and
`html.escape` for HTML; backslash escapes, code spans and fenced blocks for Markdown.

Evidence data is read defensively: a key another tool did not record (or a case that stopped after
check_env) leaves a blank, never an exception. Where a section still cannot be built, the report
says so in that section and goes on.

Minification progress is drawn from, in order: a ``progress`` list in the reduce evidence
(``[{"t": seconds_since_start, "size": n}, ...]`` or ``{"at": epoch, ...}``), the FX minifier's
status file (its checkpoints), then the sizes before and after each attempt.
"""

from __future__ import annotations

import html
import json
import math
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pt2_bug_basher.case.pages import read_tail
from pt2_bug_basher.case.store import EvidenceRecord, RunRecord, Store
from pt2_bug_basher.domain.evidence import (
    ArtifactsEvidence,
    CelebrateEvidence,
    ClassifyEvidence,
    LocalizeRecord,
    MainCheckEvidence,
    ReduceEvidence,
    ReproduceEvidence,
    ReviewEvidence,
    TestEvidence,
    VerifyEvidence,
)

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
    total: int
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
# Small helpers


def _when(t: float | None) -> str:
    if t is None or not isinstance(t, (int, float)) or not math.isfinite(t):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _span(seconds: float | None) -> str:
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


def _rel(t: float | None, t0: float) -> str:
    if t is None or not isinstance(t, (int, float)):
        return ""
    return "+" + _span(t - t0)


def _str(value: Any, limit: int = MAX_TEXT) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str) if not isinstance(
        value, (int, float, bool)) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _attempt(record: EvidenceRecord, t0: float) -> Attempt:
    return Attempt(record.id, record.ok, _str(record.summary), record.run_id, record.created_at,
                   _rel(record.created_at, t0), _when(record.created_at))


def _command(argv: Any) -> str:
    if not isinstance(argv, list):
        return _str(argv)
    try:
        return shlex.join(str(a) for a in argv)
    except Exception:  # noqa: BLE001 - a malformed record still shows something
        return " ".join(map(str, argv))


def _run_view(run: RunRecord, t0: float) -> RunView:
    status = run.status or "?"
    duration_s = (run.ended_at - run.started_at) if run.ended_at and run.started_at else None
    if status == "running":
        kind, outcome = "running", "still running (or its server is alive)"
    elif status == "timeout":
        kind, outcome = "timeout", "killed after the timeout"
    elif status == "interrupted":
        kind, outcome = "interrupted", "interrupted: its server stopped"
    elif status == "cancelled":
        kind, outcome = "cancelled", "cancelled"
    elif run.signal:
        kind, outcome = "signal", f"killed by {run.signal}"
    elif run.exit_code == 0:
        kind, outcome = "ok", "exit 0"
    elif run.exit_code is not None:
        kind, outcome = "failed", f"exit {run.exit_code}"
    else:
        kind, outcome = "failed", status
    result = _dict(run.result)
    shown = []
    for key, value in result.items():
        if isinstance(value, (dict, list)) or value is None:
            continue
        shown.append(f"{key}={_str(value, 160)}")
    env = {str(k): _str(v, 300) for k, v in _dict(run.env).items()
           if k not in ("PYTHONUNBUFFERED", "PYTHONFAULTHANDLER")}
    return RunView(
        run_id=run.run_id, tool=run.tool, command=_command(run.argv), cwd=_str(run.cwd), env=env, status=status,
        kind=kind, outcome=outcome, duration=_span(duration_s) if duration_s is not None else "",
        duration_s=duration_s, started_at=run.started_at, when=_when(run.started_at), rel=_rel(run.started_at, t0),
        result=", ".join(shown)[:MAX_TEXT], stdout_uri=f"case://{run.case_id}/runs/{run.run_id}/stdout",
        stderr_uri=f"case://{run.case_id}/runs/{run.run_id}/stderr",
    )


# --------------------------------------------------------------------------------------------
# Building the report


def _safe_tree_hash(repo: str, notes: list[str]) -> Callable[[], str]:
    def compute() -> str:
        try:
            from pt2_bug_basher.execution.gitstate import tree_hash

            return tree_hash(Path(repo))
        except Exception as exc:  # noqa: BLE001 - a missing repository must not stop the report
            notes.append(f"the repository {repo} could not be read ({exc}); steps tied to the current code "
                         "show as stale")
            return "unreadable"

    return compute


def build_report(store: Store, case_id: str, tree_hash: Callable[[], str] | None = None) -> CaseReport:
    """Everything the store holds about a case. Raises NotFound for an unknown case."""
    from pt2_bug_basher.case.workflow import Workflow

    case = store.get_case(case_id)
    notes: list[str] = []
    flow = Workflow(store, case_id, tree_hash or _safe_tree_hash(case.repo, notes))
    status = flow.status()
    evidence = store.evidence(case_id)
    runs = store.runs(case_id)
    waivers = store.waivers(case_id)
    t0 = case.created_at
    by_step: dict[str, list[EvidenceRecord]] = {}
    for record in evidence:
        by_step.setdefault(record.step, []).append(record)

    steps = []
    for s in status.steps:
        records = by_step.get(s.step.value, [])
        shown = next((r for r in reversed(records) if r.run_id == s.run_id and s.evidence and
                      r.summary and r.summary in s.evidence), records[-1] if records else None)
        at = shown.created_at if shown else None
        if s.status == "waived":
            waiver = next((w for w in reversed(waivers) if w.step == s.step.value), None)
            at = waiver.created_at if waiver else at
        steps.append(StepView(
            number=s.number, step=s.step.value, title=s.title, status=s.status, evidence=_str(s.evidence) or None,
            run_id=s.run_id, tool_call=s.tool_call, at=at, when=_when(at), rel=_rel(at, t0),
            attempts=[_attempt(r, t0) for r in records],
        ))

    env = _dict(case.env)
    torch_info = _dict(env.get("torch"))
    torch = _str(torch_info.get("version")) or "?"
    if torch_info.get("git_version"):
        torch += f" (git {_str(torch_info.get('git_version'), 40)})"

    run_views = [_run_view(r, t0) for r in runs]
    hidden = max(0, len(run_views) - MAX_RUNS_SHOWN)
    report = CaseReport(
        case_id=case.case_id, repo=case.repo, python=case.python, torch=torch, created=_when(case.created_at),
        generated=_when(time.time()), complete=sum(s.status in ("done", "waived") for s in steps),
        total=len(steps), stopped=status.stopped, next_step=status.next_step, steps=steps,
        runs=run_views[-MAX_RUNS_SHOWN:] if hidden else run_views, runs_hidden=hidden, classification=None,
        localization=None, minify=[], tests=TestsView(None, None, None, None, []), artifacts=[],
        waivers=[WaiverView(w.step, _str(w.reason), _when(w.created_at)) for w in waivers], summary=None,
        notes=notes,
    )
    sections: list[tuple[str, Callable[[], None]]] = [
        ("classification", lambda: setattr(report, "classification", _classification(store, by_step, runs, t0))),
        ("localisation", lambda: setattr(report, "localization", _localization(store, case_id, runs))),
        ("minification", lambda: setattr(report, "minify", _minify(by_step, runs))),
        ("tests", lambda: setattr(report, "tests", _tests(by_step, t0))),
        ("artifacts", lambda: setattr(report, "artifacts", _artifacts(by_step))),
        ("summary", lambda: setattr(report, "summary", _summary(by_step))),
        ("timeline", lambda: setattr(report, "timeline", timeline_svg(report, evidence, runs, waivers, t0))),
    ]
    for name, build in sections:
        try:
            build()
        except Exception as exc:  # noqa: BLE001 - one odd record must not hide the rest of the case
            report.notes.append(f"the {name} section could not be built: {type(exc).__name__}: {exc}")
    return report


def _classification(store: Store, by_step: dict[str, list[EvidenceRecord]], runs: list[RunRecord],
                    t0: float) -> ClassificationView | None:
    records = by_step.get("classify", [])
    repro = [r for r in by_step.get("reproduce", []) if r.ok]
    if not records and not repro:
        return None
    record = records[-1] if records else None
    classified = record.payload(ClassifyEvidence) if record else None
    reproduced = repro[-1].payload(ReproduceEvidence) if repro else None
    summary_word = (_str(record.summary).split() or [""])[0] if record else ""
    category = _str(classified.category if classified else reproduced.category if reproduced else None, 60)
    category = category or summary_word or "unknown"
    secondary = [_str(s, 60) for s in (classified.secondary if classified else [])]
    run_id = (record.run_id if record else None) or (repro[-1].run_id if repro else None)
    source = "classify_error" if record else "the reproduction (classify_error not called yet)"
    lines = [EvidenceLineView(item.line_no, _str(item.text, 500), _str(item.rule, 80))
             for item in (classified.evidence if classified else [])[:12]]
    if not lines and run_id:
        run = next((r for r in runs if r.run_id == run_id), None)
        text = read_tail(run.stderr_path, STDERR_READ) if run else None
        if text is not None:
            from pt2_bug_basher.analysis.classify import classify

            found = classify(text, exit_code=run.exit_code, signal_name=run.signal)  # type: ignore[union-attr]
            lines = [EvidenceLineView(e.line_no, _str(e.text, 500), e.rule) for e in found.evidence[:12]]
            if lines:
                source += f"; evidence lines from the stderr of {run_id}"
    return ClassificationView(
        category=category, secondary=secondary, summary=_str(record.summary if record else repro[-1].summary),
        ok=record.ok if record else True, run_id=run_id, when=_when((record or repro[-1]).created_at),
        lines=lines, source=source, history=[_attempt(r, t0) for r in records],
    )


def _localization(store: Store, case_id: str, runs: list[RunRecord]) -> LocalizationView | None:
    from pt2_bug_basher.reduce.ladder import localized

    recorded = localized(store, case_id)
    ladder = [r for r in runs if r.tool == "localize"]
    if recorded is None and not ladder:
        return None
    rows: list[LadderRowView] = []
    if recorded is not None and recorded.table:
        source = "the table localize recorded"
        for row in recorded.table:
            rows.append(LadderRowView(_str(row.backend, 60), _str(row.dynamic, 20) or "script",
                                      _str(row.outcome, 60), _str(row.run_id, 80),
                                      _span(_num(row.seconds)), _str(row.failure, 300)))
    else:
        # Cases localised before the table was recorded: rows from the ladder's runs.
        source = "the localize runs"
        for run in ladder:
            argv = [str(a) for a in run.argv] if isinstance(run.argv, list) else []

            def after(flag: str, default: str, argv: list[str] = argv) -> str:
                return argv[argv.index(flag) + 1] if flag in argv[:-1] else default

            view = _run_view(run, run.started_at)
            result = _dict(run.result)
            rows.append(LadderRowView(after("--backend", "?"), after("--dynamic", "script").capitalize()
                                      if "--dynamic" in argv else "script",
                                      _str(result.get("outcome"), 60) or view.outcome, run.run_id, view.duration,
                                      _str(result.get("failure"), 300)))
    recorded = recorded or LocalizeRecord()
    return LocalizationView(_str(recorded.first_failing) or None, _str(recorded.layer) or None,
                            _str(recorded.signature, 500) or None, rows, source)


def _size(value: Any, unit: str) -> int | None:
    return _int(_dict(value).get(unit))


def _status_points(run: RunRecord) -> list[tuple[float, float]]:
    argv = [str(a) for a in run.argv] if isinstance(run.argv, list) else []
    if "--status" not in argv[:-1]:
        return []
    path = Path(argv[argv.index("--status") + 1])
    points = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("kind") == "checkpoint":
            t, nodes = _num(event.get("t")), _num(event.get("nodes"))
            if t is not None and nodes is not None:
                points.append((t, nodes))
    return points


def _minify(by_step: dict[str, list[EvidenceRecord]], runs: list[RunRecord]) -> list[MinifyAttempt]:
    attempts = []
    previous = 0.0
    minify_runs = sorted((r for r in runs if r.tool == "minify"), key=lambda r: r.started_at)
    for record in by_step.get("reduce", []):
        data = record.payload(ReduceEvidence)
        after, before = data.after, data.before
        unit = next((u for u in ("nodes", "lines", "statements", "bytes") if u in after or u in before), "lines")
        window = [r for r in minify_runs if previous < r.started_at <= record.created_at]
        start = window[0].started_at if window else record.created_at
        points: list[tuple[float, float]] = []
        b, a = _size(before, unit), _size(after, unit)
        if b is not None:
            points.append((0.0, float(b)))
        for item in _list((data.model_extra or {}).get("progress")):
            item = _dict(item)
            size = _num(item.get("size", item.get(unit)))
            t = _num(item.get("t"))
            if t is None and _num(item.get("at")) is not None:
                t = float(item["at"]) - start
            if size is not None and t is not None:
                points.append((max(0.0, t), size))
        if unit == "nodes":
            for run in window:
                points += [(run.started_at - start + t, n) for t, n in _status_points(run)]
        if a is not None:
            points.append((max(record.created_at - start, points[-1][0] if points else 0.0), float(a)))
        points.sort(key=lambda p: p[0])
        name = Path(data.minimized_path).name if data.minimized_path else ""
        attempts.append(MinifyAttempt(
            mode=_str(data.mode, 20) or "?", ok=record.ok, summary=_str(record.summary), unit=unit,
            before=b, after=a, path=name, comparison=_str(data.comparison, 40),
            budget_exhausted=data.budget_exhausted, when=_when(record.created_at), points=points,
        ))
        previous = record.created_at
    for attempt in attempts[-MAX_CHARTS:]:
        if len(attempt.points) >= 2:
            attempt.chart = size_chart_svg(attempt.points, attempt.unit, f"{attempt.mode} reduction ({attempt.when})")
    return attempts


def _tests(by_step: dict[str, list[EvidenceRecord]], t0: float) -> TestsView:
    view = TestsView(None, None, None, None, [])
    history = by_step.get("test", []) + by_step.get("main_check", []) + by_step.get("verify", [])
    view.history = [_attempt(r, t0) for r in sorted(history, key=lambda r: r.id)]
    test = next((r for r in reversed(by_step.get("test", [])) if r.ok), None) or (
        by_step["test"][-1] if by_step.get("test") else None)
    if test is not None:
        t = test.payload(TestEvidence)
        view.registered = {
            "test": _str(t.node_id) or f"{_str(t.test_file)}::{_str(t.test_name)}",
            "state": "fails on the branch (registered)" if test.ok else _str(t.outcome) or "not registered",
            "failure": " ".join(filter(None, [_str(t.exception_type, 200),
                                              f"({_str(t.category, 60)})" if t.category else ""])),
            "message": _str(t.message, 600), "when": _when(test.created_at), "ok": "yes" if test.ok else "",
        }
    main = by_step.get("main_check", [])
    if main:
        m = main[-1].payload(MainCheckEvidence)
        outcome = _str(m.outcome, 40)
        view.on_main = {
            "ref": _str(m.ref, 200) or "main", "commit": _str(m.commit, 12),
            "outcome": outcome or ("failed" if main[-1].ok else "?"),
            "meaning": "fails on main too: the bug is real there" if main[-1].ok else
            "passes on main: the case stopped" if outcome == "passed" else "not confirmed",
            "failure": _str(m.exception_type, 200), "message": _str(m.message, 600),
            "when": _when(main[-1].created_at), "ok": "yes" if main[-1].ok else "",
        }
    verify = by_step.get("verify", [])
    if verify:
        v = verify[-1].payload(VerifyEvidence)
        view.verify = {
            "ok": verify[-1].ok, "summary": _str(verify[-1].summary), "when": _when(verify[-1].created_at),
            "registered": _str(v.registered, 300), "registered_outcome": _str(v.registered_outcome, 40),
            "counts": dict(v.counts), "problems": [_str(p, 300) for p in v.problems],
            "tests": [TestLine(_str(t.node_id, 300), _str(t.outcome, 40)) for t in v.tests[:200] if t.node_id],
        }
    review = by_step.get("review", [])
    if review:
        r = review[-1].payload(ReviewEvidence)
        view.review = {
            "ok": review[-1].ok, "summary": _str(review[-1].summary), "when": _when(review[-1].created_at),
            "files": [{"path": _str(f.path, 300), "added": f.added, "removed": f.removed} for f in r.files[:100]],
            "findings": [{"severity": _str(f.severity, 20), "text": _str(f.text, 400)} for f in r.findings[:50]],
        }
    return view


def _artifacts(by_step: dict[str, list[EvidenceRecord]]) -> list[dict[str, str]]:
    out = []
    for record in by_step.get("artifacts", []):
        d = record.payload(ArtifactsEvidence)
        out.append({"summary": _str(record.summary), "ok": "yes" if record.ok else "", "when": _when(record.created_at),
                    "index": _str(d.index, 500), "run_id": _str(record.run_id or d.run_id, 80),
                    "failure_graph": _str(d.failure_graph, 200),
                    "failure_kernel": _str(d.failure_kernel, 200)})
    return out


def _summary(by_step: dict[str, list[EvidenceRecord]]) -> dict[str, str] | None:
    records = by_step.get("celebrate", [])
    if not records:
        return None
    d = records[-1].payload(CelebrateEvidence)
    return {"root_cause": _str(d.root_cause, 8000), "fix_summary": _str(d.fix_summary, 8000),
            "celebration": _str(d.celebration, 2000), "when": _when(records[-1].created_at)}


# --------------------------------------------------------------------------------------------
# Inline SVG (everything interpolated is escaped here; the result is trusted markup)

_e = html.escape
STATUS_COLOURS = {"done": "#1a7f37", "waived": "#9a6700", "stale": "#6e7781", "failed": "#cf222e",
                  "stopped": "#82071e", "pending": "#d0d7de", "agent": "#8250df"}
RUN_COLOURS = {"ok": "#1a7f37", "failed": "#cf222e", "signal": "#82071e", "timeout": "#bc4c00",
               "interrupted": "#6e7781", "cancelled": "#6e7781", "running": "#0969da"}


def _nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    ticks: list[float] = []
    value = first
    while value <= hi + 1e-9 and len(ticks) < 12:
        ticks.append(value)
        value += step
    return ticks


def size_chart_svg(points: list[tuple[float, float]], unit: str, title: str, width: int = 560,
                   height: int = 200) -> str:
    """A step chart of the repro's size over time."""
    left, right, top, bottom = 56, 16, 26, 34
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_hi = max(max(xs), 1.0)
    y_hi = max(max(ys), 1.0)
    plot_w, plot_h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + plot_w * x / x_hi

    def sy(y: float) -> float:
        return top + plot_h * (1 - y / y_hi)

    path = []
    for i, (x, y) in enumerate(points):
        if i == 0:
            path.append(f"M{sx(x):.1f},{sy(y):.1f}")
        else:
            path.append(f"H{sx(x):.1f}V{sy(y):.1f}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">',
             f'<title>{_e(title)}</title>',
             f'<text x="{left}" y="16" class="chart-title">{_e(unit)} over time</text>']
    for tick in _nice_ticks(0, y_hi):
        y = sy(tick)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{tick:g}</text>')
    for tick in _nice_ticks(0, x_hi):
        x = sx(tick)
        parts.append(f'<text x="{x:.1f}" y="{height - bottom + 16}" class="tick" text-anchor="middle">'
                     f'{_e(_span(tick))}</text>')
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}" class="axis"/>'
                 f'<line x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}" class="axis"/>')
    parts.append(f'<path d="{" ".join(path)}" class="series"/>')
    for x, y in points:
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" class="point">'
                     f'<title>{_e(_span(x))}: {y:g} {_e(unit)}</title></circle>')
    parts.append(f'<text x="{width - right}" y="{height - 4}" class="tick" text-anchor="end">time since the '
                 f'reduction started</text></svg>')
    return "".join(parts)


def timeline_svg(report: CaseReport, evidence: list[EvidenceRecord], runs: list[RunRecord], waivers: list[Any],
                 t0: float, width: int = 1100) -> str:
    """Lanes: the runs (bars from start to end), then one per step with its evidence (dots) and waivers."""
    times = [t0] + [r.created_at for r in evidence] + [w.created_at for w in waivers]
    times += [r.started_at for r in runs] + [r.ended_at for r in runs if r.ended_at]
    t_end = max(t for t in times if isinstance(t, (int, float)))
    span = max(t_end - t0, 1.0)
    left, right, lane, top = 250, 20, 22, 10
    lanes = ["runs"] + [s.step for s in report.steps]
    titles = {"runs": "runs"} | {s.step: f"{s.number}. {s.title}" for s in report.steps}
    height = top + lane * len(lanes) + 30
    plot_w = width - left - right

    def sx(t: float) -> float:
        return left + plot_w * max(0.0, t - t0) / span

    def ly(name: str) -> float:
        return top + lane * lanes.index(name) + lane / 2

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of the case">',
             '<title>Timeline of the case: runs and evidence per step</title>']
    for i, name in enumerate(lanes):
        y = ly(name)
        if i % 2 == 0:
            parts.append(f'<rect x="0" y="{y - lane / 2:.1f}" width="{width}" height="{lane}" class="lane"/>')
        status = next((s.status for s in report.steps if s.step == name), "")
        label = titles.get(name, name)
        label = label if len(label) <= 38 else label[:37] + "…"
        parts.append(f'<text x="8" y="{y + 4:.1f}" class="lane-label status-{_e(status)}">{_e(label)}</text>')
    for tick in _nice_ticks(0, span, 6):
        x = sx(t0 + tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{height - 26}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{height - 10}" class="tick" text-anchor="middle">+{_e(_span(tick))}</text>')
    y = ly("runs")
    for run in runs:
        x1 = sx(run.started_at)
        x2 = sx(run.ended_at) if run.ended_at else sx(t_end)
        kind = _run_view(run, t0).kind
        parts.append(f'<rect x="{x1:.1f}" y="{y - 6:.1f}" width="{max(2.0, x2 - x1):.1f}" height="12" rx="2" '
                     f'fill="{RUN_COLOURS.get(kind, "#6e7781")}" opacity="0.75"><title>{_e(run.run_id)} '
                     f'({_e(run.tool)}): {_e(_run_view(run, t0).outcome)}</title></rect>')
    for record in evidence:
        if record.step not in lanes:
            continue
        colour = "#1a7f37" if record.ok else "#cf222e"
        parts.append(f'<circle cx="{sx(record.created_at):.1f}" cy="{ly(record.step):.1f}" r="5" fill="{colour}" '
                     f'class="event"><title>{_e(_rel(record.created_at, t0))} {"ok" if record.ok else "failed"}: '
                     f'{_e(_str(record.summary, 300))}</title></circle>')
    for waiver in waivers:
        if waiver.step not in lanes:
            continue
        x, wy = sx(waiver.created_at), ly(waiver.step)
        parts.append(f'<path d="M{x:.1f},{wy - 6:.1f}L{x + 6:.1f},{wy:.1f}L{x:.1f},{wy + 6:.1f}L{x - 6:.1f},{wy:.1f}Z" '
                     f'fill="#9a6700" class="event"><title>waived: {_e(_str(waiver.reason, 300))}</title></path>')
    parts.append("</svg>")
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# HTML


def render_html(report: CaseReport) -> str:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
    from markupsafe import Markup

    env = Environment(
        loader=FileSystemLoader(str(Path(__file__).parent / "templates")),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    template = env.get_template("report.html.j2")
    return template.render(
        r=report, timeline=Markup(report.timeline),  # noqa: S704 - built above with every value escaped
        charts=[Markup(m.chart) for m in report.minify],  # noqa: S704
        status_colours=STATUS_COLOURS,
    )


# --------------------------------------------------------------------------------------------
# Markdown

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def md_text(value: Any, limit: int = MAX_TEXT) -> str:
    """Untrusted text as inline Markdown: one line, every punctuation that means something escaped."""
    text = " ".join(_str(value, limit).split())
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(value: Any, limit: int = 300) -> str:
    """Untrusted text as an inline code span (HTML is not interpreted in code spans); table-safe."""
    text = " ".join(_str(value, limit).split()).replace("|", "¦")
    if not text:
        return ""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_block(text: str, limit: int = 6000) -> list[str]:
    text = _str(text, limit)
    longest = max((len(m) for m in re.findall(r"~+", text)), default=0)
    fence = "~" * max(3, longest + 1)
    return [fence + "text", *text.splitlines(), fence]


def render_markdown(report: CaseReport) -> str:
    r = report
    out = [f"# Case report: {md_code(r.case_id)}", ""]
    out += [f"- **Repository**: {md_code(r.repo, 500)}", f"- **Python**: {md_code(r.python, 500)}",
            f"- **torch**: {md_text(r.torch)}", f"- **Opened**: {r.created}",
            f"- **Progress**: {r.complete} of {r.total} steps complete",
            f"- **Next step**: {md_text(r.next_step)}"]
    if r.stopped:
        out += ["", f"> **Stopped**: {md_text(r.stopped)}"]
    for note in r.notes:
        out += ["", f"> Note: {md_text(note)}"]

    out += ["", "## Steps", "", "| # | Step | Status | When | Evidence |", "|---:|---|---|---|---|"]
    for s in r.steps:
        evidence = md_text(s.evidence, 400) if s.evidence else ""
        if s.run_id:
            evidence += f" (run {md_code(s.run_id)})"
        if len(s.attempts) > 1:
            evidence += f" — {len(s.attempts)} attempts"
        out.append(f"| {s.number} | {md_text(s.title)} | {s.icon} {s.label} | {md_text(s.rel)} | {evidence} |")

    out += ["", "## Runs", ""]
    if not r.runs:
        out.append("No runs yet.")
    else:
        if r.runs_hidden:
            out += [f"The first {r.runs_hidden} runs are not shown.", ""]
        out += ["| Run | Tool | Outcome | Duration | Started | Command |", "|---|---|---|---:|---|---|"]
        for run in r.runs:
            outcome = md_text(run.outcome) + (f" ({md_text(run.result, 200)})" if run.result else "")
            out.append(f"| {md_code(run.run_id)} | {md_text(run.tool)} | {outcome} | {md_text(run.duration)} | "
                       f"{md_text(run.rel)} | {md_code(run.command, 300)} |")

    out += ["", "## Classification", ""]
    c = r.classification
    if c is None:
        out.append("Not classified yet.")
    else:
        extra = f", also {', '.join(md_text(s) for s in c.secondary)}" if c.secondary else ""
        out.append(f"**{md_text(c.category)}**{extra} — {md_text(c.summary)} (from {md_text(c.source)})")
        if c.lines:
            out += ["", "Evidence lines:", ""]
            out += md_block("\n".join(f"{ln.line_no if ln.line_no is not None else '?':>5}: {ln.text}"
                                      + (f"   [{ln.rule}]" if ln.rule else "") for ln in c.lines))

    if r.localization is not None:
        loc = r.localization
        out += ["", "## Localisation", "",
                f"First failing backend: {md_code(loc.first_failing or 'none')}; layer: "
                f"{md_text(loc.layer or 'unknown')} (from {md_text(loc.source)})", ""]
        if loc.rows:
            out += ["| Backend | dynamic | Outcome | Time | Run |", "|---|---|---|---:|---|"]
            out += [f"| {md_code(row.backend)} | {md_text(row.dynamic)} | {md_text(row.outcome)} | "
                    f"{md_text(row.seconds)} | {md_code(row.run_id)} |" for row in loc.rows]

    out += ["", "## Minification", ""]
    if not r.minify:
        out.append("No reduction recorded.")
    for m in r.minify:
        sizes = " → ".join(f"{y:g}" for _, y in m.points) if m.points else "?"
        state = "confirmed" if m.ok else "not confirmed"
        out.append(f"- {md_text(m.mode)} ({md_text(m.when)}): {sizes} {md_text(m.unit)}, {state}"
                   + (f", {md_code(m.path)}" if m.path else "") + (", budget ran out" if m.budget_exhausted else ""))

    out += ["", "## Tests", ""]
    tests = r.tests
    if tests.registered is None and tests.on_main is None and tests.verify is None:
        out.append("No test registered yet.")
    if tests.registered is not None:
        out.append(f"- Registered test {md_code(tests.registered['test'], 400)}: {md_text(tests.registered['state'])}"
                   + (f" — {md_text(tests.registered['failure'])}" if tests.registered["failure"] else ""))
    if tests.on_main is not None:
        on_main = tests.on_main
        out.append(f"- On {md_code(on_main['ref'])} ({md_code(on_main['commit']) or '?'}): "
                   f"{md_text(on_main['outcome'])} — {md_text(on_main['meaning'])}")
    if tests.verify is not None:
        v = tests.verify
        out.append(f"- Verification ({'passed' if v['ok'] else 'not passed'}): {md_text(v['summary'])}")
        out += [f"  - {md_code(line.node_id, 400)}: {md_text(line.outcome)}" for line in v["tests"][:30]]
        out += [f"  - problem: {md_text(p)}" for p in v["problems"]]
    if tests.review is not None:
        verdict = "clean" if tests.review["ok"] else "blocking findings"
        out.append(f"- Review ({verdict}): {md_text(tests.review['summary'])}")

    if r.artifacts:
        out += ["", "## Debug artifacts", ""]
        out += [f"- {md_text(a['summary'])}" + (f" — index {md_code(a['index'], 400)}" if a["index"] else "")
                for a in r.artifacts]

    out += ["", "## Waivers", ""]
    out += [f"- **{md_text(w.step)}** ({md_text(w.when)}): {md_text(w.reason)}" for w in r.waivers] or ["None."]

    out += ["", "## Summary", ""]
    if r.summary is None:
        out.append("Not celebrated yet.")
    else:
        out += ["**Root cause**: " + md_text(r.summary["root_cause"], 8000), "",
                "**Fix**: " + md_text(r.summary["fix_summary"], 8000)]
        if r.summary["celebration"]:
            out += [""] + md_block(r.summary["celebration"])
    out += ["", f"_Generated {r.generated} by pt2-bug-basher._", ""]
    return "\n".join(out)


def case_report_markdown(store: Store, case_id: str) -> str:
    return render_markdown(build_report(store, case_id))


def case_report_html(store: Store, case_id: str) -> str:
    return render_html(build_report(store, case_id))
