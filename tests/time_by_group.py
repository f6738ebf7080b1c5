"""A one-line summary of where a test run's time went, per group of test files.

A test's group is its folder under ``tests/`` (``browser``, ``hub``) or, for a file at the top,
the first word after ``test_`` (``test_grading_e2e.py`` is ``grading``). The line adds each
test's setup, call and teardown seconds, so the fixtures a group builds count to that group;
under parallel workers the groups add up to more than the wall time, and the line also gives each
worker's busy seconds: the busiest one bounds the wall time, whatever the others do.
"""
from __future__ import annotations

import time
from collections import defaultdict
from pathlib import PurePosixPath

import pytest

_seconds: dict[str, float] = defaultdict(float)
_busy_by_worker: dict[str, float] = defaultdict(float)
_started = time.monotonic()


def group_of(nodeid: str) -> str:
    """The group of a test id such as ``tests/test_grading_e2e.py::test_x`` (here ``grading``)."""
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    if parts and parts[0] == "tests":
        parts = parts[1:]
    if len(parts) > 1:
        return parts[0]
    stem = PurePosixPath(parts[0]).stem if parts else nodeid
    words = stem.removeprefix("test_").split("_")
    return words[0] or stem


def pytest_runtest_logreport(report) -> None:
    """Add one phase's seconds (setup, call or teardown) of one test to its group."""
    _seconds[group_of(report.nodeid)] += report.duration
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)  # xdist's "gw0"
    if worker:
        _busy_by_worker[worker] += report.duration


def summary_line(seconds: dict[str, float], wall_s: float, busy_by_worker: dict[str, float] | None = None) -> str:
    """``time by group (s, wall 712; busy gw0 700, gw1 650): grading 301, browser 120, ...``, groups
    largest first, workers by name."""
    ranked = sorted(seconds.items(), key=lambda kv: -kv[1])
    busy = "; busy " + ", ".join(f"{w} {s:.0f}" for w, s in sorted(busy_by_worker.items())) if busy_by_worker else ""
    return f"time by group (s, wall {wall_s:.0f}{busy}): " + ", ".join(f"{g} {s:.0f}" for g, s in ranked)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter) -> None:
    """Print the line at the end of the run, after pytest's own summary sections."""
    if _seconds:
        terminalreporter.write_line(summary_line(_seconds, time.monotonic() - _started, _busy_by_worker))
