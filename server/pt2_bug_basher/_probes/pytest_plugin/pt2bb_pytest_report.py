"""A pytest plugin: every report of the session as one JSON line, and exact test selection.

Loaded by pt2-bug-basher with `-p pt2bb_pytest_report` (this folder on PYTHONPATH), in the
interpreter under investigation: it imports nothing from pt2_bug_basher.

--pt2bb-report=PATH  appends one JSON object per line to PATH: each test report (setup, call and
    teardown) and each collection report, as pytest's own `pytest_report_to_serializable` writes
    them (bulky fields left out, `longreprtext` added; a subtest's report as "SubTestReport" with its
    `subtest` description), then one "CollectedItem" line per test once collection is done. Under
    pytest-xdist only the controller writes.
--pt2bb-only=Class.test  keeps only that test and the tests generated from it (parametrized or
    instantiated device-type variants): the items whose function is that test, by the function's
    qualified name (functools.wraps keeps it on generated tests) or by class and function name
    (inherited tests). Never by substring, unlike -k.
"""

from __future__ import annotations

import json

KEPT = ("$report_type", "nodeid", "when", "outcome", "location", "duration", "wasxfail")
TEXT_LIMIT = 400_000


def pytest_addoption(parser):
    group = parser.getgroup("pt2bb", "pt2-bug-basher's report")
    group.addoption("--pt2bb-report", default=None, metavar="PATH", help="append every report to PATH as JSON lines")
    group.addoption("--pt2bb-only", default=None, metavar="CLASS.TEST",
                    help="keep only this test and the tests generated from it")


def identity(item) -> dict:
    """Class, function (the template's name, for generated tests) and qualified name of an item."""
    cls = getattr(item, "cls", None)
    try:
        function = getattr(item, "obj", None)
    except Exception:  # an item whose object cannot be looked up: name only
        function = None
    function = getattr(function, "__func__", function)
    return {
        "class": cls.__name__ if cls is not None else None,
        "function": getattr(function, "__name__", None) or getattr(item, "originalname", None) or item.name,
        "qualname": getattr(function, "__qualname__", None),
    }


def is_variant(item, wanted: str) -> bool:
    """Is the item the test `wanted` ("Class.test") or generated from it? Exact names only."""
    found = identity(item)
    return wanted in (found["qualname"], f"{found['class']}.{found['function']}")


def describe_subtest(context) -> str:
    """`[msg] (k=v, ...)` of a subtest, as pytest's summary names it."""
    if not isinstance(context, dict):
        return "(<subtest>)"
    parts = [f"[{context['msg']}]"] if context.get("msg") is not None else []
    kwargs = context.get("kwargs") or {}
    if isinstance(kwargs, dict) and kwargs:
        parts.append("(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")")
    return " ".join(parts) or "(<subtest>)"


class Writer:
    def __init__(self, config, path: str) -> None:
        self.config = config
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole session

    def write(self, data: dict) -> None:
        self.file.write(json.dumps(data, default=str) + "\n")
        self.file.flush()  # a killed run keeps what it reported

    def report(self, report) -> None:
        full = self.config.hook.pytest_report_to_serializable(config=self.config, report=report) or {}
        data = {key: full[key] for key in KEPT if key in full}
        if full.get("_report_type") == "SubTestReport":  # one `subTest`/`subtests.test` block of a test
            data["$report_type"] = "SubTestReport"
            data["subtest"] = describe_subtest(full.get("_subtest.context"))
        longrepr = full.get("longrepr")
        # Of an exception's serialised form keep the crash line; the text comes whole below.
        data["longrepr"] = {"reprcrash": longrepr.get("reprcrash")} if isinstance(longrepr, dict) else longrepr
        text = report.longreprtext or ""
        data["longreprtext"] = text[-TEXT_LIMIT:]
        self.write(data)

    def pytest_runtest_logreport(self, report) -> None:
        self.report(report)

    def pytest_collectreport(self, report) -> None:
        if report.failed or report.skipped:
            self.report(report)

    def pytest_collection_finish(self, session) -> None:
        for item in session.items:
            self.write({"$report_type": "CollectedItem", "nodeid": item.nodeid, "location": list(item.location),
                        **identity(item)})

    def pytest_unconfigure(self, config) -> None:
        self.file.close()


def pytest_configure(config) -> None:
    path = config.getoption("pt2bb_report")
    if path and not hasattr(config, "workerinput"):  # xdist workers: their controller writes
        config.pluginmanager.register(Writer(config, path), "pt2bb-report-writer")


def pytest_collection_modifyitems(config, items) -> None:
    wanted = config.getoption("pt2bb_only")
    if not wanted:
        return
    kept: list = []
    dropped: list = []
    for item in items:
        (kept if is_variant(item, wanted) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
