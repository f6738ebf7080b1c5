"""Collective benchmarks with nccl-tests' definitions, sizes and column layout.

    from labutils.measure import collectives_bench as cb
    records = cb.collective_bench("all_reduce", 4, "8", "1M", 2)   # like all_reduce_perf -b 8 -e 1M -f 2 -g 4
    print(cb.format_nccl_tests(records))
    cb.fit_alpha_beta(records)          # alpha (s), beta (s/B) of the ring model, via labutils.costmodel

``run_collective_bench`` is the core: it runs inside an initialised default process group
(called on every rank by ``collective_bench`` through ``labutils.launch`` or a
``labutils.Pool``, or directly under torchrun) and returns the same records on every rank.

Definitions (NVIDIA/nccl-tests, doc/PERFORMANCE.md and src/*.cu):

- ``size`` (bytes) is nccl-tests' size column S: the whole buffer for all_reduce and
  broadcast, the total output (per-rank input x n) for all_gather, the total input
  (per-rank output x n) for reduce_scatter, the per-rank send buffer for all_to_all, the
  message for sendrecv. A requested size is rounded down so each rank's share is whole
  16-byte units for all_gather, reduce_scatter and all_to_all (as NVIDIA/nccl-tests
  src/all_gather.cu etc. align the per-rank count) and whole elements otherwise; sizes
  whose share is zero elements are skipped.
- ``count`` is the element count passed to the collective: per-rank for all_gather and
  reduce_scatter, per peer for all_to_all.
- warm-up: ``warmup`` calls (default 1) at every size before it is timed, as nccl-tests
  does from version 2.18 (earlier versions warmed up 5 times at the largest size only).
- time: by default the mean of ``iters`` timed calls on each rank (the loop's time over
  ``iters``, as nccl-tests), then averaged over ranks (nccl-tests' default ``-a 1``;
  ``time_across_ranks`` picks "max", "min" or "rank0" instead). ``stat`` "median" or
  "min" times each call on its own and takes the median or the fastest: on a loaded CPU
  a few stalls dominate the mean, and the median shows the typical call. The record's
  ``stat`` field and the table's header say which was used.
- algbw = S / time; busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather,
  reduce_scatter, all_to_all) or 1 (broadcast, sendrecv). GB/s = 1e9 B/s.
- #wrong: elements that differ from the known answer after one call on known inputs,
  summed over ranks (None when the check is off). The check runs in chunks against a
  closed-form answer, so it needs no memory beyond the buffers.
- small sizes: a call's time includes torch.distributed's per-call CPU cost, so the
  fitted alpha is above NCCL's own latency (nccl-tests -G captures the loop in a CUDA
  graph to remove it); the table's header and ``fit_alpha_beta``'s result say so.
- each record carries every rank's peak host memory (``peak_rss_bytes``: max RSS above
  the baseline after import), on CUDA also ``peak_cuda_bytes``, and, with GPUs, their
  clocks, power and throttle reasons (``gpu_state``); the table prints them.

Out-of-place (``oop_*``) and in-place (``ip_*``) columns follow nccl-tests, within what
torch.distributed offers: ``all_reduce`` and ``broadcast`` exist only in place;
``all_to_all_single`` and send/recv only out of place. A mode torch cannot express has
None in its columns ("N/A" in the table).
"""
from __future__ import annotations

import sys
import time

from labutils.measure._collectives_check import Case
from labutils.measure._collectives_layout import (
    DEFAULT_ITERS,
    DEFAULT_WARMUP,
    MODES,
    NCCL_TESTS_VERSION,
    OPS,
    REDOPS,
    REDUCING_OPS,
    ROOTED_OPS,
    SHARE_ALIGNMENT_BYTES,
    STATS,
    TIME_ACROSS_RANKS,
    Layout,
    bandwidths,
    bus_bandwidth_factor,
    check_options,
    layout,
    message_sizes,
    parse_size,
)
from labutils.measure._collectives_report import (
    ALPHA_NOTE,
    MeasuredAlphaBetaFit,
    alpha_beta_points,
    fit_alpha_beta,
    format_nccl_tests,
)

__all__ = [
    "ALPHA_NOTE", "DEFAULT_ITERS", "DEFAULT_WARMUP", "NCCL_TESTS_VERSION", "OPS", "REDOPS",
    "SHARE_ALIGNMENT_BYTES", "STATS", "TIME_ACROSS_RANKS", "Layout", "MeasuredAlphaBetaFit",
    "alpha_beta_points", "bandwidths", "bus_bandwidth_factor", "collective_bench", "fit_alpha_beta",
    "format_nccl_tests", "layout", "message_sizes", "parse_size", "run_collective_bench",
]

_LAUNCH_OPTIONS = ("iters", "warmup", "dtype", "redop", "root", "check", "time_across_ranks", "stat")
#: nccl-tests' type names (its "type" column) by torch dtype name.
_NCCL_TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
                    "int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64"}


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _across_ranks(value: float, how: str, device) -> float:
    """Combine one float per rank: "avg", "max", "min" or rank 0's value."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    if how == "rank0":
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t, op={"avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[how])
        if how == "avg":
            t /= dist.get_world_size()
    return float(t.item())


def _total_over_ranks(value: int, device) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t)
    return int(t.item())


def _time_mode(case: Case, mode: str, iters: int, how: str, stat: str = "mean", warmup: int = 1) -> float:
    """Seconds per call on this rank, combined over ranks (``how``).

    ``warmup`` untimed calls, a barrier, then ``iters`` calls. "mean": the whole loop is
    timed and divided by ``iters`` (nccl-tests). "median" / "min": each call is timed on its own,
    synchronising the device after each (on a GPU this removes the overlap between
    consecutive calls that the mean keeps), and the median or fastest is kept.
    """
    import statistics

    import torch.distributed as dist

    run = case.call(mode)
    for _ in range(warmup):
        run()
    _synchronize(case.device)
    dist.barrier()
    if stat == "mean":
        start = time.perf_counter()
        for _ in range(iters):
            run()
        _synchronize(case.device)
        seconds = (time.perf_counter() - start) / iters
    else:
        per_call = []
        for _ in range(iters):
            start = time.perf_counter()
            run()
            _synchronize(case.device)
            per_call.append(time.perf_counter() - start)
        seconds = statistics.median(per_call) if stat == "median" else min(per_call)
    return _across_ranks(seconds, how, case.device)


def _check_mode(case: Case, mode: str) -> int:
    """Wrong elements summed over ranks after one call on known inputs."""
    case.initialise(mode)
    case.call(mode)()
    _synchronize(case.device)
    return _total_over_ranks(case.wrong(mode), case.device)


def _default_device():
    import torch
    import torch.distributed as dist

    from labutils import rank as rank_info

    if dist.get_backend() != "nccl":
        return torch.device("cpu")
    device = rank_info.device()
    return device if device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())


def _max_rss_bytes() -> int:
    """This process's peak resident memory so far, in bytes (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _per_rank(value: int, device) -> list[int]:
    """Every rank's ``value``, in rank order (the same list on every rank)."""
    import torch
    import torch.distributed as dist

    values = torch.zeros(dist.get_world_size(), dtype=torch.int64, device=device)
    values[dist.get_rank()] = value
    dist.all_reduce(values)
    return [int(v) for v in values.tolist()]


def _memory_and_state(device, baseline_rss: int) -> dict:
    """Peak memory of every rank, and on CUDA the GPUs' clocks, power and throttle reasons."""
    extra = {"peak_rss_bytes": _per_rank(max(0, _max_rss_bytes() - baseline_rss), device)}
    if device.type == "cuda":
        import torch

        from labutils.machine.gpu_state import gpu_state

        extra["peak_cuda_bytes"] = _per_rank(torch.cuda.max_memory_allocated(device), device)
        extra["gpu_state"] = gpu_state()
    return extra


def _measure_row(case: Case, settings: dict) -> dict:
    """One row's columns: time, algbw, busbw and #wrong in each mode (None where torch has no such mode)."""
    columns = {}
    for mode in MODES:
        time_us = algbw = busbw = wrong = None
        if case.supports(mode):
            case.initialise(mode)
            seconds = _time_mode(case, mode, settings["iters"], settings["time_across_ranks"], settings["stat"],
                                 settings["warmup"])
            time_us = seconds * 1e6
            algbw, busbw = bandwidths(case.op, case.lay.size, seconds, case.n)
            wrong = _check_mode(case, mode) if settings["check"] else None
        columns.update({f"{mode}_time_us": time_us, f"{mode}_algbw": algbw,
                        f"{mode}_busbw": busbw, f"{mode}_wrong": wrong})
    return columns


def _row(op, lay: Layout, torch_dtype, settings: dict, device) -> dict:
    """Benchmark one size; its buffers are freed when this returns, before the next size's exist."""
    import torch.distributed as dist

    from labutils.measure.bench import dtype_name

    world_size, rank = dist.get_world_size(), dist.get_rank()
    case = Case(op, lay, torch_dtype, settings["redop"], settings["root"], rank, world_size, device)
    record = {
        "op": op, "world_size": world_size, "backend": dist.get_backend(), "device": device.type,
        "size": lay.size, "count": lay.count,
        "type": _NCCL_TYPE_NAMES.get(dtype_name(torch_dtype), dtype_name(torch_dtype)),
        "redop": settings["redop"] if op in REDUCING_OPS else "none",
        "root": settings["root"] if op in ROOTED_OPS else -1,
        **{key: settings[key] for key in ("iters", "warmup", "time_across_ranks", "stat")},
    }
    record.update(_measure_row(case, settings))
    return record


def run_collective_bench(op: str, min_bytes=8, max_bytes="1M", factor: int = 2, *, iters: int = DEFAULT_ITERS,
                         warmup: int = DEFAULT_WARMUP, dtype="float", redop: str = "sum", root: int = 0,
                         check: bool = True, time_across_ranks: str = "avg", stat: str = "mean",
                         device=None) -> list[dict]:
    """Benchmark ``op`` on the default process group, every size from ``min_bytes`` to ``max_bytes``.

    Call it on every rank (it is collective). Sizes take nccl-tests' syntax ("8", "64K",
    "1G"; K = 1024). ``dtype``: "float", "half", "bfloat16", "double", "int32", ... (or a
    torch dtype). ``redop`` applies to all_reduce and reduce_scatter, ``root`` to
    broadcast. ``warmup``: untimed calls at every size (nccl-tests >= 2.18). ``stat``:
    "mean" (nccl-tests), "median" or "min" of the ``iters`` call times on each rank, before
    ``time_across_ranks`` combines the ranks. ``device`` defaults to this rank's GPU under
    NCCL, the CPU under gloo. Returns one dict per size (the same list on every rank); see
    the module docstring.
    """
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError("run_collective_bench needs an initialised process group: "
                           "call it through labutils.launch / collective_bench, or under torchrun")
    world_size = dist.get_world_size()
    torch_dtype = check_options(op, world_size, dtype, redop, root, time_across_ranks, iters, warmup, check, stat)
    device = _default_device() if device is None else torch.device(device)
    baseline_rss = _max_rss_bytes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    settings = {"iters": iters, "warmup": warmup, "redop": redop, "root": root, "check": check,
                "time_across_ranks": time_across_ranks, "stat": stat}
    layouts = [layout(op, s, torch_dtype.itemsize, world_size) for s in message_sizes(min_bytes, max_bytes, factor)]
    records = [_row(op, lay, torch_dtype, settings, device) for lay in layouts if lay.count > 0]
    extra = _memory_and_state(device, baseline_rss)
    return [{**record, **extra} for record in records]


def collective_bench(op: str, world_size: int = 2, min_bytes=8, max_bytes="1M", factor: int = 2, *,
                     pool=None, backend: str = "auto", timeout: float | None = 120, **options) -> list[dict]:
    """Run ``run_collective_bench`` on ``world_size`` new ranks (or on a ``labutils.Pool``'s ranks).

    ``options`` are ``run_collective_bench``'s keywords but ``device`` (each rank uses its
    own): iters, warmup, dtype, redop, root, check, time_across_ranks, stat.
    ``timeout``: seconds before the ranks are stopped. Returns rank 0's records.
    """
    if pool is not None:
        world_size = pool.world_size
    unknown = sorted(set(options) - set(_LAUNCH_OPTIONS))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}: use {', '.join(_LAUNCH_OPTIONS)}")
    check_options(op, world_size, **options)
    message_sizes(min_bytes, max_bytes, factor)
    if pool is not None:
        results = pool.run(run_collective_bench, op, min_bytes, max_bytes, factor, timeout=timeout, **options)
    else:
        from labutils.ranks.launch import launch

        results = launch(run_collective_bench, world_size, op, min_bytes, max_bytes, factor,
                         backend=backend, timeout=timeout, **options)
    return results[0]
