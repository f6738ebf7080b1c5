"""Alpha-beta(-gamma) cost of one collective, per operation and algorithm.

``n`` is the buffer in bytes (for all-gather the *output*, for reduce-scatter the *input*:
the full tensor, as nccl-tests' size column), ``p`` the ranks, ``a`` (alpha) the latency of
one message (s), ``b`` (beta) the time per byte on one link (s/B, 1 / link bandwidth in
B/s), ``g`` (gamma) the time to reduce one byte (s/B).

======================  =====================================================  ==================================
op / algorithm          time                                                   source
======================  =====================================================  ==================================
all_gather ring         (p-1) a + (p-1)/p n b                                  MPICH allgather_intra_ring.c
reduce_scatter ring     (p-1) a + (p-1)/p n b + (p-1)/p n g                    MPICH (Thakur et al. 2005)
all_reduce ring         2(p-1) a + 2(p-1)/p n b + (p-1)/p n g                  MPICH allreduce_intra_ring.c
all_reduce rabenseifner 2 lg p a + 2(p-1)/p n b + (p-1)/p n g                  MPICH allreduce_intra_reduce_
                                                                               scatter_allgather.c
all_reduce recursive_   lg p a + n lg p b + n lg p g                           MPICH allreduce_intra_recursive_
doubling                                                                       doubling.c
all_reduce double_      2 lg p a + 2(p-1)/p n b + (p-1)/p n g                  APPROXIMATION of NCCL >= 2.4 trees
binary_tree                                                                    (NVIDIA blog, NCCL 2.4)
broadcast binomial_tree lg p (a + n b)                                         MPICH (Thakur et al. 2005)
broadcast ring          (p-1) a + n b                                          APPROXIMATION: pipelined ring
all_to_all pairwise     (p-1) a + (p-1)/p n b                                  MPICH alltoall_intra_pairwise.c
(or ring)                                                                      (Thakur et al. 2005)
sendrecv                a + n b                                                one message (Hockney's model)
point_to_point
======================  =====================================================  ==================================

Thakur, Rabenseifner, Gropp, "Optimization of collective communication operations in
MPICH", IJHPCA 2005; the MPICH files are under ``src/mpi/coll/`` of pmodels/mpich.

For all_to_all, ``n`` is one rank's send buffer (nccl-tests' size column): it keeps n/p for
itself and sends n/p to each of the p-1 others, one partner per step. "ring" and
"pairwise" name the same schedule here (step k: send to rank + k, receive from rank - k;
MPICH's pairwise exchange uses rank XOR k when p is a power of two); it is not a
store-and-forward ring, which would move more bytes. For sendrecv, ``n`` is the message;
every rank sends one to its neighbour at once (nccl-tests' sendrecv), so the time is that
of one message. One rank alone sends nothing (0 s).

``lg p`` is rounded up to a whole number of steps when p is not a power of two (MPICH then
adds a fix-up step; the formulas above are exact for powers of two only).

The double binary tree line is an approximation, not a published formula: NVIDIA's blog
on NCCL 2.4 states the trees' latency grows as O(log p) (up the tree and back down: 2 lg p
messages) while the bandwidth stays about the ring's, which is what is written here. The
pipelined ring broadcast is likewise the limit of many small chunks: every byte crosses
each link once (nccl-tests' busbw factor 1 for broadcast, NVIDIA/nccl-tests
doc/PERFORMANCE.md) and the first chunk needs p-1 hops.
"""
from __future__ import annotations

import math

from labutils.costmodel._checks import check_nonnegative, check_positive_int, choice_error


def _lg(p: int) -> int:
    """lg p, rounded up to whole steps."""
    return math.ceil(math.log2(p))


def _share(p: int) -> float:
    """(p-1)/p: the part of the buffer each rank must exchange."""
    return (p - 1) / p


def _ring_all_gather(p, n, alpha, beta, gamma):
    return (p - 1) * alpha + _share(p) * n * beta


def _ring_reduce_scatter(p, n, alpha, beta, gamma):
    return (p - 1) * alpha + _share(p) * n * beta + _share(p) * n * gamma


def _ring_all_reduce(p, n, alpha, beta, gamma):
    return 2 * (p - 1) * alpha + 2 * _share(p) * n * beta + _share(p) * n * gamma


def _recursive_doubling_all_reduce(p, n, alpha, beta, gamma):
    return _lg(p) * alpha + n * _lg(p) * beta + n * _lg(p) * gamma


def _reduce_scatter_all_gather_all_reduce(p, n, alpha, beta, gamma):
    """Rabenseifner's algorithm; also the double-binary-tree approximation."""
    return 2 * _lg(p) * alpha + 2 * _share(p) * n * beta + _share(p) * n * gamma


def _binomial_tree_broadcast(p, n, alpha, beta, gamma):
    return _lg(p) * (alpha + n * beta)


def _pipelined_ring_broadcast(p, n, alpha, beta, gamma):
    return (p - 1) * alpha + (n * beta if p > 1 else 0.0)


def _pairwise_all_to_all(p, n, alpha, beta, gamma):
    return (p - 1) * alpha + _share(p) * n * beta


def _one_message(p, n, alpha, beta, gamma):
    return alpha + n * beta if p > 1 else 0.0


#: (op, algorithm) -> f(p, n, alpha, beta, gamma) -> seconds; the table in the module docstring
COST_FORMULAS = {
    ("all_reduce", "ring"): _ring_all_reduce,
    ("all_reduce", "recursive_doubling"): _recursive_doubling_all_reduce,
    ("all_reduce", "rabenseifner"): _reduce_scatter_all_gather_all_reduce,
    ("all_reduce", "double_binary_tree"): _reduce_scatter_all_gather_all_reduce,
    ("all_gather", "ring"): _ring_all_gather,
    ("reduce_scatter", "ring"): _ring_reduce_scatter,
    ("broadcast", "ring"): _pipelined_ring_broadcast,
    ("broadcast", "binomial_tree"): _binomial_tree_broadcast,
    ("all_to_all", "pairwise"): _pairwise_all_to_all,
    ("all_to_all", "ring"): _pairwise_all_to_all,
    ("sendrecv", "point_to_point"): _one_message,
}

#: op -> algorithms with a cost formula in :func:`collective_time`
COLLECTIVE_ALGORITHMS: dict[str, tuple[str, ...]] = {}
for _op, _algorithm in COST_FORMULAS:
    COLLECTIVE_ALGORITHMS[_op] = COLLECTIVE_ALGORITHMS.get(_op, ()) + (_algorithm,)
del _op, _algorithm

#: op -> bytes each rank sends in a ring, as a multiple of the buffer (nccl-tests' busbw factors)
_RING_FACTORS = {
    "all_reduce": lambda p: 2 * (p - 1) / p,
    "all_gather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "all_to_all": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "sendrecv": lambda p: 1.0,
}


def collective_time(
    op: str,
    algorithm: str,
    nbytes: float,
    world_size: int,
    alpha: float,
    beta: float,
    gamma: float = 0.0,
) -> float:
    """Seconds one collective takes under the alpha-beta(-gamma) model.

    ``nbytes`` is the buffer size n in bytes (for all-gather the *output*, for
    reduce-scatter the *input*, as nccl-tests' size column), ``world_size`` p ranks,
    ``alpha`` the latency of one message (s), ``beta`` the time per byte on one link (s/B,
    i.e. 1 / link bandwidth in B/s), ``gamma`` the time to reduce one byte (s/B). The
    formula of each op and algorithm, with its source, is in the table of
    ``labutils.costmodel.collectives`` (``COLLECTIVE_ALGORITHMS`` lists the pairs).

    >>> collective_time("all_reduce", "ring", 1e9, 4, alpha=0.0, beta=1e-9)  # 2*(3/4)*1 s
    1.5
    """
    if op not in COLLECTIVE_ALGORITHMS:
        raise choice_error("op", op, COLLECTIVE_ALGORITHMS)
    if algorithm not in COLLECTIVE_ALGORITHMS[op]:
        raise choice_error(f"algorithm for {op}", algorithm, COLLECTIVE_ALGORITHMS[op])
    check_positive_int(world_size=world_size)
    check_nonnegative(nbytes=nbytes, alpha=alpha, beta=beta, gamma=gamma)
    return COST_FORMULAS[op, algorithm](int(world_size), float(nbytes), alpha, beta, gamma)


def ring_bytes_per_rank(op: str, nbytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives as many) in a ring collective on an ``nbytes`` buffer.

    all_reduce 2(p-1)/p n (the lower bound, hence nccl-tests' busbw factor),
    all_gather, reduce_scatter and all_to_all (p-1)/p n, sendrecv n (the message).
    broadcast n: the bytes on the busiest link, which is what sets the time. In a pipelined
    ring every rank but the last forwards the whole buffer (the last sends nothing), so this
    is not what every rank sends.
    """
    if op not in COLLECTIVE_ALGORITHMS:
        raise choice_error("op", op, COLLECTIVE_ALGORITHMS)
    check_positive_int(world_size=world_size)
    check_nonnegative(nbytes=nbytes)
    p = int(world_size)
    if p == 1:
        return 0.0
    return _RING_FACTORS[op](p) * nbytes
