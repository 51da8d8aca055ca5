"""The fast tier: `pytest -m "not slow"` leaves out every test whose recorded duration is over SLOW_S.

Durations are data, recorded from a whole run of the suite with this plugin's own option:

    python -m pytest -n 2 -p no:cacheprovider -q --record-durations tests/durations.json

It sums each test's setup, call and teardown from pytest's reports (xdist ships them to the controller,
so one file is written). A test the file does not name (a new one) runs in the fast tier until the next
recording; a test marked `slow` in its module stays slow whatever its recorded time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
SLOW_S = 5.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's measured seconds (setup + call + teardown) to PATH as JSON")


def recorded() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def slow_ids(durations: dict[str, float], threshold: float = SLOW_S) -> set[str]:
    return {node for node, seconds in durations.items() if seconds > threshold}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = slow_ids(recorded())
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)


class _Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # an xdist worker: the controller got its reports and writes the file
        table = {node: round(s, 2) for node, s in sorted(self.seconds.items())}
        self.path.write_text(json.dumps(table, indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-durations")
    if path:
        config.pluginmanager.register(_Recorder(Path(path)), "duration-recorder")
