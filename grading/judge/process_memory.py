"""The memory a rank's process holds, however it holds it: heap in use, resident anonymous pages,
files in its private folder. State kept anywhere counts here, not only tensors a walk can name.

A Python walk (``held_memory``) sees tensors; it does not see a NumPy array, a bare
``torch.UntypedStorage``, a ``bytearray``, an anonymous ``mmap`` or a file. This module measures
the process instead (Linux, glibc):

- ``heap``: bytes the C allocator has handed out and not yet taken back (glibc's ``mallinfo2``:
  ``uordblks`` in its arenas plus ``hblkhd`` in blocks of their own). CPU tensors and storages
  (torch's CPU allocator is ``posix_memalign``), NumPy arrays, large Python objects and the
  item arrays of every container live there;
- ``resident``: anonymous and shared pages the process has touched (``RssAnon + RssShmem`` in
  ``/proc/self/status``): memory mapped outside the allocator;
- ``files``: bytes of the files under the rank's private folder (the only folder a judge's rank
  may write, ``rank_isolation.isolate``'s).

``steady()`` first sets glibc to give freed blocks back to the system at once (a fixed mmap
threshold of 64 KiB, no trim threshold), so that resident bytes follow what is held, not what was
once used. Growth is measured between two ``measure()`` calls; units are bytes.
"""
from __future__ import annotations

import ctypes
import gc
import os
from typing import NamedTuple

#: glibc's mallopt parameters (malloc.h): M_TRIM_THRESHOLD, M_MMAP_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks from this size on get pages of their own, given back when freed (bytes).
MMAP_THRESHOLD_BYTES = 64 * 1024


def _libc():
    """The C library the process runs on (glibc), found among what is loaded: no ``ldconfig`` to run,
    as ``ctypes.util.find_library`` would at every call (a fork of the whole rank each time)."""
    return ctypes.CDLL(None)


def _heap_in_use() -> int:
    """glibc's mallinfo2(): uordblks (bytes in use in the arenas) + hblkhd (in blocks of their own).
    The structure is made here, at the call: the judge's ranks receive this module's functions by value."""
    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    mallinfo2 = _libc().mallinfo2
    mallinfo2.restype = Mallinfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd


class ProcessMemory(NamedTuple):
    """Bytes a process holds: C heap in use, resident anonymous and shared pages, its private files."""

    heap: int
    resident: int
    files: int

    def growth_since(self, before: "ProcessMemory") -> int:
        """Bytes held now beyond ``before``: the larger of the heap's and the resident pages' growth
        (the same buffer shows in both), plus the private files' growth."""
        return max(self.heap - before.heap, self.resident - before.resident, 0) + max(self.files - before.files, 0)


def steady() -> None:
    """Make freed memory go back to the system at once (glibc), so resident bytes follow held bytes."""
    libc = _libc()
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    libc.mallopt(_M_TRIM_THRESHOLD, 0)


def _resident_bytes() -> int:
    total = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("RssAnon:", "RssShmem:")):
                total += int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
    return total


def _folder_bytes(folder: str | None) -> int:
    total = 0
    for root, _, files in os.walk(folder) if folder else ():
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while we looked
                pass
    return total


def measure(private_folder: str | None = None) -> ProcessMemory:
    """This process's memory now, after a full garbage collection; ``private_folder``: the folder
    whose files count as the process's (a judge's rank: the one it alone may write; None: no files)."""
    gc.collect()
    return ProcessMemory(_heap_in_use(), _resident_bytes(), _folder_bytes(private_folder))
