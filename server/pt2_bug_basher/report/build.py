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

import json
import time
from collections.abc import Callable
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
from pt2_bug_basher.domain.names import CLOSED
from pt2_bug_basher.report.svg import size_chart_svg, timeline_svg
from pt2_bug_basher.report.views import (
    MAX_CHARTS,
    MAX_RUNS_SHOWN,
    STDERR_READ,
    Attempt,
    CaseReport,
    ClassificationView,
    EvidenceLineView,
    LadderRowView,
    LocalizationView,
    MinifyAttempt,
    StepView,
    TestLine,
    TestsView,
    WaiverView,
    as_dict,
    as_int,
    as_list,
    as_number,
    clip,
    relative_text,
    run_view,
    span_text,
    when_text,
)

# --------------------------------------------------------------------------------------------
# Small helpers


def _attempt(record: EvidenceRecord, t0: float) -> Attempt:
    return Attempt(record.id, record.ok, clip(record.summary), record.run_id, record.created_at,
                   relative_text(record.created_at, t0), when_text(record.created_at))


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
            number=s.number, step=s.step.value, title=s.title, status=s.status, evidence=clip(s.evidence) or None,
            run_id=s.run_id, tool_call=s.tool_call, at=at, when=when_text(at), rel=relative_text(at, t0),
            attempts=[_attempt(r, t0) for r in records],
        ))

    env = as_dict(case.env)
    torch_info = as_dict(env.get("torch"))
    torch = clip(torch_info.get("version")) or "?"
    if torch_info.get("git_version"):
        torch += f" (built from git {clip(torch_info.get('git_version'), 40)})"

    run_views = [run_view(r, t0) for r in runs]
    hidden = max(0, len(run_views) - MAX_RUNS_SHOWN)
    report = CaseReport(
        case_id=case.case_id, repo=case.repo, python=case.python, torch=torch, created=when_text(case.created_at),
        generated=when_text(time.time()), complete=sum(s.status in CLOSED for s in steps),
        total=sum(s.status != "agent" for s in steps),
        agent_steps=" and ".join(f"{s.number} ({s.title.lower()})" for s in steps if s.status == "agent"),
        stopped=status.stopped, next_step=status.next_step, steps=steps,
        runs=run_views[-MAX_RUNS_SHOWN:] if hidden else run_views, runs_hidden=hidden, classification=None,
        localization=None, minify=[], tests=TestsView(None, None, None, None, []), artifacts=[],
        waivers=[WaiverView(w.step, clip(w.reason), when_text(w.created_at)) for w in waivers], summary=None,
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
    summary_word = (clip(record.summary).split() or [""])[0] if record else ""
    category = clip(classified.category if classified else reproduced.category if reproduced else None, 60)
    category = category or summary_word or "unknown"
    secondary = [clip(s, 60) for s in (classified.secondary if classified else [])]
    run_id = (record.run_id if record else None) or (repro[-1].run_id if repro else None)
    source = "classify_error" if record else "the reproduction (classify_error not called yet)"
    lines = [EvidenceLineView(item.line_no, clip(item.text, 500), clip(item.rule, 80))
             for item in (classified.evidence if classified else [])[:12]]
    if not lines and run_id:
        run = next((r for r in runs if r.run_id == run_id), None)
        text = read_tail(run.stderr_path, STDERR_READ) if run else None
        if text is not None:
            from pt2_bug_basher.analysis.classify import classify

            found = classify(text, exit_code=run.exit_code, signal_name=run.signal)  # type: ignore[union-attr]
            lines = [EvidenceLineView(e.line_no, clip(e.text, 500), e.rule) for e in found.evidence[:12]]
            if lines:
                source += f"; evidence lines from the stderr of {run_id}"
    return ClassificationView(
        category=category, secondary=secondary, summary=clip(record.summary if record else repro[-1].summary),
        ok=record.ok if record else True, run_id=run_id, when=when_text((record or repro[-1]).created_at),
        lines=lines, source=source, history=[_attempt(r, t0) for r in records],
    )


def _localization(store: Store, case_id: str, runs: list[RunRecord]) -> LocalizationView | None:
    recorded = store.localization(case_id)
    ladder = [r for r in runs if r.tool == "localize"]
    if recorded is None and not ladder:
        return None
    rows: list[LadderRowView] = []
    if recorded is not None and recorded.table:
        source = "the table localize recorded"
        for row in recorded.table:
            rows.append(LadderRowView(clip(row.backend, 60), clip(row.dynamic, 20) or "script",
                                      clip(row.outcome, 60), clip(row.run_id, 80),
                                      span_text(as_number(row.seconds)), clip(row.failure, 300)))
    else:
        # Cases localised before the table was recorded: rows from the ladder's runs.
        source = "the localize runs"
        for run in ladder:
            argv = [str(a) for a in run.argv] if isinstance(run.argv, list) else []

            def after(flag: str, default: str, argv: list[str] = argv) -> str:
                return argv[argv.index(flag) + 1] if flag in argv[:-1] else default

            view = run_view(run, run.started_at)
            result = as_dict(run.result)
            rows.append(LadderRowView(after("--backend", "?"), after("--dynamic", "script").capitalize()
                                      if "--dynamic" in argv else "script",
                                      clip(result.get("outcome"), 60) or view.outcome, run.run_id, view.duration,
                                      clip(result.get("failure"), 300)))
    recorded = recorded or LocalizeRecord()
    return LocalizationView(clip(recorded.first_failing) or None, clip(recorded.layer) or None,
                            clip(recorded.signature, 500) or None, rows, source)


def _size(value: Any, unit: str) -> int | None:
    return as_int(as_dict(value).get(unit))


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
            t, nodes = as_number(event.get("t")), as_number(event.get("nodes"))
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
        for item in as_list((data.model_extra or {}).get("progress")):
            item = as_dict(item)
            size = as_number(item.get("size", item.get(unit)))
            t = as_number(item.get("t"))
            if t is None and as_number(item.get("at")) is not None:
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
            mode=clip(data.mode, 20) or "?", ok=record.ok, summary=clip(record.summary), unit=unit,
            before=b, after=a, path=name, comparison=clip(data.comparison, 40),
            budget_exhausted=data.budget_exhausted, when=when_text(record.created_at), points=points,
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
            "test": clip(t.node_id) or f"{clip(t.test_file)}::{clip(t.test_name)}",
            "state": "fails on the branch (registered)" if test.ok else clip(t.outcome) or "not registered",
            "failure": " ".join(filter(None, [clip(t.exception_type, 200),
                                              f"({clip(t.category, 60)})" if t.category else ""])),
            "message": clip(t.message, 600), "when": when_text(test.created_at), "ok": "yes" if test.ok else "",
        }
    main = by_step.get("main_check", [])
    if main:
        m = main[-1].payload(MainCheckEvidence)
        outcome = clip(m.outcome, 40)
        view.on_main = {
            "ref": clip(m.ref, 200) or "main", "commit": clip(m.commit, 12),
            "outcome": outcome or ("failed" if main[-1].ok else "?"),
            "meaning": "fails on main too: the bug is real there" if main[-1].ok else
            "passes on main: the case stopped" if outcome == "passed" else "not confirmed",
            "failure": clip(m.exception_type, 200), "message": clip(m.message, 600),
            "when": when_text(main[-1].created_at), "ok": "yes" if main[-1].ok else "",
        }
    verify = by_step.get("verify", [])
    if verify:
        v = verify[-1].payload(VerifyEvidence)
        view.verify = {
            "ok": verify[-1].ok, "summary": clip(verify[-1].summary), "when": when_text(verify[-1].created_at),
            "registered": clip(v.registered, 300), "registered_outcome": clip(v.registered_outcome, 40),
            "counts": dict(v.counts), "problems": [clip(p, 300) for p in v.problems],
            "tests": [TestLine(clip(t.node_id, 300), clip(t.outcome, 40)) for t in v.tests[:200] if t.node_id],
        }
    review = by_step.get("review", [])
    if review:
        r = review[-1].payload(ReviewEvidence)
        view.review = {
            "ok": review[-1].ok, "summary": clip(review[-1].summary), "when": when_text(review[-1].created_at),
            "files": [{"path": clip(f.path, 300), "added": f.added, "removed": f.removed} for f in r.files[:100]],
            "findings": [{"severity": clip(f.severity, 20), "text": clip(f.text, 400)} for f in r.findings[:50]],
        }
    return view


def _artifacts(by_step: dict[str, list[EvidenceRecord]]) -> list[dict[str, str]]:
    out = []
    for record in by_step.get("artifacts", []):
        d = record.payload(ArtifactsEvidence)
        out.append({"summary": clip(record.summary), "ok": "yes" if record.ok else "",
                    "when": when_text(record.created_at),
                    "index": clip(d.index, 500), "run_id": clip(record.run_id or d.run_id, 80),
                    "failure_graph": clip(d.failure_graph, 200),
                    "failure_kernel": clip(d.failure_kernel, 200)})
    return out


def _summary(by_step: dict[str, list[EvidenceRecord]]) -> dict[str, str] | None:
    records = by_step.get("celebrate", [])
    if not records:
        return None
    d = records[-1].payload(CelebrateEvidence)
    return {"root_cause": clip(d.root_cause, 8000), "fix_summary": clip(d.fix_summary, 8000),
            "celebration": clip(d.celebration, 2000), "when": when_text(records[-1].created_at)}


