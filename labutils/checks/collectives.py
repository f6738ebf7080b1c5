"""Self-checks of chapter 5 (collective communication): one call per exercise prints a verdict.

    from labutils.checks import collectives as check
    check.all_gather_busbw(answer_1)

Each check computes the right answer with ``labutils.measure.collectives_bench`` or
``labutils.costmodel`` and names the usual mistakes (the all-reduce factor, algbw for busbw,
GiB for GB, a tree's latency for a ring's, the total over all ranks for the per-rank bytes).
n is the number of ranks, S the buffer in bytes, alpha seconds per message, beta seconds per byte.
"""
from __future__ import annotations

from labutils import costmodel
from labutils.measure import collectives_bench
from labutils.checks.answers import first_match, name_problem, number_problem


def all_gather_busbw(answer, size_bytes: int = 1073741824, time_s: float = 4000e-6, ranks: int = 8) -> None:
    """Exercise 1: busbw (GB/s) of an all_gather_perf row: S = 1073741824 B in 4000 us on 8 ranks."""
    print(_all_gather_busbw_verdict(answer, size_bytes, time_s, ranks))


def _all_gather_busbw_verdict(answer, size_bytes, time_s, ranks) -> str:
    algbw, busbw = collectives_bench.bandwidths("all_gather", size_bytes, time_s, ranks)
    candidates = [  # the right value first, then the usual mistakes
        (busbw, f"correct: algbw = S / T = {algbw:.1f} GB/s, busbw = algbw x (n-1)/n = {busbw:.1f} GB/s"),
        (algbw * collectives_bench.bus_bandwidth_factor("all_reduce", ranks),
         "you used the all-reduce factor 2(n-1)/n; all-gather moves (n-1)/n of the data"),
        (algbw, "that is algbw; busbw multiplies it by (n-1)/n for all-gather"),
        (busbw / ranks, "the size column of all_gather is the whole output (n x per-rank input); do not divide it by n"),
        (algbw / ranks, "the size column of all_gather is the whole output (n x per-rank input); do not divide it by n"),
        (busbw * 1e9 / 2**30, "nccl-tests' GB/s is 1e9 bytes/s, not GiB/s"),
        (algbw * 1e9 / 2**30, "nccl-tests' GB/s is 1e9 bytes/s, not GiB/s"),
    ]
    what = "a finite number of GB/s"
    return number_problem(answer, what, finite=what) or first_match(
        answer, candidates, "not quite: algbw = size / time, then busbw = algbw x (n-1)/n", rel_tol=0.005)


def ring_allreduce_time(answer, size_bytes: float = 1e9, ranks: int = 16, alpha: float = 50e-6,
                        beta: float = 1e-11) -> None:
    """Exercise 2: seconds of a ring all-reduce of S = 1e9 B on n = 16 ranks, alpha = 50 us, beta = 1e-11 s/B."""
    print(_ring_allreduce_time_verdict(answer, size_bytes, ranks, alpha, beta))


def _ring_allreduce_time_verdict(answer, S, n, alpha, beta) -> str:
    expected = costmodel.collective_time("all_reduce", "ring", S, n, alpha, beta)
    latency, bandwidth = 2 * (n - 1) * alpha, 2 * (n - 1) / n * S * beta
    candidates = [  # the right value first, then the usual mistakes
        (expected, f"correct: 2(n-1) alpha + 2(n-1)/n S beta = {latency:.4f} + {bandwidth:.5f} = {expected:.5f} s"),
        (costmodel.collective_time("all_reduce", "double_binary_tree", S, n, alpha, beta),
         "that latency term, 2 lg n alpha, is a tree's; the ring takes 2(n-1) steps"),
        (bandwidth, "you left out the latency term 2(n-1) alpha"),
        (latency + 2 * S * beta, "each rank sends 2(n-1)/n of S, not 2 S"),
        (costmodel.collective_time("all_gather", "ring", S, n, alpha, beta),
         "that is one half (a reduce-scatter or an all-gather); the all-reduce does both"),
    ]
    what = "a finite number of seconds"
    return number_problem(answer, what, finite=what) or first_match(
        answer, candidates, "not quite: ring all-reduce time = 2(n-1) alpha + 2(n-1)/n S beta", rel_tol=0.002)


def allreduce_bytes_per_rank(answer, size_bytes: float = 1e9, ranks: int = 4) -> None:
    """Exercise 3: bytes each of n = 4 GPUs sends in a ring all-reduce of S = 1 GB."""
    print(_allreduce_bytes_verdict(answer, size_bytes, ranks))


def _allreduce_bytes_verdict(answer, S, n) -> str:
    expected = costmodel.ring_bytes_per_rank("all_reduce", S, n)
    candidates = [  # the right value first, then the usual mistakes
        (expected, f"correct: 2(n-1)/n x S = 2 x {n - 1}/{n} x {S / 1e9:g} GB = {expected:.3g} bytes"),
        (2 * S, f"2 S is the limit for many GPUs; with n = {n} it is 2(n-1)/n x S"),
        (n * expected, f"that is the total over all {n} GPUs; the question asks what each one sends"),
        (expected / 2, "that is one half (the reduce-scatter or the all-gather); an all-reduce does both"),
        (expected / 1e9, "give bytes, not GB"),
    ]
    what = "a finite number of bytes"
    return number_problem(answer, what, finite=what) or first_match(
        answer, candidates, "not quite: each rank sends (n-1)/n x S in each of the two halves", rel_tol=0.001)


_MOE_FEEDBACK = {
    "alltoall": "correct: rank i's chunk j goes to rank j, a different chunk for every pair (5.1)",
    "allgather": "an all-gather gives every rank all the data; here each rank must get only the tokens for its experts",
    "scatter": "a scatter sends from one root; here every rank sends to every other rank",
    "gather": "a gather collects on one root; here every rank receives from every other rank",
    "broadcast": "a broadcast sends the same data from one rank to all; here the data differs per destination",
    "allreduce": "an all-reduce sums buffers; tokens must be moved, not added",
    "reduce": "a reduce sums onto one root; tokens must be moved, not added",
    "reducescatter": "a reduce-scatter sums before it splits; tokens must be moved, not added",
    "sendrecv": "send/recv would do it pair by pair; the collective that does every pair at once has a name",
}


def moe_token_exchange(answer) -> None:
    """Exercise 4: the collective that sends every token to the rank holding its expert (a name)."""
    print(_moe_verdict(answer))


def _moe_verdict(answer) -> str:
    problem = name_problem(answer, "the collective's name", "broadcast")
    if problem:
        return problem
    name = "".join(ch for ch in answer.lower() if ch.isalpha())  # "all-to-all", "all_to_all" -> "alltoall"
    return _MOE_FEEDBACK.get(name, f"{answer!r} is not one of the collectives of 5.1; look at its table")
