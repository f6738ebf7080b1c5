"""Chapter 3's self-checks (labutils.checks.roofline): the right answer passes, each named
mistake gets its message, and non-answers are handled."""
from __future__ import annotations

import pytest
from check_verdicts import verdict, verdict_test

from labutils.costmodel import roofline as rl
from labutils.checks import roofline as check


@pytest.mark.parametrize("fn", [check.gemm_intensity, check.ridge_point, check.add_time_ms, check.decode_speedup])
def test_non_answers(capsys, fn):
    assert verdict(capsys, fn, None) == "not answered yet"
    assert verdict(capsys, fn, [1]) == "give a number, not [1]"
    assert verdict(capsys, fn, float("inf")) == "give a finite number, not inf"
    assert verdict(capsys, fn, -7.0).startswith("not -7.0:")


test_gemm_intensity = verdict_test(check.gemm_intensity, [
    (4096 / 3, "correct: 2 N^3 / (3 N^2 x 2 B) = N/3 = 1365.3 FLOP/B"),
    (4096 / 6, "a multiply-add is 2 FLOPs"),
    (2048, "only the two inputs"),
    (2 * 4096 / 3, "2 bytes per element, not 1"),
])


test_ridge_point = verdict_test(check.ridge_point, [
    (153, "correct: P / BW = 312 TFLOP/s / 2,039 GB/s = 153 FLOP/B"),
    (306, "2:4-sparse"),
    (0.153, "units"),
    (153_000, "units"),
    (312e12 / 1555e9, "A100 40GB"),
])


def test_ridge_point_answer_comes_from_the_device_table(capsys):
    expected = rl.ridge_point(rl.DEVICES["a100"], "bf16")
    assert verdict(capsys, check.ridge_point, expected).startswith("correct")


test_add_time_ms = verdict_test(check.add_time_ms, [
    (6e9 / 3.35e12 * 1e3, "correct: 1.79 ms: memory bound"),
    (1e9 / 989e12 * 1e3, "compute time"),
    (4e9 / 3.35e12 * 1e3, "result c is written too"),
    (12e9 / 3.35e12 * 1e3, "not 4"),
    (6e9 / 3.35e12, "milliseconds"),
])


test_decode_speedup = verdict_test(check.decode_speedup, [
    (4.8 / 3.35, "correct: 1.43x, the ratio of HBM bandwidths (4.80 / 3.35 TB/s)"),
    (1.0, "decoding is memory bound"),
    (3.35 / 4.8, "upside down"),
    (141 / 80, "capacity ratio"),
])
