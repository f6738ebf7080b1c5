"""The folder a pool makes in the temporary directory each time its ranks start (``labutils-*``: the
socket the ranks connect to, the files their stacks are written to on a hang).

Its maker removes it when the ranks stop, and ranks whose maker has gone remove it as they exit
(``_worker``). Where the maker and its ranks are killed together (a whole process group, a
container stopped, the out-of-memory killer), nobody is left to: so the maker holds a lock on a file
in it for as long as it lives (``flock``, which the kernel releases when the process dies, in any
PID or network namespace), and every start sweeps the folders of its user whose lock nobody holds.
On a file system without locks the folder gets no lock file, and no sweep ever removes it.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time

from labutils.ranks.errors import LaunchError

PREFIX = "labutils-"
#: The socket the ranks connect to, in the folder.
SOCKET_NAME = "ranks.sock"
#: Bytes a Unix socket's path may hold on Linux (``sun_path`` is 108 with its terminating NUL).
LONGEST_SOCKET_PATH = 107
#: The file whose lock the folder's maker holds while it lives.
LOCK_NAME = "maker.lock"
#: Seconds a folder must have existed before a sweep may take it for abandoned: its maker locks it
#: microseconds after making it, so only that moment must be waited out; a minute leaves any doubt.
SWEEP_MIN_AGE_S = 60.0


class LaunchFolder:
    """A new ``labutils-*`` folder in the temporary directory, locked by this process until ``remove``.
    Raises LaunchError, and makes nothing, where the temporary directory's path is too long for the
    socket's."""

    def __init__(self):
        _check_room_for_the_socket(tempfile.gettempdir())
        self.path = tempfile.mkdtemp(prefix=PREFIX)
        self.socket_path = os.path.join(self.path, SOCKET_NAME)
        self._lock_fd = _hold_lock(os.path.join(self.path, LOCK_NAME))

    def stack_file(self, rank: int) -> str:
        """Where rank ``rank`` writes its stacks when asked (a hang)."""
        return os.path.join(self.path, f"stack{rank}.txt")

    def remove(self) -> None:
        """Remove the folder and everything in it, then let go of its lock."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _hold_lock(path: str) -> int | None:
    """The descriptor of ``path``, made and locked; None, and no file, on a file system without locks
    (some network mounts): a sweep then leaves the folder alone rather than take it for abandoned."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd
    except OSError:
        os.close(fd)
        os.unlink(path)
        return None


def has_room_for_the_socket(parent: str) -> bool:
    """Whether a launch folder made in ``parent`` can hold the ranks' socket (its path short enough)."""
    longest = os.path.join(parent, PREFIX + "x" * 8, SOCKET_NAME)  # mkdtemp adds 8 characters
    return len(longest.encode()) <= LONGEST_SOCKET_PATH


def _check_room_for_the_socket(parent: str) -> None:
    if not has_room_for_the_socket(parent):
        raise LaunchError(
            f"the temporary directory {parent} ({len(parent.encode())} bytes) leaves no room for the ranks' "
            f"socket in it: a Unix socket's path holds at most {LONGEST_SOCKET_PATH} bytes. Point TMPDIR at a "
            f"folder with a shorter path (e.g. /tmp) before the kernel or script starts.")


def sweep_abandoned(parent: str | None = None, min_age_s: float = SWEEP_MIN_AGE_S) -> list[str]:
    """Remove the launch folders in ``parent`` (default: the temporary directory) that belong to this
    user, were made more than ``min_age_s`` seconds ago, and whose maker no longer holds their lock
    (it has died). Folders of other users, of live makers, without a lock file (made by a labutils
    before this one) and anything that is not a plain folder are left alone. Returns the paths removed."""
    parent = parent or tempfile.gettempdir()
    made_before = time.time() - min_age_s
    removed = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        if _remove_if_abandoned(entry.path, made_before):
            removed.append(entry.path)
    return removed


def _remove_if_abandoned(folder: str, made_before: float) -> bool:
    try:
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False
        fd = os.open(os.path.join(folder, LOCK_NAME), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        lock_info = os.fstat(fd)
        if lock_info.st_uid != os.getuid() or lock_info.st_mtime > made_before:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its maker lives
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return True
    finally:
        os.close(fd)
