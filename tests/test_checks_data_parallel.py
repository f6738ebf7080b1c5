"""labutils.checks.data_parallel: chapter 6's self-checks accept the answer and name each mistake."""
from __future__ import annotations

import math

import pytest

from labutils.checks import data_parallel as check

# Exercise 1: 1.3e9 parameters, bf16 gradients (S = 2.6e9 B), ring all-reduce on n = 8.
RING_BYTES = 2 * 7 / 8 * 2.6e9


@pytest.mark.parametrize("answer, verdict", [
    (RING_BYTES, "correct"),
    (RING_BYTES / 2, "half the answer"),
    (2 * 2.6e9, "n -> infinity"),
    (2 * RING_BYTES, "2 bytes each, not 4"),
    (8 * RING_BYTES, "summed over all 8 GPUs"),
    (1.0, "not quite"),
    (None, "not answered yet"),
    ("4.55e9", "give a number of bytes, not str"),
    (True, "give a number of bytes, not bool"),
    (math.nan, "finite"),
])
def test_ring_allreduce_bytes(answer, verdict):
    assert verdict in check.ring_allreduce_bytes_verdict(answer)


def test_ring_allreduce_bytes_prints_one_line(capsys):
    assert check.ring_allreduce_bytes(RING_BYTES) is None
    printed = capsys.readouterr().out
    assert printed.startswith("correct") and printed.count("\n") == 1


@pytest.mark.parametrize("answer, verdict", [
    (2952 / (8 * 410), "correct"),
    (0.9, "correct"),
    (8 * 410 / 2952, "upside down"),
    (90.0, "wrong unit"),
    (2952 / 410, "speed-up"),
    (0.5, "not quite"),
    (None, "not answered yet"),
    ([0.9], "give a number"),
])
def test_scaling_efficiency(answer, verdict):
    assert verdict in check.scaling_efficiency_verdict(answer)


@pytest.mark.parametrize("answer, verdict", [
    ((251, 250), "correct"),
    ([251, 250], "correct"),
    ((250, 251), "swapped"),
    ((250, 250), "does not drop samples"),
    ((1003, 1003), "only its share"),
    ((252, 250), "not quite"),
    (251, "tuple of two numbers"),
    (None, "not answered yet"),
])
def test_samples_per_rank(answer, verdict):
    assert verdict in check.samples_per_rank_verdict(answer)


def test_correct_verdicts_give_the_derivation():
    assert "ceil(1003/4) = 251" in check.samples_per_rank_verdict((251, 250))
    assert "1 index repeated" in check.samples_per_rank_verdict((251, 250))
    assert "= 0.900" in check.scaling_efficiency_verdict(0.9)
