"""What each account may read on a shared node, set and checked by the hub at every start.

- every account's home is its own (0700): ``useradd`` makes homes other users can list;
- the course checkout (solutions, the grader with its hidden tests, the git history) is closed
  to other users, and no student may be in its group while the group can read it;
- the class folder (nbgrader's course folder: submissions, ``gradebook.db``, ``grades.csv``,
  feedback before its release) is closed to other users, down to every file in it.

Each function fixes what it can and returns one line per change (``course hub`` prints them),
or returns the problems it cannot fix.
"""
from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

#: Permission bits no one but the owner may hold on a home.
HOME_CLOSED = 0o077
#: Permission bits of "other users".
OTHERS = 0o007


def close_homes(names: list[str]) -> list[str]:
    """Make each account's home its owner's alone (0700); a line per home changed."""
    changed = []
    for name in names:
        home = Path(pwd.getpwnam(name).pw_dir)
        if home.is_dir() and home.stat().st_mode & HOME_CLOSED:
            changed.append(close(home, HOME_CLOSED, f"{name}'s home"))
    return changed


def close(path: Path, bits: int, what: str) -> str:
    """Remove ``bits`` from ``path``'s mode; the line that says so."""
    before = stat.S_IMODE(path.stat().st_mode)
    os.chmod(path, before & ~bits)
    return f"{what} {path}: mode {before:o} -> {before & ~bits:o}"


def close_to_others(folder: Path, what: str) -> list[str]:
    """Take every permission of other users from ``folder`` and everything in it; a line per
    file or folder changed (a folder's own line covers what is under it)."""
    changed = []
    for path in [folder, *sorted(folder.rglob("*"))] if folder.is_dir() else []:
        if not path.is_symlink() and path.stat().st_mode & OTHERS:
            changed.append(close(path, OTHERS, what))
    return changed


def close_folder(folder: Path, what: str) -> list[str]:
    """Take other users' permissions from ``folder`` itself (what is inside is then out of reach)."""
    return [close(folder, OTHERS, what)] if folder.stat().st_mode & OTHERS else []


def students_in_group(folder: Path, students: list[str]) -> list[str]:
    """A problem line when ``folder``'s group may read it and a student belongs to that group."""
    info = folder.stat()
    if not info.st_mode & 0o050:
        return []
    group = grp.getgrgid(info.st_gid)
    members = [name for name in students if name in group.gr_mem or pwd.getpwnam(name).pw_gid == info.st_gid]
    return [f"students {', '.join(members)} are in group {group.gr_name}, which can read {folder}: "
            f"sudo chmod g-rwx {folder}, or take them out of the group"] if members else []
