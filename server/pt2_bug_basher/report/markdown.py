"""The case report as Markdown: backslash escapes, code spans and fenced blocks for what came from outside."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pt2_bug_basher.report.views import MAX_TEXT, CaseReport, clip

# --------------------------------------------------------------------------------------------
# Markdown

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def md_text(value: Any, limit: int = MAX_TEXT) -> str:
    """Untrusted text as inline Markdown: one line, every punctuation that means something escaped."""
    text = " ".join(clip(value, limit).split())
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(value: Any, limit: int = 300) -> str:
    """Untrusted text as an inline code span (HTML is not interpreted in code spans); table-safe."""
    text = " ".join(clip(value, limit).split()).replace("|", "¦")
    if not text:
        return ""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_block(text: str, limit: int = 6000) -> list[str]:
    text = clip(text, limit)
    longest = max((len(m) for m in re.findall(r"~+", text)), default=0)
    fence = "~" * max(3, longest + 1)
    return [fence + "text", *text.splitlines(), fence]


def render_markdown(report: CaseReport) -> str:
    out: list[str] = []
    for section in SECTIONS:
        out += section(report)
    out += ["", f"_Generated {report.generated} by pt2-bug-basher._", ""]
    return "\n".join(out)


def _header(r: CaseReport) -> list[str]:
    out = [f"# Case report: {md_code(r.case_id)}", ""]
    out += [f"- **Repository**: {md_code(r.repo, 500)}", f"- **Python**: {md_code(r.python, 500)}",
            f"- **torch**: {md_text(r.torch)}", f"- **Opened**: {r.created}",
            f"- **Progress**: {r.complete} of {r.total} steps the server checks complete"
            + (f"; steps {md_text(r.agent_steps)} are the agent's own" if r.agent_steps else ""),
            f"- **Next step**: {md_text(r.next_step)}"]
    if r.stopped:
        out += ["", f"> **Stopped**: {md_text(r.stopped)}"]
    for note in r.notes:
        out += ["", f"> Note: {md_text(note)}"]
    return out


def _steps(r: CaseReport) -> list[str]:
    out = ["", "## Steps", "", "| # | Step | Status | When | Evidence |", "|---:|---|---|---|---|"]
    for s in r.steps:
        evidence = md_text(s.evidence, 400) if s.evidence else ""
        if s.run_id:
            evidence += f" (run {md_code(s.run_id)})"
        if len(s.attempts) > 1:
            evidence += f" — {len(s.attempts)} attempts"
        out.append(f"| {s.number} | {md_text(s.title)} | {s.icon} {s.label} | {md_text(s.rel)} | {evidence} |")
    return out


def _runs(r: CaseReport) -> list[str]:
    out = ["", "## Runs", ""]
    if not r.runs:
        return out + ["No runs yet."]
    if r.runs_hidden:
        out += [f"The first {r.runs_hidden} runs are not shown.", ""]
    out += ["| Run | Tool | Outcome | Duration | Started | Command |", "|---|---|---|---:|---|---|"]
    for run in r.runs:
        outcome = md_text(run.outcome) + (f" ({md_text(run.result, 200)})" if run.result else "")
        out.append(f"| {md_code(run.run_id)} | {md_text(run.tool)} | {outcome} | {md_text(run.duration)} | "
                   f"{md_text(run.rel)} | {md_code(run.command, 300)} |")
    return out


def _classification(r: CaseReport) -> list[str]:
    out = ["", "## Classification", ""]
    c = r.classification
    if c is None:
        return out + ["Not classified yet."]
    extra = f", also {', '.join(md_text(s) for s in c.secondary)}" if c.secondary else ""
    out.append(f"**{md_text(c.category)}**{extra} — {md_text(c.summary)} (from {md_text(c.source)})")
    if c.lines:
        out += ["", "Evidence lines:", ""]
        out += md_block("\n".join(f"{ln.line_no if ln.line_no is not None else '?':>5}: {ln.text}"
                                  + (f"   [{ln.rule}]" if ln.rule else "") for ln in c.lines))
    return out


def _localisation(r: CaseReport) -> list[str]:
    loc = r.localization
    if loc is None:
        return []
    out = ["", "## Localisation", "",
           f"First failing backend: {md_code(loc.first_failing or 'none')}; layer: "
           f"{md_text(loc.layer or 'unknown')} (from {md_text(loc.source)})", ""]
    if loc.rows:
        out += ["| Backend | dynamic | Outcome | Time | Run |", "|---|---|---|---:|---|"]
        out += [f"| {md_code(row.backend)} | {md_text(row.dynamic)} | {md_text(row.outcome)} | "
                f"{md_text(row.seconds)} | {md_code(row.run_id)} |" for row in loc.rows]
    return out


def _minification(r: CaseReport) -> list[str]:
    out = ["", "## Minification", ""]
    if not r.minify:
        out.append("No reduction recorded.")
    for m in r.minify:
        sizes = " → ".join(f"{y:g}" for _, y in m.points) if m.points else "?"
        state = "confirmed" if m.ok else "not confirmed"
        out.append(f"- {md_text(m.mode)} ({md_text(m.when)}): {sizes} {md_text(m.unit)}, {state}"
                   + (f", {md_code(m.path)}" if m.path else "") + (", budget ran out" if m.budget_exhausted else ""))
    return out


def _tests(r: CaseReport) -> list[str]:
    out = ["", "## Tests", ""]
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
    return out


def _artifacts(r: CaseReport) -> list[str]:
    if not r.artifacts:
        return []
    return ["", "## Debug artifacts", ""] + [
        f"- {md_text(a['summary'])}" + (f" — index {md_code(a['index'], 400)}" if a["index"] else "")
        for a in r.artifacts]


def _waivers(r: CaseReport) -> list[str]:
    return ["", "## Waivers", ""] + (
        [f"- **{md_text(w.step)}** ({md_text(w.when)}): {md_text(w.reason)}" for w in r.waivers] or ["None."])


def _summary(r: CaseReport) -> list[str]:
    out = ["", "## Summary", ""]
    if r.summary is None:
        return out + ["Not celebrated yet."]
    out += ["**Root cause**: " + md_text(r.summary["root_cause"], 8000), "",
            "**Fix**: " + md_text(r.summary["fix_summary"], 8000)]
    if r.summary["celebration"]:
        out += [""] + md_block(r.summary["celebration"])
    return out


# the report's sections, in order
SECTIONS: tuple[Callable[[CaseReport], list[str]], ...] = (
    _header, _steps, _runs, _classification, _localisation, _minification, _tests, _artifacts, _waivers, _summary)
