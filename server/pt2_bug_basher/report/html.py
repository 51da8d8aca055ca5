"""The case report as one self-contained HTML page (Jinja2, autoescaped; inline CSS and SVG)."""

from __future__ import annotations

from pathlib import Path

from pt2_bug_basher.report.svg import STATUS_COLOURS
from pt2_bug_basher.report.views import CaseReport

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


