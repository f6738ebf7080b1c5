"""Shared fixtures: every test that starts ranks must leave no process behind."""
from __future__ import annotations

import os
import time

import pytest


def descendants(pid: int | None = None) -> set[int]:
    """Live (non-zombie) descendant pids of ``pid`` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if state != "Z":
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def wait_until_gone(pids, timeout: float = 5.0) -> set[int]:
    """Wait until none of ``pids`` is alive; return the ones still alive at the deadline."""
    deadline = time.monotonic() + timeout
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if os.path.exists(f"/proc/{p}") and _not_zombie(p)}
        if alive:
            time.sleep(0.05)
    return alive


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def no_leftover_processes():
    """After the test, stop labutils entirely and assert that no child process survives."""
    yield
    import labutils

    labutils.shutdown()
    left = wait_until_gone(descendants(), timeout=5.0)
    assert not left, f"processes left behind: {sorted(left)}"
