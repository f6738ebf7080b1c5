"""labutils.checks.strategy: chapter 10's self-checks name each classic mistake."""
from __future__ import annotations

import pytest

from labutils import costmodel
from labutils.checks import strategy as check


def verdict(fn, answer, capsys) -> str:
    fn(answer)
    return capsys.readouterr().out.strip()


def test_expert_capacity(capsys):
    assert verdict(check.expert_capacity, 160, capsys).startswith("correct")
    assert "B instead of B k" in verdict(check.expert_capacity, 80, capsys)
    assert "capacity factor" in verdict(check.expert_capacity, 128, capsys)
    assert "whole number" in verdict(check.expert_capacity, 159.5, capsys)
    assert verdict(check.expert_capacity, 100, capsys).startswith("not quite")


def test_rank_coordinates(capsys):
    assert verdict(check.rank_coordinates, (6, 0, 2), capsys).startswith("correct")
    assert verdict(check.rank_coordinates, [6, 0, 2], capsys).startswith("correct")
    assert "reversed" in verdict(check.rank_coordinates, (2, 0, 6), capsys)
    assert "slowest index" in verdict(check.rank_coordinates, (6, 0, 0), capsys)
    assert "fastest index" in verdict(check.rank_coordinates, (0, 0, 2), capsys)
    assert "tuple of three" in verdict(check.rank_coordinates, (6, 0), capsys)
    assert "tuple of three" in verdict(check.rank_coordinates, 70, capsys)
    assert "tuple of three" in verdict(check.rank_coordinates, (6, "0", 2), capsys)


def test_dp_traffic(capsys):
    expected = costmodel.comm_volume("dp", params=175e9, tp_size=8, pp_size=16, dp_size=8).bytes_per_step
    assert expected == pytest.approx(2 * 7 / 8 * 175e9 / 128 * 2)
    assert verdict(check.dp_traffic, expected, capsys).startswith("correct")
    assert "wrong unit" in verdict(check.dp_traffic, expected / 1e9, capsys)
    assert "1/(t p)" in verdict(check.dp_traffic, expected * 128, capsys)
    assert "not (d-1)/d" in verdict(check.dp_traffic, expected / 2, capsys)
    assert "large-d limit" in verdict(check.dp_traffic, expected * 8 / 7, capsys)


def test_dropped_assignments(capsys):
    # C = ceil(B k / E x c) = ceil(512 x 2 / 4 x 1.25) = 320: only the expert with 400 overflows, by 80
    assert verdict(check.dropped_assignments, 80, capsys).startswith("correct")
    assert "B instead of B k" in verdict(check.dropped_assignments, 420, capsys)
    assert "capacity factor" in verdict(check.dropped_assignments, 188, capsys)
    assert "only the overflow" in verdict(check.dropped_assignments, 400, capsys)
    assert "share" in verdict(check.dropped_assignments, 80 / 1024, capsys)
    assert "whole number" in verdict(check.dropped_assignments, 0.5, capsys)
    assert verdict(check.dropped_assignments, 3, capsys).startswith("not quite")


@pytest.mark.parametrize("fn", [check.expert_capacity, check.rank_coordinates, check.dp_traffic,
                                check.dropped_assignments])
def test_not_answered(fn, capsys):
    assert verdict(fn, None, capsys) == "not answered yet"
