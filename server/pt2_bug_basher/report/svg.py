"""Inline SVG charts of the case report: everything interpolated is escaped here."""

from __future__ import annotations

import html
import math
from typing import Any

from pt2_bug_basher.case.store import EvidenceRecord, RunRecord
from pt2_bug_basher.report.views import CaseReport, clip, relative_text, run_view, span_text

# --------------------------------------------------------------------------------------------
# Inline SVG (everything interpolated is escaped here; the result is trusted markup)

_e = html.escape
STATUS_COLOURS = {"done": "#1a7f37", "waived": "#9a6700", "stale": "#6e7781", "failed": "#cf222e",
                  "stopped": "#82071e", "pending": "#d0d7de", "agent": "#8250df"}
RUN_COLOURS = {"ok": "#1a7f37", "failed": "#cf222e", "signal": "#82071e", "timeout": "#bc4c00",
               "interrupted": "#6e7781", "cancelled": "#6e7781", "stopped": "#6e7781", "running": "#0969da"}


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
                     f'{_e(span_text(tick))}</text>')
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{height - bottom}" class="axis"/>'
                 f'<line x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}" class="axis"/>')
    parts.append(f'<path d="{" ".join(path)}" class="series"/>')
    for x, y in points:
        parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" class="point">'
                     f'<title>{_e(span_text(x))}: {y:g} {_e(unit)}</title></circle>')
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
                     f'<text x="{x:.1f}" y="{height - 10}" class="tick" text-anchor="middle">'
                     f'+{_e(span_text(tick))}</text>')
    y = ly("runs")
    for run in runs:
        x1 = sx(run.started_at)
        x2 = sx(run.ended_at) if run.ended_at else sx(t_end)
        kind = run_view(run, t0).kind
        parts.append(f'<rect x="{x1:.1f}" y="{y - 6:.1f}" width="{max(2.0, x2 - x1):.1f}" height="12" rx="2" '
                     f'fill="{RUN_COLOURS.get(kind, "#6e7781")}" opacity="0.75"><title>{_e(run.run_id)} '
                     f'({_e(run.tool)}): {_e(run_view(run, t0).outcome)}</title></rect>')
    for record in evidence:
        if record.step not in lanes:
            continue
        colour = "#1a7f37" if record.ok else "#cf222e"
        parts.append(f'<circle cx="{sx(record.created_at):.1f}" cy="{ly(record.step):.1f}" r="5" fill="{colour}" '
                     f'class="event"><title>{_e(relative_text(record.created_at, t0))} '
                     f'{"ok" if record.ok else "failed"}: '
                     f'{_e(clip(record.summary, 300))}</title></circle>')
    for waiver in waivers:
        if waiver.step not in lanes:
            continue
        x, wy = sx(waiver.created_at), ly(waiver.step)
        parts.append(f'<path d="M{x:.1f},{wy - 6:.1f}L{x + 6:.1f},{wy:.1f}L{x:.1f},{wy + 6:.1f}L{x - 6:.1f},{wy:.1f}Z" '
                     f'fill="#9a6700" class="event"><title>waived: {_e(clip(waiver.reason, 300))}</title></path>')
    parts.append("</svg>")
    return "".join(parts)


