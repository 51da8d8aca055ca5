"""Reading a pytest run's results: the JSON lines the report plugin wrote, one outcome per node id.

The plugin (`_probes/pytest_plugin/pt2bb_pytest_report.py`) writes pytest's own serialised reports:
each phase (setup, call, teardown) of each test, each failed or skipped collection, and the items
collected. Node ids are pytest's, exactly (parametrized and generated names included). A failed subtest
(`self.subTest`, the `subtests` fixture) fails its test, whose own call phase pytest reports as passed. Tracebacks
are Python's native format (`--tb=native`), so the failure parser reads them like any other.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pt2_bug_basher.analysis.compare import Failure
from pt2_bug_basher.analysis.failure import FRAME_LINE

MESSAGE_CHARS = 500


@dataclass
class TestOutcome:
    """One test's outcome over its phases, or one collection error (outcome "collection_error")."""

    __test__ = False  # not a pytest test class

    node_id: str
    outcome: str  # passed, failed, error, skipped, collection_error
    message: str = ""
    text: str = ""
    time_s: float = 0.0
    line: int | None = None
    subtests_failed: int = 0

    @property
    def file(self) -> str:
        return self.node_id.split("::", 1)[0]

    @property
    def name(self) -> str:
        return self.node_id.rsplit("::", 1)[-1]


@dataclass
class CollectedItem:
    """A test pytest collected: its node id and the function it runs (a generated test's template)."""

    node_id: str
    line: int | None
    cls: str | None
    function: str
    qualname: str | None = None

    @property
    def file(self) -> str:
        return self.node_id.split("::", 1)[0]

    @property
    def template(self) -> str:
        """`Class.test` of the function written in the file (the same for all its generated variants)."""
        if self.qualname and "<locals>" not in self.qualname:
            return self.qualname
        return f"{self.cls}.{self.function}" if self.cls else self.function

    @property
    def template_class(self) -> str | None:
        return self.template.rpartition(".")[0] or None

    def is_variant_of(self, qualified: str) -> bool:
        """Is this `qualified` ("Class.test") or generated from it? The plugin's rule, by exact names."""
        return qualified in (self.qualname, f"{self.cls}.{self.function}")


@dataclass
class PytestReport:
    tests: list[TestOutcome] = field(default_factory=list)
    collection_errors: list[TestOutcome] = field(default_factory=list)
    collected: list[CollectedItem] = field(default_factory=list)
    parse_error: str | None = None

    def by_outcome(self, outcome: str) -> list[TestOutcome]:
        return [t for t in self.tests if t.outcome == outcome]

    def find(self, node_id: str) -> TestOutcome | None:
        return next((t for t in self.tests if t.node_id == node_id), None)


def parse_report(source: Path | str) -> PytestReport:
    """The report plugin's JSON lines (a path, or the text) as outcomes; collection errors apart."""
    report = PytestReport()
    try:
        text = source.read_text(encoding="utf-8", errors="replace") if isinstance(source, Path) else source
    except OSError as exc:
        report.parse_error = f"the pytest report could not be read: {exc}"
        return report
    tests: dict[str, TestOutcome] = {}
    unreadable = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        if not isinstance(data, dict):
            unreadable += 1
            continue
        kind = data.get("$report_type")
        if kind == "TestReport":
            _add_phase(tests, data)
        elif kind == "SubTestReport":
            _add_subtest(tests, data)
        elif kind == "CollectReport":
            _add_collection(report, tests, data)
        elif kind == "CollectedItem":
            location = data.get("location") or [None, None]
            report.collected.append(CollectedItem(
                node_id=str(data.get("nodeid", "")), line=_line(location), cls=data.get("class"),
                function=str(data.get("function") or ""), qualname=data.get("qualname"),
            ))
    report.tests = list(tests.values())
    if unreadable:
        report.parse_error = f"{unreadable} lines of the pytest report could not be read (a run cut short?)"
    return report


def _line(location: Any) -> int | None:
    """pytest's 0-based line of a location, 1-based."""
    if isinstance(location, (list, tuple)) and len(location) > 1 and isinstance(location[1], int):
        return location[1] + 1
    return None


def _crash(data: dict) -> str:
    """The one-line message of a failed phase (pytest's crash line), else its text's first line."""
    longrepr = data.get("longrepr")
    if isinstance(longrepr, dict):
        crash = longrepr.get("reprcrash") or {}
        if isinstance(crash, dict) and crash.get("message"):
            return str(crash["message"])
    text = str(data.get("longreprtext") or "")
    return text.strip().splitlines()[0] if text.strip() else ""


def _skip_reason(data: dict) -> str:
    if data.get("wasxfail") is not None:
        reason = str(data["wasxfail"]).removeprefix("reason: ")
        return "expected failure" + (f": {reason}" if reason else "")
    longrepr = data.get("longrepr")
    reason = str(longrepr[2]) if isinstance(longrepr, (list, tuple)) and len(longrepr) == 3 else _crash(data)
    return reason.removeprefix("Skipped: ")


def _add_phase(tests: dict[str, TestOutcome], data: dict) -> None:
    node_id = str(data.get("nodeid", ""))
    test = tests.get(node_id)
    if test is None:
        test = tests[node_id] = TestOutcome(node_id=node_id, outcome="passed", line=_line(data.get("location")))
    when, outcome = data.get("when"), data.get("outcome")
    text = str(data.get("longreprtext") or "")
    duration = data.get("duration")
    test.time_s += float(duration) if isinstance(duration, (int, float)) else 0.0
    if outcome == "skipped":
        if test.outcome == "passed":
            test.outcome, test.message = "skipped", _skip_reason(data)
    elif outcome == "failed":
        if when == "call":
            test.outcome, test.message, test.text = "failed", _crash(data), text
        elif test.outcome not in ("failed", "error"):
            test.outcome, test.text = "error", text
            test.message = f'failed on {when} with "{_crash(data)}"'


def _add_subtest(tests: dict[str, TestOutcome], data: dict) -> None:
    """A failed subtest fails its test (pytest counts it failed, while the test's own call phase passes)."""
    if data.get("outcome") != "failed":
        return
    node_id = str(data.get("nodeid", ""))
    test = tests.get(node_id)
    if test is None:
        test = tests[node_id] = TestOutcome(node_id=node_id, outcome="passed", line=_line(data.get("location")))
    test.subtests_failed += 1
    if test.outcome != "failed":
        subtest = str(data.get("subtest") or "(<subtest>)")
        test.outcome, test.text = "failed", str(data.get("longreprtext") or "")
        test.message = f"subtest {subtest} failed: {_crash(data)}"


def _add_collection(report: PytestReport, tests: dict[str, TestOutcome], data: dict) -> None:
    node_id = str(data.get("nodeid", ""))
    text = str(data.get("longreprtext") or "")
    if data.get("outcome") == "failed":
        report.collection_errors.append(TestOutcome(
            node_id=node_id, outcome="collection_error", message=_collection_message(text) or _crash(data), text=text,
        ))
    elif data.get("outcome") == "skipped":  # a module that skips itself (unittest.SkipTest, pytest.skip at import)
        tests.setdefault(node_id, TestOutcome(node_id=node_id, outcome="skipped", message=_skip_reason(data)))


def _collection_message(text: str) -> str:
    """The `E   ...` line(s) of a collection error, else its last line."""
    errors = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    if errors:
        return " ".join(errors)[:MESSAGE_CHARS]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip()[:MESSAGE_CHARS] if lines else ""


# -- tracebacks ---------------------------------------------------------------------------------

_HARNESS = re.compile(r"[/\\](?:_pytest|pluggy|unittest|xdist|execnet)[/\\]")


def clean_traceback(text: str) -> str:
    """Drop pytest/pluggy/unittest frames from a native traceback, so it reads like the repro's."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        frame = FRAME_LINE.match(line)
        if frame:
            skipping = bool(_HARNESS.search(frame.group("file")))
            if not skipping:
                out.append(line)
            continue
        if skipping and line.startswith("    "):
            continue
        skipping = False
        out.append(line)
    return "\n".join(out)


def relevant_frame(text: str, test_file: str | None = None) -> str | None:
    """The innermost frame of the repository's code (not the harness), else the test's own frame."""
    frames = [m for m in (FRAME_LINE.match(ln) for ln in text.splitlines()) if m]
    frames = [f for f in frames if not _HARNESS.search(f.group("file"))]
    if not frames:
        return None
    torch_frames = [f for f in frames if re.search(r"[/\\]torch[/\\]", f.group("file"))
                    and not re.search(r"[/\\]torch[/\\]testing[/\\]", f.group("file"))]
    test_frames = [f for f in frames if test_file and f.group("file").endswith(test_file)]
    chosen = (torch_frames or test_frames or frames)[-1]
    return f"{chosen.group('file')}:{chosen.group('line')} in {chosen.group('func') or '?'}"


# -- failure analysis ---------------------------------------------------------------------------


class FailureInfo(BaseModel):
    node_id: str
    outcome: str = Field(description="failed (an assertion or exception in the test) or error (setup/teardown)")
    message: str
    exception_type: str | None = None
    category: str | None = None
    signature: str | None = None
    frame: str | None = Field(None, description="the first relevant frame: innermost repository frame")


def analyse(outcome: TestOutcome) -> tuple[FailureInfo, Failure]:
    """Classify one failed/errored test from its traceback: what to show, and what to compare."""
    from pt2_bug_basher.analysis.classify import classify

    text = clean_traceback(outcome.text)[-200_000:]
    if not text.strip():
        text = outcome.message
    classification = classify(text)
    failure = classification.failure
    if failure is None:
        from pt2_bug_basher.analysis.failure import parse_failure

        failure = parse_failure(text)
    message = outcome.message or (failure.message if failure else "") or ""
    info = FailureInfo(
        node_id=outcome.node_id, outcome=outcome.outcome, message=message[:MESSAGE_CHARS],
        exception_type=failure.exception_type if failure else None, category=classification.category,
        signature=failure.signature if failure else None, frame=relevant_frame(text, outcome.file),
    )
    seen = Failure(signature=info.signature, category=info.category, secondary=list(classification.secondary),
                   exception_type=info.exception_type, message=info.message, frame=info.frame)
    return info, seen
