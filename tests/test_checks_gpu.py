"""Chapter 2's self-checks (labutils.checks.gpu): the right answer passes, each named mistake
gets its message, and non-answers are handled."""
from __future__ import annotations

import pytest
from check_verdicts import verdict, verdict_test

from labutils.checks import gpu as check


@pytest.mark.parametrize("fn", [check.thread_index, check.simt_efficiency, check.gpus_for_weights,
                                check.systolic_cycles])
def test_non_answers(capsys, fn):
    assert verdict(capsys, fn, None) == "not answered yet"
    assert verdict(capsys, fn, "785") == "give a number, not '785'"
    assert verdict(capsys, fn, True) == "give a number, not True"
    assert verdict(capsys, fn, float("nan")) == "give a finite number, not nan"
    assert verdict(capsys, fn, -12345.0).startswith("not -12345.0:")


test_thread_index = verdict_test(check.thread_index, [
    (785, "correct: blockIdx.x * blockDim.x + threadIdx.x = 3 x 256 + 17 = 785"),
    (768, "that is the block's first thread"),
    (529, "blocks count from 0"),
    (3 + 256 * 17, "blockIdx and threadIdx swapped"),
    (1041, "the fourth block, not the fifth"),
])


test_simt_efficiency = verdict_test(check.simt_efficiency, [
    (1 / 3, "correct: (8 x 20 + 24 x 4) / (32 x (20 + 4)) = 0.333"),
    (256 / 640, "BOTH paths"),
    (1, "the warp is divergent"),
    (33.33, "a fraction"),
])


test_gpus_for_weights = verdict_test(check.gpus_for_weights, [
    (7, "correct: 972 GB / 141 GB per GPU, rounded up = 7"),
    (14, "2 bytes per parameter, not 4"),
    (6, "either the 20% headroom (KV cache, activations, buffers) is missing, or you rounded down"),
])


test_systolic_cycles = verdict_test(check.systolic_cycles, [
    (382, "correct: K + R + C - 2 = 128 + 128 + 128 - 2 = 382"),
    (128, "only the steady state"),
    (384, "cycles count from 0"),
    (381, "one short"),
    (128**3, "multiply-adds"),
])
