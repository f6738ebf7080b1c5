"""A memory cgroup around one grading worker's sandboxes: the memory cap where RLIMIT_AS cannot be.

On a GPU node the CUDA driver reserves far more address space than it uses, so the sandbox's
address-space cap (``sandbox.MIN_ADDRESS_SPACE_BYTES`` and up) is dropped there. A cgroup's memory
limit counts what is actually resident instead: the heap, anonymous and shared mappings
(``mmap(MAP_SHARED)``, ``/dev/shm``) and page cache alike. Past it, the kernel's out-of-memory
killer stops a process of that cgroup only, never another worker's or the grader.

Each worker of ``course grade`` makes one cgroup (``MemoryCgroup.create``); its sandboxed kernels
and its judge's rank template join it before ``bwrap`` starts (``join_command``, and the judge's
``STAGE_CODE``), so every process a submission starts is inside. The worker grades one submission
at a time, so the cgroup holds one submission's processes (and the judge's reference ranks, which
run when the submission's do not).

Needs a writable memory controller: cgroup v1 (``/sys/fs/cgroup/memory``) or v2 with the
memory controller available to this process's cgroup, as root or where the cgroup is delegated
(``systemd-run --user --scope -p Delegate=yes``). ``MemoryCgroup.create`` raises
``CgroupUnavailable`` saying which, when it cannot.
"""
from __future__ import annotations

import os
import signal
import sys
import time

CGROUP_ROOT = "/sys/fs/cgroup"
#: The leaf this process moves into under cgroup v2, so that its own cgroup may hand the memory
#: controller to its children (a v2 cgroup with processes of its own cannot).
V2_LEAF = "course-grade-main"


class CgroupUnavailable(RuntimeError):
    """No memory cgroup can be made here; the message says why and what would allow it."""


def _own_cgroup_lines() -> list:
    with open("/proc/self/cgroup") as f:
        return [line.rstrip("\n").split(":", 2) for line in f if line.strip()]


def _v1_memory_dir() -> str | None:
    for _, controllers, path in _own_cgroup_lines():
        if "memory" in controllers.split(","):
            folder = os.path.join(CGROUP_ROOT, "memory", path.lstrip("/"))
            return folder if os.path.isdir(folder) else None
    return None


def _v2_dir() -> str | None:
    for number, controllers, path in _own_cgroup_lines():
        if number == "0" and controllers == "":
            folder = os.path.join(CGROUP_ROOT, path.lstrip("/"))
            if os.path.exists(os.path.join(folder, "cgroup.controllers")):
                return folder
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _v2_parent(folder: str) -> str:
    """``folder`` (this process's v2 cgroup) ready to hold cgroups with the memory controller: this
    process moved into a leaf of it first, then memory enabled for its children."""
    with open(os.path.join(folder, "cgroup.controllers")) as f:
        if "memory" not in f.read().split():
            raise CgroupUnavailable(f"the memory controller is not available to {folder} (cgroup v2)")
    with open(os.path.join(folder, "cgroup.subtree_control")) as f:
        if "memory" in f.read().split():
            return folder
    leaf = os.path.join(folder, V2_LEAF)
    os.makedirs(leaf, exist_ok=True)
    with open(os.path.join(folder, "cgroup.procs")) as f:
        pids = f.read().split()
    for pid in pids:  # every process of the cgroup (this one and its threads' group) into the leaf
        try:
            _write(os.path.join(leaf, "cgroup.procs"), pid)
        except ProcessLookupError:
            continue
    _write(os.path.join(folder, "cgroup.subtree_control"), "+memory")
    return folder


class MemoryCgroup:
    """One memory cgroup: ``procs`` is the file a process writes its pid to, to join it."""

    def __init__(self, folder: str, version: int, limit_bytes: int):
        self.folder, self.version, self.limit_bytes = folder, version, limit_bytes

    @property
    def procs(self) -> str:
        return os.path.join(self.folder, "cgroup.procs")

    @classmethod
    def create(cls, name: str, limit_bytes: int) -> "MemoryCgroup":
        """A fresh cgroup ``name`` beside this process's, capped at ``limit_bytes`` of memory and no swap."""
        if limit_bytes <= 0:
            raise ValueError(f"a memory cgroup needs a positive limit, got {limit_bytes} bytes")
        folder = None
        try:
            v1 = _v1_memory_dir()
            if v1 is not None:
                folder = os.path.join(v1, name)
                os.makedirs(folder, exist_ok=True)
                _write(os.path.join(folder, "memory.limit_in_bytes"), str(limit_bytes))
                if os.path.exists(os.path.join(folder, "memory.memsw.limit_in_bytes")):
                    _write(os.path.join(folder, "memory.memsw.limit_in_bytes"), str(limit_bytes))
                return cls(folder, 1, limit_bytes)
            v2 = _v2_dir()
            if v2 is None:
                raise CgroupUnavailable("no cgroup file system with a memory controller under /sys/fs/cgroup")
            folder = os.path.join(_v2_parent(v2), name)
            os.makedirs(folder, exist_ok=True)
            _write(os.path.join(folder, "memory.max"), str(limit_bytes))
            if os.path.exists(os.path.join(folder, "memory.swap.max")):
                _write(os.path.join(folder, "memory.swap.max"), "0")
            return cls(folder, 2, limit_bytes)
        except OSError as exc:
            if folder is not None and os.path.isdir(folder):
                try:
                    os.rmdir(folder)  # made, but it could not be limited
                except OSError:
                    pass
            raise CgroupUnavailable(f"cannot make a memory cgroup here ({exc.strerror}: {exc.filename}): run "
                                    "course grade as root, or in a delegated cgroup (systemd-run --user --scope "
                                    "-p Delegate=yes course grade ...)") from None

    @classmethod
    def of_procs(cls, procs: str) -> "MemoryCgroup":
        """The cgroup whose ``cgroup.procs`` is ``procs`` (made by ``create``, maybe in another process)."""
        folder = os.path.dirname(procs)
        version = 2 if os.path.exists(os.path.join(folder, "memory.max")) else 1
        with open(os.path.join(folder, "memory.max" if version == 2 else "memory.limit_in_bytes")) as f:
            text = f.read().strip()
        return cls(folder, version, 0 if text == "max" else int(text))

    def pids(self) -> list:
        try:
            with open(self.procs) as f:
                return [int(word) for word in f.read().split()]
        except OSError:
            return []

    def out_of_memory_kills(self) -> int:
        """How many processes of this cgroup the out-of-memory killer stopped so far."""
        name, key = (("memory.oom_control", "oom_kill") if self.version == 1 else ("memory.events", "oom_kill"))
        try:
            with open(os.path.join(self.folder, name)) as f:
                for line in f:
                    words = line.split()
                    if len(words) == 2 and words[0] == key:
                        return int(words[1])
        except OSError:
            pass
        return 0

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kill what is left inside and delete the cgroup."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.folder)
                return
            except FileNotFoundError:
                return
            except OSError:  # busy until the killed processes are reaped
                time.sleep(0.05)


def join_command(procs: str, argv: list) -> list:
    """``argv`` run by a shell that first moves itself into the cgroup whose ``cgroup.procs`` is
    ``procs`` (every process it starts then belongs to it); ``argv`` unchanged when ``procs`` is empty."""
    if not procs:
        return list(argv)
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *argv]


MEMORY_CAPS = ("auto", "address-space", "cgroup")


def memory_cap_kind(options) -> str:
    """"cgroup" or "address-space": what ``options.memory_cap`` (a ``runner.GradeOptions``) means on this node."""
    from grading.autograder.sandbox import gpu_devices

    if options.memory_cap not in MEMORY_CAPS:
        raise ValueError(f"memory_cap must be one of {', '.join(MEMORY_CAPS)}, got {options.memory_cap!r}")
    if options.memory_cap != "auto":
        return options.memory_cap
    return "cgroup" if options.backend != "gloo" and gpu_devices() else "address-space"


def worker_cgroup(options, index: int, memory_limit_gib: float) -> MemoryCgroup | None:
    """Worker ``index``'s memory cgroup, or None (no cap, or RLIMIT_AS caps memory). Where the cgroup is
    what caps memory and none can be made: CgroupUnavailable if it was asked for by name; on "auto"
    (a GPU node) the submissions go without a cap, and this says so on stderr."""
    from grading.judge.limits import GIB, PROCESSES_PER_WORKER

    if memory_limit_gib <= 0 or memory_cap_kind(options) != "cgroup":
        return None
    try:
        return MemoryCgroup.create(f"course-grade-{os.getpid()}-{index}", int(memory_limit_gib * PROCESSES_PER_WORKER * GIB))
    except CgroupUnavailable as exc:
        if options.memory_cap == "cgroup":
            raise
        print(f"course grade: no memory cap for the submissions on this GPU node: {exc}", file=sys.stderr, flush=True)
        return None
