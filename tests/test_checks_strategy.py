"""labutils.checks.strategy: chapter 10's self-checks name each classic mistake."""
from __future__ import annotations

import pytest
from check_verdicts import verdict, verdict_test

from labutils import costmodel
from labutils.checks import strategy as check

#: Exercise 3's answer: DP traffic per device for 175e9 parameters on t = 8, p = 16, d = 8 (bytes).
DP_BYTES = costmodel.comm_volume("dp", params=175e9, tp_size=8, pp_size=16, dp_size=8).bytes_per_step

test_expert_capacity = verdict_test(check.expert_capacity, [
    (160, "correct"),
    (80, "B instead of B k"),
    (128, "capacity factor"),
    (159.5, "whole number"),
    (100, "not quite"),
])


test_rank_coordinates = verdict_test(check.rank_coordinates, [
    ((6, 0, 2), "correct"),
    ([6, 0, 2], "correct"),
    ((2, 0, 6), "reversed"),
    ((6, 0, 0), "slowest index"),
    ((0, 0, 2), "fastest index"),
    ((6, 0), "tuple of three"),
    (70, "tuple of three"),
    ((6, "0", 2), "tuple of three"),
])


def test_dp_bytes_is_the_ring_all_reduce_of_a_shard():
    assert DP_BYTES == pytest.approx(2 * 7 / 8 * 175e9 / 128 * 2)


test_dp_traffic = verdict_test(check.dp_traffic, [
    (DP_BYTES, "correct"),
    (DP_BYTES / 1e9, "wrong unit"),
    (DP_BYTES * 128, "1/(t p)"),
    (DP_BYTES / 2, "not (d-1)/d"),
    (DP_BYTES * 8 / 7, "large-d limit"),
])


# C = ceil(B k / E x c) = ceil(512 x 2 / 4 x 1.25) = 320: only the expert with 400 overflows, by 80
test_dropped_assignments = verdict_test(check.dropped_assignments, [
    (80, "correct"),
    (420, "B instead of B k"),
    (188, "capacity factor"),
    (400, "only the overflow"),
    (80 / 1024, "share"),
    (0.5, "whole number"),
    (3, "not quite"),
])


@pytest.mark.parametrize("fn", [check.expert_capacity, check.rank_coordinates, check.dp_traffic,
                                check.dropped_assignments])
def test_not_answered(fn, capsys):
    assert verdict(capsys, fn, None) == "not answered yet"
