"""Each of the judge's ranks alone with its own inputs: no local channel to a sibling rank.

The judge counts what its ranks send each other over the network namespace's loopback
(``judge.loopback``). Ranks forked by one template otherwise share a lot that loopback does not see:
the judge's scratch folder (their sockets, every rank's stack file), ``/tmp``, ``/dev/shm``, System V
IPC and POSIX message queues, Unix sockets (abstract ones need no file at all), each other's memory
(``ptrace``, ``process_vm_readv``) and signals. ``isolate()``, called on the rank before the
submission's code is unpickled, after the rank's own links (to its parent, over Unix sockets) and
its process groups (gloo over TCP on loopback) are up, closes them all:

- a seccomp filter on every thread of the rank (``SECCOMP_FILTER_FLAG_TSYNC``) that refuses, with
  EPERM: new Unix sockets and socket pairs, System V shared memory, queues and semaphores, POSIX
  message queues, ``ptrace``, ``process_vm_readv``/``writev``, ``pidfd`` signals and descriptor
  theft, and any signal to another process (``kill``, ``tgkill``... only to its own pid); foreign
  system call ABIs (i386, x32) are refused whole; TCP and UDP sockets stay (that is the counted
  channel);
- where the kernel has Landlock (Linux 5.13+; without it the filter also refuses opening a file for
  writing, creating, renaming and removing files): a ruleset that lets the rank read everything but
  the judge's scratch folder, ``/tmp`` and ``/dev/shm``, write only its own fresh folder (its
  ``TMPDIR`` from then on) and the device files, and (Landlock 6, Linux 6.12+) connect to no
  abstract socket and signal no process outside itself. Landlock holds the thread that calls it
  and every thread and process it starts later (the rank's code runs there).

Both are irreversible for the process (``PR_SET_NO_NEW_PRIVS``). Written for x86-64 and AArch64
Linux; elsewhere ``isolate`` raises ``IsolationUnavailable`` rather than run a rank unisolated.

    from grading.autograder.rank_isolation import isolate
    isolate()          # on the rank, before any submission code exists in the process
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import tempfile

from grading.autograder.landlock import restrict as landlock_restrict

#: Audit architecture and system call numbers (``kernel/syscalls``) of each supported machine.
ARCHES = {
    "x86_64": dict(audit=0xC000003E, socket=41, socketpair=53, kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129,
                   rt_tgsigqueueinfo=297, ptrace=101, process_vm_readv=310, process_vm_writev=311,
                   pidfd_send_signal=424, pidfd_getfd=438, shmget=29, msgget=68, semget=64, mq_open=240,
                   open=2, openat=257, openat2=437, creat=85, mkdir=83, mkdirat=258, mknod=133, mknodat=259,
                   rename=82, renameat=264, renameat2=316, link=86, linkat=265, symlink=88, symlinkat=266,
                   unlink=87, unlinkat=263, rmdir=84, truncate=76, seccomp=317),
    "aarch64": dict(audit=0xC00000B7, socket=198, socketpair=199, kill=129, tkill=130, tgkill=131,
                    rt_sigqueueinfo=138, rt_tgsigqueueinfo=240, ptrace=117, process_vm_readv=270,
                    process_vm_writev=271, pidfd_send_signal=424, pidfd_getfd=438, shmget=194, msgget=186,
                    semget=190, mq_open=180, openat=56, openat2=437, mkdirat=34, mknodat=33, renameat=38,
                    renameat2=276, linkat=37, symlinkat=36, unlinkat=35, truncate=45, seccomp=277),
}
#: Always refused.
DENIED = ("socketpair", "tkill", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal",
          "pidfd_getfd", "shmget", "msgget", "semget", "mq_open")
#: Refused without Landlock: what writes, creates or removes a file by its path.
DENIED_WITHOUT_LANDLOCK = ("openat2", "creat", "mkdir", "mkdirat", "mknod", "mknodat", "rename", "renameat",
                           "renameat2", "link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat", "rmdir",
                           "truncate")
#: Signal calls allowed only when their first argument is the rank's own pid.
OWN_PID_ONLY = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
#: open flags that write (O_WRONLY, O_RDWR, O_CREAT, O_TRUNC): refused without Landlock.
WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000
AF_UNIX = 1
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM
_LD_ABS, _JEQ, _JGE, _RET, _AND = 0x20, 0x15, 0x35, 0x06, 0x54
#: Offsets in ``struct seccomp_data``: nr, arch, then args[i] at 16 + 8 i (low 32 bits first).
_NR, _ARCH = 0, 4


class IsolationUnavailable(RuntimeError):
    """This machine or kernel cannot isolate a rank (no seccomp, an unknown architecture)."""


def _arg(index: int) -> int:
    return 16 + 8 * index


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple:
    return (code, jt, jf, k)


def _guarded(nr: int, body: list) -> list:
    """``body`` (which ends in a return) when the call is ``nr``; else on to what follows."""
    return [_op(_JEQ, nr, 0, len(body)), *body]


def filter_program(machine: str, own_pid: int, landlock: bool, nccl: bool = False) -> list:
    """The seccomp program (classic BPF, as (code, jt, jf, k) tuples) for ``machine``'s calls; with
    ``nccl``, Unix sockets stay allowed (NCCL's proxy and its memory handles travel over them)."""
    calls = ARCHES[machine]
    program = [_op(_LD_ABS, _ARCH), _op(_JEQ, calls["audit"], 1, 0), _op(_RET, _RET_EPERM), _op(_LD_ABS, _NR)]
    if machine == "x86_64":  # the x32 ABI's numbers
        program += [_op(_JGE, 0x40000000, 0, 1), _op(_RET, _RET_EPERM)]
    for name in DENIED + (() if landlock else DENIED_WITHOUT_LANDLOCK):
        if name in calls and not (nccl and name == "socketpair"):
            program += _guarded(calls[name], [_op(_RET, _RET_EPERM)])
    if not nccl:
        program += _guarded(calls["socket"], [_op(_LD_ABS, _arg(0)), _op(_JEQ, AF_UNIX, 0, 1),
                                              _op(_RET, _RET_EPERM), _op(_RET, _RET_ALLOW)])
    for name in OWN_PID_ONLY:
        program += _guarded(calls[name], [_op(_LD_ABS, _arg(0)), _op(_JEQ, own_pid, 0, 1), _op(_RET, _RET_ALLOW),
                                          _op(_RET, _RET_EPERM)])
    if not landlock:
        for name, flags_arg in (("open", 1), ("openat", 2)):
            if name in calls:
                program += _guarded(calls[name], [_op(_LD_ABS, _arg(flags_arg)), _op(_AND, WRITE_FLAGS),
                                                  _op(_JEQ, 0, 0, 1), _op(_RET, _RET_ALLOW), _op(_RET, _RET_EPERM)])
    return program + [_op(_RET, _RET_ALLOW)]




def _libc():
    """The C library of this process (made at each call: a module-level handle could not travel to
    the judge's ranks, where this code arrives pickled by value)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc
_PR_SET_NO_NEW_PRIVS = 38


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise IsolationUnavailable(f"{what} failed: {os.strerror(code)}")
    return result


def install_filter(program: list, machine: str) -> None:
    """Load ``program`` on every thread of this process (no new privileges from here on)."""
    code = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(buffer))
    prog_buffer = ctypes.create_string_buffer(prog, len(prog))
    _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if _check(_libc().syscall(ARCHES[machine]["seccomp"], 1, 1, prog_buffer), "seccomp(SET_MODE_FILTER, TSYNC)"):
        raise IsolationUnavailable("seccomp(TSYNC): a thread of the rank could not take the filter")


def isolate(nccl: bool = False) -> str:
    """Isolate this rank (see the module's docstring) once; the folder it may write (its TMPDIR).
    Hidden: the scratch folder (``tempfile.gettempdir()``: the judge's ranks keep their sockets and
    stack files there), ``/tmp`` and ``/dev/shm``. With ``nccl`` (the rank's group runs on NCCL, whose
    own transports between the ranks of a node use ``/dev/shm`` and Unix sockets) those two stay."""
    global _isolated
    if _isolated is not None:
        return _isolated
    machine = platform.machine()
    if machine not in ARCHES:
        raise IsolationUnavailable(f"rank isolation knows x86_64 and aarch64 system calls, not {machine}")
    scratch = tempfile.gettempdir()
    private = tempfile.mkdtemp(prefix=f"rank{os.getpid()}-", dir=scratch)
    hidden = (scratch, "/tmp") if nccl else (scratch, "/tmp", "/dev/shm")
    fenced = landlock_restrict(hidden, private, scoped=not nccl, kept=_code_folders(scratch))
    install_filter(filter_program(machine, os.getpid(), landlock=fenced, nccl=nccl), machine)
    os.environ["TMPDIR"] = tempfile.tempdir = private
    _isolated = private
    return private


_isolated: str | None = None


def _code_folders(scratch: str) -> tuple:
    """What the rank must still read where a hidden folder holds it (a course cloned under /tmp):
    the interpreter's environment, labutils' package and the other folders on ``sys.path`` that
    are not in the ranks' ``scratch`` folder."""
    import sys

    import labutils

    scratch = os.path.realpath(scratch).rstrip("/") + "/"
    on_path = [p for p in sys.path if p and not (os.path.realpath(p) + "/").startswith(scratch)]
    folders = [sys.prefix, os.path.dirname(os.path.abspath(labutils.__file__))] + on_path
    return tuple(folder for folder in folders if os.path.isdir(folder))
