"""Timing on a GPU with CUDA events: batches long enough to hide launch cost, cold calls
timed one by one, and the same number of calls on every rank.

Two rules keep these numbers honest and a multi-rank timing from hanging:

- **Cold calls are cold.** When the working set fits in L2, a flush runs before *every*
  timed call and each call sits between its own pair of events (the flush kernel is long
  enough that the next launches queue behind it, so launch cost is still hidden). Flushing
  once per batch would leave every call but the first reading L2, and a 16 MiB copy on an
  H100 (50 MiB L2) would report L2 bandwidth as HBM bandwidth.
- **Every rank runs the same calls.** The calls per sample are chosen from one timing of
  the function, which differs from rank to rank. If the function holds a collective (a DDP
  step, a tensor-parallel layer, an all-reduce), ranks that chose different counts issue
  different numbers of collectives and NCCL waits forever. Inside a process group the count
  is therefore either agreed (the largest of every rank's choice, one all-reduce over
  ``group``, which every rank of that group must pass) or, without ``group``, fixed at one
  call per sample on every rank whatever its timing.

Units: seconds; bytes for the working set and the L2 size.
"""
from __future__ import annotations

import math

import torch

#: a timed batch lasts at least this long on a GPU: 200 x a kernel launch of about 5 us, so
#: the launch cost and the event resolution (about 0.5 us) are below 1% of what is timed
MIN_BATCH_S = 1e-3
#: at most this many calls per batch (a very short op is still timed in reasonable time)
MAX_CALLS_PER_BATCH = 1000
#: L2 cache assumed when torch does not report it: 50 MB on an H100 SXM (NVIDIA H100 Tensor
#: Core GPU datasheet / Hopper architecture whitepaper)
DEFAULT_L2_BYTES = 50 * 2**20


def calls_per_batch(one_call_s: float, min_batch_s: float = MIN_BATCH_S,
                    max_calls: int = MAX_CALLS_PER_BATCH) -> int:
    """Calls to time between one pair of CUDA events so the batch lasts at least ``min_batch_s``."""
    if one_call_s <= 0:
        return max_calls
    return max(1, min(max_calls, math.ceil(min_batch_s / one_call_s)))


def l2_cache_bytes(device: torch.device) -> int:
    """The GPU's L2 cache in bytes (``L2_cache_size`` of its properties; 50 MiB if not reported)."""
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
    return int(size) if size else DEFAULT_L2_BYTES


def in_process_group() -> bool:
    """True inside a rank whose default process group is initialised."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def agreed_calls(local_calls: int, device: torch.device, group=None) -> int:
    """The calls per sample every rank uses: ``local_calls`` outside a process group; inside
    one, the largest of every rank's ``local_calls`` over ``group`` (one MAX all-reduce that
    every rank of ``group`` passes), or 1 on every rank when no ``group`` is given."""
    if not in_process_group():
        return local_calls
    if group is None:
        return 1
    import torch.distributed as dist

    count = torch.tensor([local_calls], dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX, group=group)
    return int(count.item())


def _one_call_s(fn, start, end) -> float:
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3  # ms -> s


def _warm_sample(fn, start, end, calls: int) -> float:
    """Seconds per call of ``calls`` back-to-back calls between one pair of events."""
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / calls


def _cold_sample(fn, flush: torch.Tensor, pairs) -> float:
    """Seconds per call of ``len(pairs)`` calls, L2 flushed before each, each between its own events."""
    for start, end in pairs:
        flush.zero_()  # evicts the working set from L2, outside this call's events
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return sum(start.elapsed_time(end) for start, end in pairs) / 1e3 / len(pairs)


def cuda_samples(fn, device: torch.device, iters: int, working_set_bytes: int | None, group=None):
    """``iters`` samples of ``fn`` on ``device``: (seconds per call of each sample, calls per sample).

    Cold (L2 flushed before every call, each call timed alone) when ``working_set_bytes``
    fits in L2; warm batches otherwise. The calls per sample follow :func:`agreed_calls`.
    """
    def event():
        return torch.cuda.Event(enable_timing=True)

    with torch.cuda.device(device):
        start, end = event(), event()
        calls = agreed_calls(calls_per_batch(_one_call_s(fn, start, end)), device, group)
        l2 = l2_cache_bytes(device)
        if working_set_bytes is None or working_set_bytes > l2:
            return [_warm_sample(fn, start, end, calls) for _ in range(iters)], calls
        flush = torch.empty(2 * l2, dtype=torch.uint8, device=device)
        pairs = [(event(), event()) for _ in range(calls)]
        return [_cold_sample(fn, flush, pairs) for _ in range(iters)], calls
