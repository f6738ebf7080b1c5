"""A cap on the memory of each grading process, so that a submission that allocates without end
fails with an allocation error in its own process (a zero for that part) instead of waking the
machine's out-of-memory killer, which may pick another student's kernel or the grader.

The cap is RLIMIT_DATA (Linux counts every private writable mapping: the heap, malloc's and
torch's large allocations), set as both soft and hard limit, so student code cannot raise it
again. It is per process and inherited: set in the autograde worker it covers every kernel that
worker starts and their ranks; set in the judge, the judge's ranks. CUDA's device memory is not
host memory and is not counted; pinned host buffers are.
"""
from __future__ import annotations

import os
import resource

GIB = 2**30
#: The default cap stays between these (GiB per process). A rank of the labs' hidden tests uses
#: about 0.25 GiB of data memory (torch, gloo and the test's tensors), a kernel about twice that.
MIN_DEFAULT_GIB, MAX_DEFAULT_GIB = 1.0, 8.0
#: Processes of one worker that may fill their cap at once: the kernel, the visible check's ranks
#: and the judge's 4 ranks (7), rounded up.
PROCESSES_PER_WORKER = 8


def total_memory_bytes() -> int:
    """This machine's physical memory, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_memory_limit_gib(workers: int) -> float:
    """The machine's memory shared by every process of every worker that could fill its cap at once
    (an eighth of it per worker on 2 cores' 2 workers), between 1 and 8 GiB per process."""
    share = total_memory_bytes() / GIB / (PROCESSES_PER_WORKER * max(1, workers))
    return max(MIN_DEFAULT_GIB, min(MAX_DEFAULT_GIB, share))


def limit_memory(gib: float) -> None:
    """Cap this process's data memory (and that of every child it starts later) at ``gib`` GiB; 0: no cap.

    Never raises an existing lower hard limit."""
    if gib <= 0:
        return
    limit = int(gib * GIB)
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
