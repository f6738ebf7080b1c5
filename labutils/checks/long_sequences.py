"""Self-checks of chapter 8's sections on long sequences: activation recomputation and
context parallelism. One call per exercise, a one-line verdict.

    from labutils.checks import long_sequences as check
    check.selective_memory(answer)
"""
from __future__ import annotations

from labutils.checks.answers import bytes_problem, first_match

#: exercise 4: one GPT-3 layer (arXiv:2005.14165) with selective recomputation, 16-bit
SELECTIVE_CASE = dict(seq_len=2048, micro_batch_size=1, hidden=12288, heads=96)
#: exercise 5: a layer of width 4096 on a 131072-token sequence split over 8 ranks, bf16
RING_CASE = dict(seq_len=131072, micro_batch_size=1, hidden=4096, world_size=8, bytes_per_value=2)


def selective_memory(answer) -> None:
    """Exercise 4: bytes one GPT-3 layer keeps for backward with selective recomputation."""
    print(_selective_memory_verdict(answer))


def _selective_memory_verdict(answer) -> str:
    from labutils.kernels import recompute

    expected = recompute.activation_bytes_per_layer(**SELECTIVE_CASE, recompute="selective")
    none = recompute.activation_bytes_per_layer(**SELECTIVE_CASE)
    full = recompute.activation_bytes_per_layer(**SELECTIVE_CASE, recompute="full")
    attention = none - expected
    return bytes_problem(answer, expected) or first_match(
        answer,
        [(expected, f"correct: 34 sbh = {expected / 1e9:.2f} GB, against {none / 1e9:.2f} GB without recomputation"),
         (none, "that is without recomputation: selective recomputation drops the 5as^2b bytes of the attention core"),
         (attention, "that is what selective recomputation saves (5as^2b), not what it keeps (34 sbh)"),
         (full, "that is full recomputation, which keeps only the layer's input (2 sbh)"),
         (expected / 2, "34 sbh already counts bytes (2 per 16-bit value): do not halve it")],
        "not quite: selective recomputation keeps 34 sbh bytes per layer (arXiv:2205.05198, section 5)")


def ring_bytes(answer) -> None:
    """Exercise 5: bytes one rank sends in one layer's ring-attention forward."""
    print(_ring_bytes_verdict(answer))


def _ring_bytes_verdict(answer) -> str:
    from labutils.kernels import context_parallel as cp

    case = dict(RING_CASE)
    n = case["world_size"]
    expected = cp.ring_bytes_per_rank(**case)
    whole_kv = 2 * case["seq_len"] * case["micro_batch_size"] * case["hidden"] * case["bytes_per_value"]
    return bytes_problem(answer, expected) or first_match(
        answer,
        [(expected, f"correct: (n-1)/n x (K + V) = {(n - 1)}/{n} x {whole_kv / 1e9:.2f} GB = {expected / 1e9:.2f} GB"),
         (whole_kv, f"that is all of K and V; a rank never sends the block it receives last: (n-1)/n of it, n = {n}"),
         (expected / 2, "count both K and V: each travels round the ring"),
         (cp.ulysses_bytes_per_rank(**case), "that is the Ulysses all-to-all volume; the question asks for the ring")],
        "not quite: each rank passes on n-1 blocks of K and of V, each s/n x b x h values of 2 bytes")
