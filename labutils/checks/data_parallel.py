"""Self-checks for chapter 6 (data parallelism): one call per exercise prints a one-line verdict.

    from labutils.checks import data_parallel as check
    check.ring_allreduce_bytes(answer)

Each check computes its expected value with ``labutils.costmodel`` (or PyTorch's own
``DistributedSampler``), recognises the usual mistakes by the number they produce and names
them; ``None`` means "not answered yet".
"""
from __future__ import annotations

from labutils import costmodel
from labutils.checks.answers import NOT_ANSWERED, first_match, number_problem

# Exercise 1: a model of 1.3e9 parameters, bf16 gradients, ring all-reduce over 8 GPUs.
_EX1_PARAMS, _EX1_GPUS, _EX1_BYTES_PER_GRAD = 1.3e9, 8, 2


def ring_allreduce_bytes_verdict(answer) -> str:
    """The verdict :func:`ring_allreduce_bytes` prints (bytes one GPU sends per step)."""
    buffer = _EX1_PARAMS * _EX1_BYTES_PER_GRAD
    expected = costmodel.ring_bytes_per_rank("all_reduce", buffer, _EX1_GPUS)
    problem = number_problem(answer, "a number of bytes", finite="a finite number of bytes", show_type=True)
    return problem or first_match(answer, [
        (expected, f"correct: 2(n-1)/n x S = 2 x 7/8 x {buffer:.3g} B = {expected:.4g} B"),
        (expected / 2, "half the answer: either you used the all-gather factor (n-1)/n (an all-reduce is a "
                       "reduce-scatter plus an all-gather: 2(n-1)/n), or you counted parameters, not bytes "
                       "(bf16: 2 bytes each)"),
        (2 * buffer, "that is the n -> infinity limit 2S; with n = 8 the ring moves 2(n-1)/n x S"),
        (2 * expected, "bf16 gradients are 2 bytes each, not 4"),
        (expected * _EX1_GPUS, "that is the traffic summed over all 8 GPUs; the question asks for one GPU"),
    ], f"not quite: a ring all-reduce moves 2(n-1)/n x S per GPU, with S = {buffer:.3g} bytes of gradients",
        rel_tol=1e-3)


def ring_allreduce_bytes(answer) -> None:
    """Exercise 1 of chapter 6: bytes each GPU sends in the gradient all-reduce of one step."""
    print(ring_allreduce_bytes_verdict(answer))


# Exercise 2: 410 samples/s on one GPU, 2,952 samples/s on 8.
_EX2_SINGLE, _EX2_GPUS, _EX2_MEASURED = 410.0, 8, 2952.0


def scaling_efficiency_verdict(answer) -> str:
    """The verdict :func:`scaling_efficiency` prints (a fraction between 0 and 1)."""
    expected = costmodel.scaling_efficiency(_EX2_MEASURED, _EX2_GPUS, _EX2_SINGLE)
    problem = number_problem(answer, "a number of (a fraction)", finite="a finite number of (a fraction)",
                             show_type=True)
    return problem or first_match(answer, [
        (expected, f"correct: 2952 / (8 x 410) = {expected:.3f}"),
        (1 / expected, "upside down: efficiency = actual / (d x single), which cannot exceed 1 here"),
        (100 * expected, "right number, wrong unit: give a fraction (0.9), not a percentage"),
        (_EX2_MEASURED / _EX2_SINGLE, "that is the speed-up; divide it by the number of GPUs to get the efficiency"),
    ], "not quite: efficiency = throughput on d GPUs / (d x throughput on one GPU)", rel_tol=1e-3)


def scaling_efficiency(answer) -> None:
    """Exercise 2 of chapter 6: the scaling efficiency of a DDP run."""
    print(scaling_efficiency_verdict(answer))


# Exercise 3: 1,003 samples, DistributedSampler on 4 ranks.
_EX3_SAMPLES, _EX3_RANKS = 1003, 4


def _sampler_lengths() -> tuple[int, int]:
    """Samples per rank with drop_last=False and True, from PyTorch's own DistributedSampler."""
    from torch.utils.data import DistributedSampler

    return tuple(len(DistributedSampler(range(_EX3_SAMPLES), num_replicas=_EX3_RANKS, rank=0, drop_last=drop))
                 for drop in (False, True))


def samples_per_rank_verdict(answer) -> str:
    """The verdict :func:`samples_per_rank` prints (a pair: default, drop_last=True)."""
    if answer is None:
        return NOT_ANSWERED
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return "answer with a tuple of two numbers: (samples per rank with drop_last=False, with drop_last=True)"
    expected = _sampler_lengths()
    answer = tuple(answer)
    if answer == expected:
        padding = _EX3_RANKS * expected[0] - _EX3_SAMPLES
        return (f"correct: ceil(1003/4) = {expected[0]} ({_EX3_RANKS} x {expected[0]} - {_EX3_SAMPLES} = "
                f"{padding} index repeated as padding), floor(1003/4) = {expected[1]} "
                f"({_EX3_SAMPLES - _EX3_RANKS * expected[1]} samples left out)")
    if answer == expected[::-1]:
        return "swapped: the default pads (rounds up), drop_last=True drops the tail (rounds down)"
    if answer[0] == expected[1]:
        return "the default drop_last=False does not drop samples: it pads by repeating indices, so it rounds up"
    if _EX3_SAMPLES in answer:
        return "each rank sees only its share of the dataset, about 1/4 of it"
    return "not quite: each rank gets ceil(len(dataset)/d) samples by default and floor(len(dataset)/d) with drop_last=True"


def samples_per_rank(answer) -> None:
    """Exercise 3 of chapter 6: samples per rank per epoch with and without ``drop_last``."""
    print(samples_per_rank_verdict(answer))
