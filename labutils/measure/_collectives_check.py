"""One benchmark case of :mod:`labutils.measure.collectives_bench`: its buffers, the call in each mode,
known inputs, and a check of the output against a closed-form answer.

Memory stays O(buffer): inputs are written and outputs checked in chunks of
:data:`CHUNK_ELEMENTS`, the answer of a reduction comes from a four-entry table (every
rank's input repeats with period 4), and only the ops that read a send buffer allocate one
(all_reduce and broadcast run in place on one buffer).
"""
from __future__ import annotations

from typing import Callable

from labutils.measure._collectives_layout import REDUCE_OP_NAMES, REDUCING_OPS, Layout

#: elements written or checked at a time (4 Mi elements: 32 MiB of int64 indices)
CHUNK_ELEMENTS = 1 << 22
#: period of every rank's reduction input: ((i + rank) mod 4) + 1
_PERIOD = 4


def _chunks(numel: int):
    """(start, length) pieces covering ``numel`` elements."""
    for start in range(0, numel, CHUNK_ELEMENTS):
        yield start, min(CHUNK_ELEMENTS, numel - start)


def pattern(start: int, numel: int, dtype, device):
    """Values (start + i) mod 97 for i < numel: small integers, exact in every dtype."""
    import torch

    return (torch.arange(start, start + numel, device=device) % 97).to(dtype)


def summand(rank: int, numel: int, dtype, device, offset: int = 0):
    """Rank ``rank``'s input to a reduction: ((i + rank) mod 4) + 1, in 1..4 so sums and products stay exact."""
    import torch

    return ((torch.arange(offset, offset + numel, device=device) + rank) % _PERIOD + 1).to(dtype)


def reduction_table(redop: str, world_size: int, dtype, device):
    """The reduction of every rank's :func:`summand` at the 4 positions i mod 4 (ints wrap as the dtype does)."""
    import torch

    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stacked = torch.stack([summand(r, _PERIOD, wide, device) for r in range(world_size)])
    if redop in ("sum", "avg"):
        out = stacked.sum(0) / world_size if redop == "avg" else stacked.sum(0)
    elif redop == "prod":
        out = stacked.prod(0)
    else:
        out = stacked.amax(0) if redop == "max" else stacked.amin(0)
    return out.to(dtype)


def reduced(table, start: int, numel: int):
    """The expected reduction at global positions start .. start + numel - 1, from ``table``."""
    import torch

    return table[torch.arange(start, start + numel, device=table.device) % _PERIOD]


def fill(target, values: Callable[[int, int], object]) -> None:
    """Write ``values(start, length)`` into each chunk of the 1-D ``target``."""
    for start, length in _chunks(target.numel()):
        target[start:start + length].copy_(values(start, length))


def count_wrong(result, expected: Callable[[int, int], object]) -> int:
    """Elements of the 1-D ``result`` that differ from ``expected(start, length)``, chunk by chunk
    (floats: beyond a few ulps)."""
    import torch

    wrong = 0
    for start, length in _chunks(result.numel()):
        got, want = result[start:start + length], expected(start, length)
        if got.dtype.is_floating_point:
            tolerance = 4 * torch.finfo(got.dtype).eps
            ok = torch.isclose(got.double(), want.double(), rtol=tolerance, atol=0.0)
        else:
            ok = got == want
        wrong += int((~ok).sum().item())
    return wrong


class Case:
    """The buffers of one (op, size) row on this rank, with each mode's call and check."""

    def __init__(self, op, lay: Layout, dtype, redop, root, rank, world_size, device):
        import torch
        import torch.distributed as dist

        self.op, self.lay, self.dtype, self.root = op, lay, dtype, root
        self.rank, self.n, self.device = rank, world_size, device
        in_place_only = op in ("all_reduce", "broadcast")
        self.send = None if in_place_only else torch.zeros(lay.send_numel, dtype=dtype, device=device)
        self.recv = torch.zeros(lay.recv_numel, dtype=dtype, device=device)
        self.reduce_op = getattr(dist.ReduceOp, REDUCE_OP_NAMES[redop]) if op in REDUCING_OPS else None
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
        op, lay, rank, n, dtype, device = self.op, self.lay, self.rank, self.n, self.dtype, self.device
        self.recv.zero_()
        if self.send is not None:
            self.send.zero_()
        if op == "all_reduce":
            fill(self.recv, lambda start, length: summand(rank, length, dtype, device, start))
        elif op == "broadcast":
            if rank == self.root:
                fill(self.recv, lambda start, length: pattern(start, length, dtype, device))
        elif op == "all_gather":
            source = self.send if mode == "oop" else self.recv.view(n, -1)[rank]
            fill(source, lambda start, length: pattern(rank * lay.count + start, length, dtype, device))
        elif op == "reduce_scatter":
            fill(self.send, lambda start, length: summand(rank, length, dtype, device, start))
        elif op == "all_to_all":
            fill(self.send, lambda start, length: pattern(rank * lay.send_numel + start, length, dtype, device))
        else:  # sendrecv
            fill(self.send, lambda start, length: pattern(rank * lay.count + start, length, dtype, device))

    def wrong(self, mode: str) -> int:
        """Wrong elements in this rank's output after one call on ``initialise``'s inputs."""
        op, lay, rank, n, dtype, device = self.op, self.lay, self.rank, self.n, self.dtype, self.device
        if op in REDUCING_OPS:
            table = reduction_table(self.redop, n, dtype, device)
            if op == "all_reduce":
                return count_wrong(self.recv, lambda start, length: reduced(table, start, length))
            output = self.recv if mode == "oop" else self.send.view(n, -1)[rank]
            return count_wrong(output, lambda start, length: reduced(table, rank * lay.count + start, length))
        if op in ("broadcast", "all_gather"):
            return count_wrong(self.recv, lambda start, length: pattern(start, length, dtype, device))
        if op == "all_to_all":
            # block s of the output is block `rank` of rank s's send buffer
            blocks = self.recv.view(n, -1)
            return sum(
                count_wrong(blocks[s], lambda start, length, s=s: pattern(
                    s * lay.send_numel + rank * lay.count + start, length, dtype, device))
                for s in range(n)
            )
        source = (rank - 1) % n
        return count_wrong(self.recv, lambda start, length: pattern(source * lay.count + start, length, dtype, device))
