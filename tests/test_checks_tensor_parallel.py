"""labutils.checks.tensor_parallel: chapter 8's self-checks name each classic mistake."""
from __future__ import annotations

import pytest
from check_verdicts import verdict, verdict_test

from labutils import costmodel
from labutils.costmodel import strategy
from labutils.checks import tensor_parallel as check

#: Exercise 1's answer: bytes one rank moves per layer (bytes), and one all-reduce's buffer b s h x 2 bytes.
LAYER_BYTES = costmodel.comm_volume("tp", layers=1, **check.LAYER).bytes_per_step
BUFFER = 12288 * 2048 * 2
#: Exercise 3's layer, and its activation bytes without parallelism and at t = 8 (bytes).
ACTIVATION_CASE = dict(seq_len=2048, micro_batch_size=1, hidden=12288, heads=96)
DENSE_ACTIVATIONS = strategy.activation_bytes_per_layer(**ACTIVATION_CASE)
TP_ACTIVATIONS = strategy.activation_bytes_per_layer(**ACTIVATION_CASE, tp=8)


def test_layer_bytes_are_four_ring_all_reduces():
    assert LAYER_BYTES == pytest.approx(4 * 2 * 7 / 8 * BUFFER)


test_bytes_per_layer = verdict_test(check.bytes_per_layer, [
    (LAYER_BYTES, "correct"),
    (LAYER_BYTES / 1e9, "wrong unit"),
    (LAYER_BYTES / 1e6, "wrong unit"),
    (LAYER_BYTES / 2, "half of it"),
    (8 * BUFFER, "2(t-1)/t"),
    (2 * LAYER_BYTES, "bf16 is 2 bytes"),
    (123, "not quite"),
])


test_bias_error = verdict_test(check.bias_error, [
    (1.5, "correct"),
    (2.0, "t b"),
    (0, "rerun 8.1"),
    (0.5, "one copy of b"),
    (7, "not quite"),
])


test_activation_memory = verdict_test(check.activation_memory, [
    (TP_ACTIVATIONS, "correct"),
    (DENSE_ACTIVATIONS, "without parallelism"),
    (DENSE_ACTIVATIONS / 8, "sequence parallelism"),
    (TP_ACTIVATIONS / 1e9, "wrong unit"),
])


@pytest.mark.parametrize("fn", [check.bytes_per_layer, check.bias_error, check.activation_memory])
@pytest.mark.parametrize("answer, message", [(None, "not answered yet"), ("12", "not str"),
                                             (True, "not bool"), (float("nan"), "finite")])
def test_non_answers(fn, answer, message, capsys):
    assert message in verdict(capsys, fn, answer)
