"""labutils.checks.tensor_parallel: chapter 8's self-checks name each classic mistake."""
from __future__ import annotations

import pytest

from labutils import costmodel
from labutils.costmodel import strategy
from labutils.checks import tensor_parallel as check


def verdict(fn, answer, capsys) -> str:
    fn(answer)
    return capsys.readouterr().out.strip()


def test_bytes_per_layer(capsys):
    expected = costmodel.comm_volume("tp", layers=1, **check.LAYER).bytes_per_step
    buffer = 12288 * 2048 * 2
    assert expected == pytest.approx(4 * 2 * 7 / 8 * buffer)
    assert verdict(check.bytes_per_layer, expected, capsys).startswith("correct")
    assert "wrong unit" in verdict(check.bytes_per_layer, expected / 1e9, capsys)
    assert "wrong unit" in verdict(check.bytes_per_layer, expected / 1e6, capsys)
    assert "half of it" in verdict(check.bytes_per_layer, expected / 2, capsys)
    assert "2(t-1)/t" in verdict(check.bytes_per_layer, 8 * buffer, capsys)
    assert "bf16 is 2 bytes" in verdict(check.bytes_per_layer, 2 * expected, capsys)
    assert verdict(check.bytes_per_layer, 123, capsys).startswith("not quite")


def test_bias_error(capsys):
    assert verdict(check.bias_error, 1.5, capsys).startswith("correct")
    assert "t b" in verdict(check.bias_error, 2.0, capsys)
    assert "rerun 8.1" in verdict(check.bias_error, 0, capsys)
    assert "one copy of b" in verdict(check.bias_error, 0.5, capsys)
    assert verdict(check.bias_error, 7, capsys).startswith("not quite")


def test_activation_memory(capsys):
    case = dict(seq_len=2048, micro_batch_size=1, hidden=12288, heads=96)
    expected = strategy.activation_bytes_per_layer(**case, tp=8)
    assert verdict(check.activation_memory, expected, capsys).startswith("correct")
    assert "without parallelism" in verdict(check.activation_memory, strategy.activation_bytes_per_layer(**case), capsys)
    assert "sequence parallelism" in verdict(
        check.activation_memory, strategy.activation_bytes_per_layer(**case) / 8, capsys)
    assert "wrong unit" in verdict(check.activation_memory, expected / 1e9, capsys)


@pytest.mark.parametrize("fn", [check.bytes_per_layer, check.bias_error, check.activation_memory])
@pytest.mark.parametrize("answer, message", [(None, "not answered yet"), ("12", "not str"),
                                             (True, "not bool"), (float("nan"), "finite")])
def test_non_answers(fn, answer, message, capsys):
    assert message in verdict(fn, answer, capsys)
