"""nccl-tests' sizes and bandwidth definitions, and the benchmark's options, without a process group.

Re-exported by :mod:`labutils.measure.collectives_bench`; see its docstring for the definitions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv")
REDOPS = ("sum", "prod", "max", "min", "avg")
REDUCE_OP_NAMES = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN", "avg": "AVG"}
TIME_ACROSS_RANKS = ("avg", "max", "min", "rank0")
#: how one rank's ``iters`` call times become one time: nccl-tests' mean, or median / min
STATS = ("mean", "median", "min")
#: nccl-tests' defaults (NVIDIA/nccl-tests README, -n and -w, from version 2.18 on): 20 timed
#: iterations, 1 warm-up iteration at every size, check on.
DEFAULT_ITERS = 20
DEFAULT_WARMUP = 1
#: the nccl-tests version whose warm-up and per-rank alignment this module follows
NCCL_TESTS_VERSION = "2.18"
#: bytes each rank's share is rounded down to (NVIDIA/nccl-tests src/all_gather.cu,
#: src/reduce_scatter.cu, src/alltoall.cu: GetCollByteCount aligns the per-rank count)
SHARE_ALIGNMENT_BYTES = 16

REDUCING_OPS = ("all_reduce", "reduce_scatter")
ROOTED_OPS = ("broadcast",)
MODES = ("oop", "ip")
_SIZE_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kKmMgG]?)\s*$")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


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
    """nccl-tests' buffer sizes for ``op`` at a requested size (its GetCollByteCount).

    all_gather, reduce_scatter and all_to_all split the buffer into one share per rank and
    round each share down to whole 16-byte units (4 float32 elements), as nccl-tests does,
    so the size column is ``share x n x itemsize``; all_reduce, broadcast and sendrecv use
    the whole count.
    """
    _check_op(op)
    total = requested_bytes // itemsize
    per_unit = max(1, SHARE_ALIGNMENT_BYTES // itemsize)
    share = total // world_size // per_unit * per_unit
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


def check_options(op, world_size, dtype="float", redop="sum", root=0, time_across_ranks="avg",
                   iters=DEFAULT_ITERS, warmup=DEFAULT_WARMUP, check=True, stat="mean"):
    """Validate ``run_collective_bench``'s options (no process group needed); return the torch dtype."""
    from labutils.measure.bench import resolve_dtype

    _check_op(op)
    for name, value, least in (("iters", iters, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if not isinstance(check, bool):
        raise ValueError(f"check must be True or False, got {check!r}")
    torch_dtype = resolve_dtype(dtype)
    if op in REDUCING_OPS:
        if redop not in REDOPS:
            raise ValueError(f"unknown redop {redop!r}: choose one of {', '.join(REDOPS)}")
        if redop == "avg" and not torch_dtype.is_floating_point:
            raise ValueError("redop 'avg' needs a floating dtype (float, half, bfloat16, double)")
    if op == "sendrecv" and world_size < 2:
        raise ValueError("sendrecv needs at least 2 ranks (each rank sends to the next)")
    if op in ROOTED_OPS and not 0 <= root < world_size:
        raise ValueError(f"root must be a rank between 0 and {world_size - 1}, got {root}")
    if time_across_ranks not in TIME_ACROSS_RANKS:
        raise ValueError(f"time_across_ranks must be one of {', '.join(TIME_ACROSS_RANKS)}, got {time_across_ranks!r}")
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)} (the time over iterations), got {stat!r}")
    return torch_dtype

