"""The fast tier: recorded durations mark slow tests, and `--record-durations` writes them from real runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest_tiers import SLOW_S, recorded, slow_ids

ROOT = Path(__file__).resolve().parents[1]
SLOW = "tests/test_oracle.py::test_a_degenerate_candidate_of_an_accuracy_case_is_refused"
FAST = "tests/test_oracle.py::test_without_a_compiled_call_nothing_reproduces"


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_the_recorded_table_marks_only_tests_over_the_threshold():
    table = recorded()
    assert table[SLOW] > SLOW_S >= table.get(FAST, 0.0)  # a test too quick for the table is fast
    assert slow_ids({"a": SLOW_S + 0.1, "b": SLOW_S, "c": 0.0}) == {"a"}


def test_the_fast_tier_deselects_a_slow_test_and_keeps_a_fast_one():
    listed = _pytest("--collect-only", "-q", "-m", "not slow", "tests/test_oracle.py")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    ids = {line.strip() for line in listed.stdout.splitlines()}
    assert FAST in ids and SLOW not in ids, listed.stdout


def test_durations_are_recorded_once_by_the_xdist_controller(tmp_path: Path):
    out = tmp_path / "durations.json"
    tests = ["tests/test_calls.py::test_calls_are_found_in_prose_with_nesting_and_quotes",
             "tests/test_calls.py::test_literals_python_and_json_and_slots"]
    ran = _pytest("-n", "2", "-q", "--record-durations", str(out), *tests)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    table = json.loads(out.read_text())
    assert set(table) == set(tests) and all(isinstance(s, float) and s >= 0 for s in table.values()), table
