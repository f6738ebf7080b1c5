"""Landlock (Linux 5.13+), the kernel's unprivileged file-access sandbox, for one of the judge's ranks.

``restrict(hidden, private)`` lets the calling thread (and every thread and process it starts later)
read every file but those beneath ``hidden``, write only beneath ``private`` and the device files,
and, with Landlock ABI 6 (Linux 6.12+), neither connect to an abstract Unix socket nor signal a
process created outside it. It returns False, changing nothing, where the kernel has no Landlock.
Used by ``rank_isolation``; the system calls are made with ``ctypes`` (no library needed).
"""
from __future__ import annotations

import ctypes
import os
import stat
import struct

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
#: Rights that apply to a file (the rest apply to folders only).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)  # with TRUNCATE, IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2



def _libc():
    """The C library of this process (made at each call: a module-level handle could not travel to
    the judge's ranks, where this code arrives pickled by value)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 without Landlock."""
    version = _libc().syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(int(version), 0)


def handled_rights(abi: int) -> int:
    """Every file right Landlock ``abi`` knows: v1 the first 13, v2 REFER, v3 TRUNCATE, v5 IOCTL_DEV."""
    rights = (1 << 13) - 1
    for version, bit in ((2, 13), (3, 14), (5, 15)):
        if abi >= version:
            rights |= 1 << bit
    return rights


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def readable_roots(hidden: list, top: str = "/", kept: list = ()) -> list:
    """Paths whose trees together hold everything under ``top`` but ``hidden`` (and what is beneath),
    except the ``kept`` folders, which stay readable even inside a hidden one (the interpreter's
    environment and labutils, when the course lives under /tmp)."""
    roots = []
    for entry in os.scandir(top):
        path = entry.path
        if any(_inside(path, k) for k in kept):
            roots.append(path)
            continue
        folder = entry.is_dir(follow_symlinks=False)
        holds_kept = folder and any(_inside(k, path) for k in kept)
        if any(_inside(path, h) for h in hidden) and not holds_kept:
            continue
        if holds_kept or (folder and any(_inside(h, path) for h in hidden)):
            roots += readable_roots(hidden, path, kept)
        else:
            roots.append(path)
    return roots


def _add(ruleset: int, path: str, rights: int) -> None:
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)
        if kind not in (stat.S_IFDIR, stat.S_IFREG, stat.S_IFCHR, stat.S_IFBLK):
            return  # a socket or pipe (/dev/stderr): Landlock rules hold files and folders only
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since it was listed, or a dangling link: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = struct.pack("=Qi", rights, fd)
        if _libc().syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.c_char_p(rule), 0) < 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
    finally:
        os.close(fd)


def restrict(hidden: tuple, private: str, scoped: bool = True, kept: tuple = ()) -> bool:
    """Restrict the calling thread as the module says (without ``scoped``, abstract sockets and
    signals are left alone; ``kept`` folders stay readable inside hidden ones); False (nothing done)
    without Landlock."""
    abi = abi_version()
    if abi < 1:
        return False
    handled = handled_rights(abi)
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 and scoped else 0
    attr = struct.pack("=QQQ", handled, 0, scoped)[:24 if abi >= 6 else 16 if abi >= 4 else 8]
    ruleset = _libc().syscall(_CREATE_RULESET, ctypes.c_char_p(attr), len(attr), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        hidden = [os.path.realpath(h) for h in hidden]
        for root in readable_roots(hidden, "/", [os.path.realpath(k) for k in kept]):
            _add(ruleset, root, handled if _inside(root, "/dev") else READ)
        _add(ruleset, private, handled)
        if _libc().prctl(38, 1, 0, 0, 0) < 0 or _libc().syscall(_RESTRICT_SELF, ruleset, 0) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return True
