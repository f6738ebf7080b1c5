"""The gradient buckets DDP forms, from the parameters' sizes: how many all-reduces a step makes.

``torch.nn.parallel.DistributedDataParallel`` cuts its parameters into buckets with
``torch.distributed._compute_bucket_assignment_by_size`` (``torch/csrc/distributed/c10d/reducer.cpp``):
it walks the parameters in the order their gradients become ready (at construction: the
reverse of ``model.parameters()``; from the second iteration on: the order backward produced
them), adds each one whole to the open bucket, and closes the bucket as soon as it holds *at
least* its cap. So a bucket may end above its cap (by less than its last parameter), a
parameter larger than the cap gets a bucket of its own, and with one cap C for G bytes of
gradients there are at most floor(G / C) + 1 buckets, fewer when parameters are large next to C
(ceil(G / C) is then no count at all: 4 parameters of 0.6 C make 2 buckets, not 3).

Caps (torch 2.13, ``BucketCapacityConfig`` in ``torch/nn/parallel/distributed.py``): with
``bucket_cap_mb`` left at None the first bucket's cap is 1 MiB
(``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``), so the first all-reduce starts early,
and the others 25 MiB; with an explicit ``bucket_cap_mb`` every bucket, the first included,
has that cap.
"""
from __future__ import annotations

import math
from typing import Sequence

MIB = 2**20  #: bytes in a MiB
DDP_FIRST_BUCKET_BYTES = 1 * MIB  #: torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DDP_BUCKET_CAP_MB = 25  #: DistributedDataParallel's default bucket_cap_mb (MiB)


def ddp_bucket_caps(bucket_cap_mb: float | None = None) -> tuple[int, int]:
    """(first bucket's cap, every later bucket's cap), in bytes, as DDP sets them for ``bucket_cap_mb`` (MiB)."""
    if bucket_cap_mb is None:
        return DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_CAP_MB * MIB
    if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) \
            or not math.isfinite(bucket_cap_mb) or bucket_cap_mb <= 0:
        raise ValueError(f"bucket_cap_mb must be a number of MiB > 0 (or None for DDP's default), got {bucket_cap_mb!r}")
    cap = int(bucket_cap_mb * MIB)  # DDP truncates the same way
    return cap, cap


def ddp_bucket_sizes(param_bytes: Sequence[int], bucket_cap_mb: float | None = None) -> list[int]:
    """Bytes of each gradient bucket DDP forms, in the order their all-reduces start.

    ``param_bytes``: each parameter's gradient size in bytes, in the order the gradients become
    ready (for a plain stack of layers: the reverse of ``model.parameters()``); parameters that
    do not require grad are not in DDP's buckets, leave them out. ``bucket_cap_mb``: as passed
    to DDP (MiB; None for its defaults). ``len()`` of the result is the all-reduces per step.
    """
    sizes = list(param_bytes)
    if not sizes:
        raise ValueError("no parameters: pass each gradient's size in bytes")
    if any(isinstance(size, bool) or not isinstance(size, int) or size <= 0 for size in sizes):
        raise ValueError(f"parameter sizes must be whole numbers of bytes > 0, got {sizes!r}")
    cap, later_cap = ddp_bucket_caps(bucket_cap_mb)
    buckets, filled = [], 0
    for size in sizes:
        filled += size
        if filled >= cap:
            buckets.append(filled)
            filled, cap = 0, later_cap
    if filled:
        buckets.append(filled)
    return buckets
