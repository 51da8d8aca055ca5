"""How many processes to run at once, from the CPUs this process may use (its affinity, not the host's)."""

from __future__ import annotations

import os

MAX_XDIST_WORKERS = 4


def usable_cpus() -> int:
    """CPUs this process may run on (sched_getaffinity where the platform has it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parallel_runs(wanted: int) -> int:
    """How many of `wanted` independent runs to start at once: one per usable CPU, at least 1."""
    return max(1, min(wanted, usable_cpus()))


def xdist_workers() -> int:
    """pytest-xdist workers for a test run: one per usable CPU, between 2 and MAX_XDIST_WORKERS."""
    return min(MAX_XDIST_WORKERS, max(2, usable_cpus()))
