"""The application search of localize's bisection, on recorded trial outcomes: where it narrows, where it widens,
and where it must stop (counted trials that fail another way, as CUDA graphs' do)."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest

from pt2_bug_basher.domain.bisection import BisectTrial
from pt2_bug_basher.reduce.bisect import Subsystem, _search

pytestmark = pytest.mark.anyio


class Recorded:
    """What `_search` asks of its trials: an outcome per application count, from a table, each run recorded."""

    def __init__(self, outcome: Callable[[int], str], cores: int = 4) -> None:
        self.outcome, self.limiter = outcome, anyio.CapacityLimiter(cores)
        self.deadline, self.last_calls, self.asked = time.monotonic() + 60, None, []

    async def run(self, sub, point, counting=None):
        self.asked.append(point)
        return BisectTrial(subsystem=sub.name, max_enabled=point, outcome=self.outcome(point)), []


SUB = Subsystem(name="cudagraphs", kind="bisect")


async def test_the_first_failing_count_is_found_among_the_counted_applications():
    trials = Recorded(lambda m: "same failure" if m >= 5 else "fixed")
    found, _, (lo, hi), differs = await _search(trials, SUB, 10)  # type: ignore[arg-type]
    assert (found, lo, hi, differs) == (5, 4, 5, False)


async def test_more_applications_than_counted_widen_the_range():
    trials = Recorded(lambda m: "same failure" if m >= 9 else "fixed")
    found, _, _, differs = await _search(trials, SUB, 4)  # type: ignore[arg-type]
    assert (found, differs) == (9, False)
    assert max(trials.asked) < 20


async def test_counted_trials_that_all_fail_another_way_stop_the_search_at_once():
    """Switched off the subsystem fixes it; counted, it fails another way at every count, all on included:
    no count can reproduce the failure, so the search stops instead of doubling the range for ever."""
    trials = Recorded(lambda m: "different failure")
    found, _, (lo, hi), differs = await _search(trials, SUB, 4)  # type: ignore[arg-type]
    assert found is None and differs and hi == 3
    assert len(trials.asked) <= 6 and max(trials.asked) == 3, trials.asked
