"""labutils.checks.zero: chapter 7's self-checks accept the answer and name each mistake."""
from __future__ import annotations

import pytest

from labutils.checks import zero as check

# Exercise 1: N = 13e9, stage 2, d = 16: 2N + 14N/d bytes = 26 + 11.375 GB.
STAGE2_GB = 26 + 14 * 13 / 16


@pytest.mark.parametrize("answer, verdict", [
    (STAGE2_GB, "correct"),
    (37.4, "correct"),
    (16 * 13, "stage 0 (DDP)"),
    (4 * 13 + 12 * 13 / 16, "stage 1 (ZeRO-1)"),
    (16 * 13 / 16, "stage 3 (ZeRO-3)"),
    (STAGE2_GB * 1e9 / 2**30, "GiB"),
    (14 * 13 / 16, "forgot the unsharded fp16 parameters"),
    (50.0, "not quite"),
    (None, "not answered yet"),
    ("37", "give a number of GB, not str"),
])
def test_stage2_memory(answer, verdict):
    assert verdict in check.stage2_memory_verdict(answer)


@pytest.mark.parametrize("answer, verdict", [
    (6, "correct"),            # 16 x 30e9 / d <= 80e9: d >= 6
    (6.0, "correct"),
    (21, "answer for stage 2"),  # 60e9 + 14 x 30e9 / d <= 80e9: d >= 21
    (5, "more than 80 GB"),
    (8, "not the smallest"),
    (12, "fewer do too"),
    (0, "positive number"),
    (6.5, "whole number"),
    (True, "whole number"),
    (None, "not answered yet"),
])
def test_stage3_gpus(answer, verdict):
    assert verdict in check.stage3_gpus_verdict(answer)


# Exercise 3: N = 7.5e9, stage 3, d = 64, 2 bytes per value: 3 x 63/64 x 15e9 B.
STAGE3_GB = 3 * 63 / 64 * 15


@pytest.mark.parametrize("answer, verdict", [
    (STAGE3_GB, "correct"),
    (2 * 63 / 64 * 15, "stages 1-2 (2N)"),
    (3 * 15, "d -> infinity"),
    (STAGE3_GB / 2, "count bytes, not parameters"),
    (STAGE3_GB * 64, "summed over all 64 GPUs"),
    (1.0, "not quite"),
    (None, "not answered yet"),
])
def test_stage3_traffic(answer, verdict):
    assert verdict in check.stage3_traffic_verdict(answer)


# Exercise 4: checkpoints every 500 steps of 2 s, a rank lost at the start of step 1730, a 360 s
# restart: steps 1500-1729 again (230 x 2 s) + 360 s.
FAILURE_S = 230 * 2.0 + 360


@pytest.mark.parametrize("answer, verdict", [
    (FAILURE_S, "correct"),
    (820.4, "correct"),
    (230 * 2.0, "the restart itself"),
    (360, "the restart alone"),
    (231 * 2.0 + 360, "one step too many"),
    (250 * 2.0 + 360, "average over failures"),
    (500 * 2.0 + 360, "a whole interval"),
    (FAILURE_S / 60, "in minutes"),
    (1e6, "not quite"),
    (None, "not answered yet"),
    ("820", "give a number of seconds, not str"),
])
def test_failure_cost(answer, verdict):
    assert verdict in check.failure_cost_verdict(answer)


def test_checks_print_their_verdict(capsys):
    for function, answer in ((check.stage2_memory, STAGE2_GB), (check.stage3_gpus, 6),
                             (check.stage3_traffic, STAGE3_GB), (check.failure_cost, FAILURE_S)):
        assert function(answer) is None
        assert capsys.readouterr().out.startswith("correct")
