"""The process tree under a pid, read from /proc (Linux), for the tests' leak checks.

    ranks = [p for p in descendants(server_pid) if is_labutils_process(p)]
    assert not wait_until_gone(descendants(), timeout_s=5.0)     # nothing left under this test
    assert not processes_of(uid) and not processes_mentioning("red-team-daemon")  # by owner, by mark
"""
from __future__ import annotations

import os
import time

#: Command-line fragments of the processes labutils starts (template and ranks forked from it,
#: or spawned rank interpreters).
LABUTILS_COMMANDS = ("labutils.ranks._template", "labutils.ranks._worker")


def _stat_fields(pid: int, task: int | None = None) -> list[str] | None:
    """Fields of /proc/PID[/task/TID]/stat after the command name (state first), or None if gone."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _still_running(pid: int, state: str) -> bool:
    """Not a zombie: a zombie main thread whose other threads are still exiting counts as
    running (its files, sockets included, are only closed when the last thread ends)."""
    if state != "Z":
        return True
    try:
        tasks = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
    except OSError:
        return False
    return any((_stat_fields(pid, t) or ["Z"])[0] != "Z" for t in tasks)


def is_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not (entirely) a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and _still_running(pid, fields[0])


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (None if it is gone)."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None else None


def children_by_parent() -> dict[int, list[int]]:
    """Live pids (see ``is_alive``) grouped by parent pid."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and _still_running(int(entry), fields[0]):
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int | None = None) -> set[int]:
    """Live descendant pids of ``pid`` (default: this process): children, their children, ..."""
    pid = os.getpid() if pid is None else pid
    children = children_by_parent()
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def command_line(pid: int) -> str:
    """The command line of ``pid`` with spaces between arguments ("" if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def is_labutils_process(pid: int) -> bool:
    """Whether ``pid`` is a labutils template or rank process (by its command line)."""
    line = command_line(pid)
    return any(fragment in line for fragment in LABUTILS_COMMANDS)


def labutils_processes_under(pid: int) -> set[int]:
    """labutils template and rank processes anywhere below ``pid``."""
    return {p for p in descendants(pid) if is_labutils_process(p)}


def rank_processes(labutils_pids: set[int]) -> set[int]:
    """The ranks among ``labutils_pids``: spawned workers, or processes forked by the template."""
    return {p for p in labutils_pids
            if "labutils.ranks._worker" in command_line(p) or parent_pid(p) in labutils_pids}


def wait_until_gone(pids, timeout_s: float) -> set[int]:
    """Wait up to ``timeout_s`` seconds for every pid to end; return those still alive."""
    deadline = time.monotonic() + timeout_s
    alive = {p for p in pids if is_alive(p)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = {p for p in alive if is_alive(p)}
    return alive


def describe(pids) -> str:
    """One line per pid: "PID: command line", for assertion messages."""
    return "\n".join(f"{p}: {command_line(p)}" for p in sorted(pids)) or "(none)"


def owner(pid: int) -> int | None:
    """The real uid of ``pid`` (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return None


def processes_of(uid: int) -> set[int]:
    """Live pids whose real uid is ``uid``."""
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and owner(int(p)) == uid and is_alive(int(p))}


def processes_mentioning(text: str) -> set[int]:
    """Live pids whose command line contains ``text``."""
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and text in command_line(int(p)) and is_alive(int(p))}
