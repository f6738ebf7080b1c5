"""Collective benchmarks with nccl-tests' definitions, sizes and column layout.

    from labutils import collectives_bench as cb
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
  elements; sizes whose share is zero elements are skipped.
- ``count`` is the element count passed to the collective: per-rank for all_gather and
  reduce_scatter, per peer for all_to_all.
- time: by default the mean of ``iters`` timed calls on each rank (the loop's time over
  ``iters``, as nccl-tests), then averaged over ranks (nccl-tests' default ``-a 1``;
  ``time_across_ranks`` picks "max", "min" or "rank0" instead). ``stat`` "median" or
  "min" times each call on its own and takes the median or the fastest: on a loaded CPU
  a few stalls dominate the mean, and the median shows the typical call. The record's
  ``stat`` field and the table's header say which was used.
- algbw = S / time; busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather,
  reduce_scatter, all_to_all) or 1 (broadcast, sendrecv). GB/s = 1e9 B/s.
- #wrong: elements that differ from the known answer after one call on known inputs,
  summed over ranks (None when the check is off).

Out-of-place (``oop_*``) and in-place (``ip_*``) columns follow nccl-tests, within what
torch.distributed offers: ``all_reduce`` and ``broadcast`` exist only in place;
``all_to_all_single`` and send/recv only out of place. A mode torch cannot express has
None in its columns ("N/A" in the table).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv")
REDOPS = ("sum", "prod", "max", "min", "avg")
_REDUCE_OP_NAMES = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN", "avg": "AVG"}
TIME_ACROSS_RANKS = ("avg", "max", "min", "rank0")
#: how one rank's ``iters`` call times become one time: nccl-tests' mean, or median / min
STATS = ("mean", "median", "min")
#: nccl-tests' defaults (its README, -n and -w): 20 timed iterations, 5 warm-up, check on.
#: (reference.md says 1 warm-up; the nccl-tests README says 5.)
DEFAULT_ITERS = 20
DEFAULT_WARMUP = 5

_LAUNCH_OPTIONS = ("iters", "warmup", "dtype", "redop", "root", "check", "time_across_ranks", "stat")
_REDUCING_OPS = ("all_reduce", "reduce_scatter")
_ROOTED_OPS = ("broadcast",)
_MODES = ("oop", "ip")
_SIZE_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kKmMgG]?)\s*$")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
#: nccl-tests' type names (its "type" column) by torch dtype name.
_NCCL_TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "float64": "double",
                    "int8": "int8", "uint8": "uint8", "int32": "int32", "int64": "int64"}


def parse_size(text) -> int:
    """Bytes from nccl-tests' size syntax: "8", "64K", "64M", "1G" (K = 1024); an int passes through."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    match = _SIZE_PATTERN.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"bad size {text!r}: write a byte count like 8, 64K, 64M or 1G (K = 1024 bytes)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def message_sizes(min_bytes, max_bytes, factor: int = 2) -> list[int]:
    """min_bytes, min_bytes*factor, ... up to max_bytes (nccl-tests' -b, -e, -f)."""
    low, high = parse_size(min_bytes), parse_size(max_bytes)
    if low < 1:
        raise ValueError(f"the smallest size must be at least 1 byte, got {min_bytes!r}")
    if low > high:
        raise ValueError(f"min size {low} B is larger than max size {high} B: swap -b and -e")
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
        raise ValueError(f"factor must be an integer >= 2, got {factor!r}")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes


def bus_bandwidth_factor(op: str, world_size: int) -> float:
    """busbw / algbw for ``op`` on ``world_size`` ranks (nccl-tests' *GetBw)."""
    _check_op(op)
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def bandwidths(op: str, size_bytes: int, time_s: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one call of ``op`` moving nccl-tests' size S in ``time_s`` seconds."""
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * bus_bandwidth_factor(op, world_size)


@dataclass(frozen=True)
class Layout:
    """Buffers of one benchmark row: element counts per rank and nccl-tests' size and count columns."""

    size: int        # bytes, the "size" column
    count: int       # elements, the "count" column
    send_numel: int  # elements in each rank's send buffer
    recv_numel: int  # elements in each rank's receive buffer


def layout(op: str, requested_bytes: int, itemsize: int, world_size: int) -> Layout:
    """nccl-tests' buffer sizes for ``op`` at a requested size (its GetCollByteCount)."""
    _check_op(op)
    total = requested_bytes // itemsize
    share = total // world_size
    if op == "all_gather":
        return Layout(share * world_size * itemsize, share, share, share * world_size)
    if op == "reduce_scatter":
        return Layout(share * world_size * itemsize, share, share * world_size, share)
    if op == "all_to_all":
        return Layout(share * world_size * itemsize, share, share * world_size, share * world_size)
    return Layout(total * itemsize, total, total, total)


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}: choose one of {', '.join(OPS)}")


def _check_options(op, world_size, dtype="float", redop="sum", root=0, time_across_ranks="avg",
                   iters=DEFAULT_ITERS, warmup=DEFAULT_WARMUP, check=True, stat="mean"):
    """Validate ``run_collective_bench``'s options (no process group needed); return the torch dtype."""
    from labutils.bench import resolve_dtype

    _check_op(op)
    for name, value, least in (("iters", iters, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if not isinstance(check, bool):
        raise ValueError(f"check must be True or False, got {check!r}")
    torch_dtype = resolve_dtype(dtype)
    if op in _REDUCING_OPS:
        if redop not in REDOPS:
            raise ValueError(f"unknown redop {redop!r}: choose one of {', '.join(REDOPS)}")
        if redop == "avg" and not torch_dtype.is_floating_point:
            raise ValueError("redop 'avg' needs a floating dtype (float, half, bfloat16, double)")
    if op == "sendrecv" and world_size < 2:
        raise ValueError("sendrecv needs at least 2 ranks (each rank sends to the next)")
    if op in _ROOTED_OPS and not 0 <= root < world_size:
        raise ValueError(f"root must be a rank between 0 and {world_size - 1}, got {root}")
    if time_across_ranks not in TIME_ACROSS_RANKS:
        raise ValueError(f"time_across_ranks must be one of {', '.join(TIME_ACROSS_RANKS)}, got {time_across_ranks!r}")
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)} (the time over iterations), got {stat!r}")
    return torch_dtype


# ---------------------------------------------------------------------------------------
# Known inputs and the answers they must give
# ---------------------------------------------------------------------------------------

def _pattern(start: int, numel: int, dtype, device):
    """Values (start + i) mod 97 for i < numel: small integers, exact in every dtype."""
    import torch

    return (torch.arange(start, start + numel, device=device) % 97).to(dtype)


def _summand(rank: int, numel: int, dtype, device, offset: int = 0):
    """Rank ``rank``'s input to a reduction: ((i + rank) mod 4) + 1, in 1..4 so sums and products stay exact."""
    import torch

    return ((torch.arange(offset, offset + numel, device=device) + rank) % 4 + 1).to(dtype)


def _reduced(redop: str, world_size: int, numel: int, dtype, device, offset: int = 0):
    """What a reduction of every rank's ``_summand`` gives (ints wrap as the dtype does)."""
    import torch

    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stacked = torch.stack([_summand(r, numel, wide, device, offset) for r in range(world_size)])
    if redop == "sum":
        out = stacked.sum(0)
    elif redop == "avg":
        out = stacked.sum(0) / world_size
    elif redop == "prod":
        out = stacked.prod(0)
    elif redop == "max":
        out = stacked.amax(0)
    else:
        out = stacked.amin(0)
    return out.to(dtype)


def _count_wrong(result, expected) -> int:
    """Elements of ``result`` that differ from ``expected`` (floats: beyond a few ulps)."""
    import torch

    if result.dtype.is_floating_point:
        tolerance = 4 * torch.finfo(result.dtype).eps
        ok = torch.isclose(result.double(), expected.double(), rtol=tolerance, atol=0.0)
    else:
        ok = result == expected
    return int((~ok).sum().item())


# ---------------------------------------------------------------------------------------
# One benchmark case: buffers, the call in each mode, initialisation and the check
# ---------------------------------------------------------------------------------------

class _Case:
    """The buffers of one (op, size) row on this rank, with each mode's call and check."""

    def __init__(self, op, lay: Layout, dtype, redop, root, rank, world_size, device):
        import torch
        import torch.distributed as dist

        self.op, self.lay, self.dtype, self.root = op, lay, dtype, root
        self.rank, self.n, self.device = rank, world_size, device
        self.send = torch.zeros(lay.send_numel, dtype=dtype, device=device)
        self.recv = torch.zeros(lay.recv_numel, dtype=dtype, device=device)
        self.reduce_op = getattr(dist.ReduceOp, _REDUCE_OP_NAMES[redop]) if op in _REDUCING_OPS else None
        self.redop = redop

    def supports(self, mode: str) -> bool:
        if self.op in ("all_reduce", "broadcast"):
            return mode == "ip"
        if self.op in ("all_to_all", "sendrecv"):
            return mode == "oop"
        return True

    def call(self, mode: str) -> Callable[[], None]:
        """A function that runs the collective once in ``mode`` on this case's buffers."""
        import torch.distributed as dist

        op, send, recv, n, rank = self.op, self.send, self.recv, self.n, self.rank
        if op == "all_reduce":
            return lambda: dist.all_reduce(recv, op=self.reduce_op)
        if op == "broadcast":
            return lambda: dist.broadcast(recv, src=self.root)
        if op == "all_gather":
            source = send if mode == "oop" else recv.view(n, -1)[rank]
            return lambda: dist.all_gather_into_tensor(recv, source)
        if op == "reduce_scatter":
            target = recv if mode == "oop" else send.view(n, -1)[rank]
            return lambda: dist.reduce_scatter_tensor(target, send, op=self.reduce_op)
        if op == "all_to_all":
            return lambda: dist.all_to_all_single(recv, send)

        def ring_sendrecv():
            ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
        return ring_sendrecv

    def initialise(self, mode: str) -> None:
        """Fill this rank's input with known values and clear the output."""
        op, lay, rank, n = self.op, self.lay, self.rank, self.n
        self.recv.zero_()
        self.send.zero_()
        if op == "all_reduce":
            self.recv.copy_(_summand(rank, lay.count, self.dtype, self.device))
        elif op == "broadcast":
            if rank == self.root:
                self.recv.copy_(_pattern(0, lay.count, self.dtype, self.device))
        elif op == "all_gather":
            source = self.send if mode == "oop" else self.recv.view(n, -1)[rank]
            source.copy_(_pattern(rank * lay.count, lay.count, self.dtype, self.device))
        elif op == "reduce_scatter":
            self.send.copy_(_summand(rank, lay.send_numel, self.dtype, self.device))
        elif op == "all_to_all":
            self.send.copy_(_pattern(rank * lay.send_numel, lay.send_numel, self.dtype, self.device))
        else:  # sendrecv
            self.send.copy_(_pattern(rank * lay.count, lay.count, self.dtype, self.device))

    def wrong(self, mode: str) -> int:
        """Wrong elements in this rank's output after one call on ``initialise``'s inputs."""
        import torch

        op, lay, rank, n, dtype, device = self.op, self.lay, self.rank, self.n, self.dtype, self.device
        if op == "all_reduce":
            return _count_wrong(self.recv, _reduced(self.redop, n, lay.count, dtype, device))
        if op == "broadcast":
            return _count_wrong(self.recv, _pattern(0, lay.count, dtype, device))
        if op == "all_gather":
            return _count_wrong(self.recv, _pattern(0, lay.recv_numel, dtype, device))
        if op == "reduce_scatter":
            output = self.recv if mode == "oop" else self.send.view(n, -1)[rank]
            expected = _reduced(self.redop, n, lay.count, dtype, device, offset=rank * lay.count)
            return _count_wrong(output, expected)
        if op == "all_to_all":
            # block s of the output is block `rank` of rank s's send buffer
            expected = torch.cat([_pattern(s * lay.send_numel + rank * lay.count, lay.count, dtype, device)
                                  for s in range(n)])
            return _count_wrong(self.recv, expected)
        source = (rank - 1) % n
        return _count_wrong(self.recv, _pattern(source * lay.count, lay.count, dtype, device))


# ---------------------------------------------------------------------------------------
# The core: runs on every rank of an initialised process group
# ---------------------------------------------------------------------------------------

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


def _time_mode(case: _Case, mode: str, iters: int, how: str, stat: str = "mean") -> float:
    """Seconds per call on this rank, combined over ranks (``how``).

    One untimed call, a barrier, then ``iters`` calls. "mean": the whole loop is timed
    and divided by ``iters`` (nccl-tests). "median" / "min": each call is timed on its own,
    synchronising the device after each (on a GPU this removes the overlap between
    consecutive calls that the mean keeps), and the median or fastest is kept.
    """
    import statistics

    import torch.distributed as dist

    run = case.call(mode)
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


def _check_mode(case: _Case, mode: str) -> int:
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


def run_collective_bench(op: str, min_bytes=8, max_bytes="1M", factor: int = 2, *, iters: int = DEFAULT_ITERS,
                         warmup: int = DEFAULT_WARMUP, dtype="float", redop: str = "sum", root: int = 0,
                         check: bool = True, time_across_ranks: str = "avg", stat: str = "mean",
                         device=None) -> list[dict]:
    """Benchmark ``op`` on the default process group, every size from ``min_bytes`` to ``max_bytes``.

    Call it on every rank (it is collective). Sizes take nccl-tests' syntax ("8", "64K",
    "1G"; K = 1024). ``dtype``: "float", "half", "bfloat16", "double", "int32", ... (or a
    torch dtype). ``redop`` applies to all_reduce and reduce_scatter, ``root`` to
    broadcast. ``stat``: "mean" (nccl-tests), "median" or "min" of the ``iters`` call
    times on each rank, before ``time_across_ranks`` combines the ranks.
    ``device`` defaults to this rank's GPU under NCCL, the CPU under gloo.
    Returns one dict per size (the same list on every rank); see the module docstring.
    """
    import torch
    import torch.distributed as dist

    from labutils.bench import dtype_name

    if not dist.is_initialized():
        raise RuntimeError("run_collective_bench needs an initialised process group: "
                           "call it through labutils.launch / collective_bench, or under torchrun")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    torch_dtype = _check_options(op, world_size, dtype, redop, root, time_across_ranks, iters, warmup, check, stat)
    device = _default_device() if device is None else torch.device(device)
    sizes = message_sizes(min_bytes, max_bytes, factor)
    rows = [layout(op, s, torch_dtype.itemsize, world_size) for s in sizes]
    rows = [lay for lay in rows if lay.count > 0]

    def case_for(lay):
        return _Case(op, lay, torch_dtype, redop, root, rank, world_size, device)

    # nccl-tests warms up at the largest size, then at the smallest, before measuring.
    for lay in (rows[-1], rows[0]) if rows else ():
        case = case_for(lay)
        run = case.call("oop" if case.supports("oop") else "ip")
        for _ in range(warmup):
            run()
        _synchronize(device)

    type_name = _NCCL_TYPE_NAMES.get(dtype_name(torch_dtype), dtype_name(torch_dtype))
    records = []
    for lay in rows:
        case = case_for(lay)
        record = {
            "op": op, "world_size": world_size, "backend": dist.get_backend(), "device": device.type,
            "size": lay.size, "count": lay.count, "type": type_name,
            "redop": redop if op in _REDUCING_OPS else "none",
            "root": root if op in _ROOTED_OPS else -1,
            "iters": iters, "warmup": warmup, "time_across_ranks": time_across_ranks, "stat": stat,
        }
        for mode in _MODES:
            time_us = algbw = busbw = wrong = None
            if case.supports(mode):
                case.initialise(mode)
                seconds = _time_mode(case, mode, iters, time_across_ranks, stat)
                time_us = seconds * 1e6
                algbw, busbw = bandwidths(op, lay.size, seconds, world_size)
                wrong = _check_mode(case, mode) if check else None
            record.update({f"{mode}_time_us": time_us, f"{mode}_algbw": algbw,
                           f"{mode}_busbw": busbw, f"{mode}_wrong": wrong})
        records.append(record)
    return records


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
    _check_options(op, world_size, **options)
    message_sizes(min_bytes, max_bytes, factor)
    if pool is not None:
        results = pool.run(run_collective_bench, op, min_bytes, max_bytes, factor, timeout=timeout, **options)
    else:
        from labutils.launch import launch

        results = launch(run_collective_bench, world_size, op, min_bytes, max_bytes, factor,
                         backend=backend, timeout=timeout, **options)
    return results[0]


# ---------------------------------------------------------------------------------------
# Output: nccl-tests' table, and points for an alpha-beta fit
# ---------------------------------------------------------------------------------------

def _time_text(time_us: float) -> str:
    if time_us >= 10000.0:
        return f"{time_us:7.0f}"
    if time_us >= 100.0:
        return f"{time_us:7.1f}"
    return f"{time_us:7.2f}"


def _mode_columns(record: dict, mode: str) -> str:
    time_us = record[f"{mode}_time_us"]
    if time_us is None:
        return "  %7s  %6s  %6s  %5s" % ("N/A", "N/A", "N/A", "N/A")
    wrong = record[f"{mode}_wrong"]
    wrong_text = "%5g" % wrong if wrong is not None else "%5s" % "N/A"
    return "  %7s  %6.2f  %6.2f  %s" % (_time_text(time_us), record[f"{mode}_algbw"], record[f"{mode}_busbw"],
                                        wrong_text)


def _header(first: dict, group: list[dict]) -> list[str]:
    missing = [m for m in _MODES if all(r[f"{m}_time_us"] is None for r in group)]
    lines = [
        f"# labutils collective benchmark: {first['op']} on {first['world_size']} ranks, "
        f"backend {first['backend']} ({first.get('device', '?')})",
        f"# sizes {group[0]['size']} to {group[-1]['size']} B, warmup iters: {first.get('warmup', '?')} "
        f"iters: {first.get('iters', '?')} validation: {int(any(r[f'{m}_wrong'] is not None for r in group for m in _MODES))} "
        f"time: {first.get('stat', 'mean')} over iters, {first.get('time_across_ranks', 'avg')} over ranks",
    ]
    for mode in missing:
        label = "out-of-place" if mode == "oop" else "in-place"
        lines.append(f"# torch.distributed has no {label} {first['op']}: those columns read N/A")
    lines += [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
        % ("", "", "", "", ""),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
        % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
           "time", "algbw", "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]
    return lines


def format_nccl_tests(records: list[dict]) -> str:
    """The records as nccl-tests prints them: '#' header, one row per size, footer.

    Rows are ``size count type redop root`` then ``time algbw busbw #wrong`` out of place
    and again in place; the footer counts failed checks and gives the average busbw of
    every measured column (``# Avg bus bandwidth``). Records of several benchmarks are
    printed one block each.
    """
    if not records:
        raise ValueError("no records to format: every requested size was smaller than one element per rank")
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = (r["op"], r["world_size"], r["backend"], r["type"], r["redop"], r["root"], r.get("stat", "mean"))
        groups.setdefault(key, []).append(r)
    lines = []
    for group in groups.values():
        lines += _header(group[0], group)
        busbws, failures = [], 0
        for r in group:
            root_text = "%6i" % r["root"]
            row = "%12li  %12li  %8s  %6s  %6s" % (r["size"], r["count"], r["type"], r["redop"], root_text)
            lines.append(row + "".join(_mode_columns(r, m) for m in _MODES))
            for mode in _MODES:
                if r[f"{mode}_busbw"] is not None:
                    busbws.append(r[f"{mode}_busbw"])
                if r[f"{mode}_wrong"]:
                    failures += 1
        lines.append(f"# Out of bounds values : {failures} {'FAILED' if failures else 'OK'}")
        lines.append("# Avg bus bandwidth    : %g " % (sum(busbws) / len(busbws)))
        lines.append("#")
    return "\n".join(lines)


def alpha_beta_points(records: list[dict], mode: str | None = None) -> tuple[list[int], list[float]]:
    """(sizes in bytes, times in seconds) of one benchmark, for an alpha-beta fit.

    Sizes are nccl-tests' size column S; times the measured time of one call. ``mode``:
    "oop" or "ip"; by default out-of-place where it was measured, else in-place.
    """
    if not records:
        raise ValueError("no records: run a benchmark first")
    ops = {r["op"] for r in records}
    if len(ops) != 1:
        raise ValueError(f"records of several collectives ({', '.join(sorted(ops))}): pass one collective's records")
    if mode is None:
        mode = "oop" if records[0]["oop_time_us"] is not None else "ip"
    if mode not in _MODES:
        raise ValueError(f"mode must be 'oop' (out-of-place) or 'ip' (in-place), got {mode!r}")
    measured = [r for r in records if r[f"{mode}_time_us"] is not None]
    if not measured:
        raise ValueError(f"{records[0]['op']} has no {mode} measurements: use mode='oop' or 'ip'")
    return [r["size"] for r in measured], [r[f"{mode}_time_us"] * 1e-6 for r in measured]


def fit_alpha_beta(records: list[dict], algorithm: str | None = None, mode: str | None = None, *,
                   weighting: str = "absolute"):
    """``labutils.costmodel.fit_alpha_beta`` on one benchmark's records: alpha (s) and beta (s/B).

    The op and world size come from the records; ``algorithm`` is the cost model's
    ("ring", "rabenseifner", ... for all_reduce; "pairwise" for all_to_all;
    "point_to_point" for sendrecv); by default the op's first in
    ``costmodel.COLLECTIVE_ALGORITHMS`` (ring for all_reduce, all_gather, reduce_scatter
    and broadcast).
    ``weighting`` "relative" fits relative errors, which gets alpha right from a sweep that
    starts at a few bytes (see ``costmodel.fit_alpha_beta``).
    """
    from labutils import costmodel

    sizes, times = alpha_beta_points(records, mode)
    op = records[0]["op"]
    if algorithm is None:
        algorithm = costmodel.COLLECTIVE_ALGORITHMS[op][0]
    return costmodel.fit_alpha_beta(sizes, times, op, algorithm, world_size=records[0]["world_size"],
                                    weighting=weighting)
