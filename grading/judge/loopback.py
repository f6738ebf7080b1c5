"""Bytes the judge's ranks sent over their network, counted by the kernel, outside their processes.

In ``course grade`` the ranks run in a bubblewrap sandbox with a network namespace of its own
(``autograder.sandbox.judge_rank_wrapper``): its only interface is loopback, and every byte that
gloo, the rendezvous store or any socket a submission opens sends between ranks crosses it. The
kernel counts those bytes per namespace (``/proc/PID/net/dev``), and this process reads the
count from outside the sandbox: code on a rank can neither skip nor reset it. A launch of the
submission that moves more (a second channel beside the process group's collectives) or less
(collectives replayed with other data, or skipped) than the reference's launch of the same
cases is told apart by ``traffic_problem``.

Where the ranks share this process's network namespace (a student's own check, no sandbox) the
count would include everything else on the machine, so nothing is measured there (``None``).

    meter = LoopbackMeter.around(pool.starter_pid())   # None outside a sandbox
    before = meter.read(); ...; moved = meter.read() - before
"""
from __future__ import annotations

import os

#: Slack of ``traffic_problem``: a launch may move this many bytes more or fewer than the reference's
#: launch of the same cases, plus ``TRAFFIC_RTOL`` of what the reference moved. Calibrated with
#: ``python bench/judge_traffic.py --repeats 3`` (every lab's solution on every hidden test, 72
#: launches of each, gloo on 2 CPU cores): the reference's launches moved 30,160 to 531,332 bytes,
#: and the solution's differed from them by at most 1,756 bytes, at most 0.139 of this slack.
TRAFFIC_ATOL_BYTES = 8 * 1024
TRAFFIC_RTOL = 0.02


def _net_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _children(pid: int) -> list:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(word) for word in f.read().split()]
        except OSError:
            continue
    return found


def process_in_other_namespace(root_pid: int) -> int | None:
    """``root_pid`` or the first of its descendants (breadth first) whose network namespace is not
    this process's; None if there is none (the ranks share our network)."""
    ours = _net_namespace("self")
    queue = [root_pid]
    while queue:
        pid = queue.pop(0)
        theirs = _net_namespace(pid)
        if theirs is not None and theirs != ours:
            return pid
        queue += _children(pid)
    return None


def loopback_bytes(pid: int) -> int:
    """Bytes sent over the loopback interface of ``pid``'s network namespace since it was made
    (``/proc/PID/net/dev``, the ``lo`` line's transmit bytes: on loopback every byte sent is received)."""
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[8])
    raise OSError(f"no loopback interface in the network namespace of process {pid}")


class LoopbackMeter:
    """Reads the loopback byte count of one sandbox's network namespace through a process in it."""

    def __init__(self, pid: int):
        self.pid = pid

    @classmethod
    def around(cls, starter_pid: int | None) -> "LoopbackMeter | None":
        """The meter of the namespace the ranks forked from ``starter_pid`` live in, or None when
        they share this process's network (nothing there to measure)."""
        if starter_pid is None:
            return None
        pid = process_in_other_namespace(starter_pid)
        return cls(pid) if pid is not None else None

    def read(self) -> int:
        return loopback_bytes(self.pid)


def traffic_problem(reference_bytes: int | None, student_bytes: int | None) -> str | None:
    """Why the submission's launch moved other traffic than the reference's launch of the same cases
    (bytes over the ranks' loopback), or None: within ``TRAFFIC_ATOL_BYTES`` + ``TRAFFIC_RTOL`` of the
    reference's, or not measured."""
    if reference_bytes is None or student_bytes is None:
        return None
    slack = TRAFFIC_ATOL_BYTES + TRAFFIC_RTOL * reference_bytes
    if abs(student_bytes - reference_bytes) <= slack:
        return None
    more = student_bytes > reference_bytes
    return (f"your ranks sent {student_bytes:,} bytes to each other where the reference's sent {reference_bytes:,} "
            f"for the same cases: {'traffic outside the collectives the test expects' if more else 'communication the test expects is missing'}"
            f" (counted by the operating system, beside the process group)")
