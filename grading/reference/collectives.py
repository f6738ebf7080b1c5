"""Ring collectives from point-to-point messages (Patarasuk and Yuan 2009; MPICH allreduce_intra_ring.c).

A ring all-reduce of a buffer of S bytes on n ranks is a reduce-scatter followed by an
all-gather, each n - 1 steps in which every rank sends one chunk to its right neighbour and
receives one from its left neighbour:

    chunks:   [ c0 | c1 | c2 | c3 ]          n = 4, sizes differ by at most 1 (tensor_split)

    reduce-scatter, step s: rank r sends chunk (r - s - 1) mod n to r + 1,
                            receives chunk (r - s - 2) mod n from r - 1 and adds it in;
                            after n - 1 steps rank r holds chunk r summed over every rank.
    all-gather,     step s: rank r sends chunk (r - s) mod n to r + 1,
                            receives chunk (r - s - 1) mod n from r - 1 and copies it in.

Each rank sends 2 (n - 1) chunks of S / n bytes, 2 (n - 1) / n x S in all: the bandwidth
term of the all-reduce lower bound, hence nccl-tests' busbw = algbw x 2 (n - 1) / n.

Every function takes its ``group`` explicitly. Peers are named by their *global* rank, as
``torch.distributed`` wants them (``dist.get_global_rank``). Sends and receives of a step are
posted together (``isend``/``irecv``), so that no rank blocks in a send while its neighbour
blocks in its own: gloo's blocking ``send`` waits for the matching ``recv``.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist


def chunk_bounds(numel: int, world_size: int) -> list:
    """[(start, stop)] of the n chunks of a flat buffer of ``numel`` elements (torch.tensor_split):
    the first ``numel % n`` chunks hold one element more; chunks may be empty when numel < n."""
    base, extra = divmod(numel, world_size)
    bounds, start = [], 0
    for index in range(world_size):
        stop = start + base + (1 if index < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def ring_neighbours(group) -> tuple:
    """(global rank of the right neighbour r + 1, global rank of the left neighbour r - 1)."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    right = dist.get_global_rank(group, (rank + 1) % world_size)
    left = dist.get_global_rank(group, (rank - 1) % world_size)
    return right, left


def send_and_receive(send_buffer: torch.Tensor, dst: int, recv_buffer: torch.Tensor, src: int, group) -> None:
    """One ring step: send ``send_buffer`` to global rank ``dst`` while receiving ``recv_buffer`` from ``src``."""
    requests = [dist.isend(send_buffer, dst, group=group), dist.irecv(recv_buffer, src, group=group)]
    for request in requests:
        request.wait()


def ring_reduce_scatter(flat: torch.Tensor, group) -> torch.Tensor:
    """Sum a 1-D buffer over the ranks of ``group``, chunk by chunk; return this rank's chunk.

    ``flat`` is overwritten with partial sums; on return, chunk r (``chunk_bounds``) of rank r
    holds the sum of every rank's chunk r, and the returned tensor is that chunk (a view).
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    bounds = chunk_bounds(flat.numel(), world_size)
    right, left = ring_neighbours(group)
    for step in range(world_size - 1):
        send_start, send_stop = bounds[(rank - step - 1) % world_size]
        recv_start, recv_stop = bounds[(rank - step - 2) % world_size]
        incoming = torch.empty(recv_stop - recv_start, dtype=flat.dtype, device=flat.device)
        send_and_receive(flat[send_start:send_stop], right, incoming, left, group)
        flat[recv_start:recv_stop] += incoming
    start, stop = bounds[rank]
    return flat[start:stop]


def ring_all_gather(flat: torch.Tensor, group) -> torch.Tensor:
    """Fill every chunk of a 1-D buffer from the rank that owns it (chunk r from rank r), in place."""
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    bounds = chunk_bounds(flat.numel(), world_size)
    right, left = ring_neighbours(group)
    for step in range(world_size - 1):
        send_start, send_stop = bounds[(rank - step) % world_size]
        recv_start, recv_stop = bounds[(rank - step - 1) % world_size]
        incoming = torch.empty(recv_stop - recv_start, dtype=flat.dtype, device=flat.device)
        send_and_receive(flat[send_start:send_stop], right, incoming, left, group)
        flat[recv_start:recv_stop] = incoming
    return flat


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    """The sum of ``tensor`` over the ranks of ``group`` (a new tensor, same shape and dtype):
    ring reduce-scatter, then ring all-gather, on a flat copy."""
    flat = tensor.detach().reshape(-1).clone()
    ring_reduce_scatter(flat, group)
    ring_all_gather(flat, group)
    return flat.view(tensor.shape)


def bus_bandwidth(op: str, size_bytes: float, time_s: float, world_size: int) -> tuple:
    """(algbw, busbw) in GB/s (1e9 B/s), nccl-tests' definitions (doc/PERFORMANCE.md).

    algbw = S / t with S nccl-tests' size (the whole buffer for all_reduce, the total
    n x per-rank size for all_gather and reduce_scatter); busbw = algbw x 2 (n - 1) / n for
    all_reduce, x (n - 1) / n for all_gather and reduce_scatter.
    """
    factors = {"all_reduce": 2 * (world_size - 1) / world_size,
               "all_gather": (world_size - 1) / world_size,
               "reduce_scatter": (world_size - 1) / world_size}
    if op not in factors:
        raise ValueError(f"op must be one of {', '.join(factors)}, got {op!r}")
    if time_s <= 0:
        raise ValueError(f"time_s must be positive, got {time_s}")
    algbw = size_bytes / time_s / 1e9
    return algbw, algbw * factors[op]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_ring_all_reduce(numel: int, dtype: torch.dtype, iters: int, warmup: int, group) -> tuple:
    """Time ``ring_all_reduce`` of ``numel`` elements: ``warmup`` untimed calls, then ``iters``
    timed ones. Returns (mean seconds per call, algbw GB/s, busbw GB/s)."""
    from labutils.ranks.rank import device

    buffer = torch.ones(numel, dtype=dtype, device=device())
    for _ in range(warmup):
        ring_all_reduce(buffer, group)
    _synchronize(buffer.device)
    start = time.perf_counter()
    for _ in range(iters):
        ring_all_reduce(buffer, group)
    _synchronize(buffer.device)
    time_s = (time.perf_counter() - start) / iters
    algbw, busbw = bus_bandwidth("all_reduce", numel * buffer.element_size(), time_s, dist.get_world_size(group))
    return time_s, algbw, busbw
