"""labutils.checks.pipeline: chapter 9's self-checks name each classic mistake."""
from __future__ import annotations

import pytest

from labutils.checks import pipeline as check


def verdict(fn, answer, capsys) -> str:
    fn(answer)
    return capsys.readouterr().out.strip()


def test_gpipe_bubble(capsys):
    assert verdict(check.gpipe_bubble, 7 / 39, capsys).startswith("correct")
    assert "relative to the ideal" in verdict(check.gpipe_bubble, 7 / 32, capsys)
    assert "naive bubble" in verdict(check.gpipe_bubble, 7 / 8, capsys)
    assert "percentage" in verdict(check.gpipe_bubble, 17.9, capsys)
    assert "between 0 and 1" in verdict(check.gpipe_bubble, -0.2, capsys)
    assert verdict(check.gpipe_bubble, 0.5, capsys).startswith("not quite")


def test_first_stage_in_flight(capsys):
    assert verdict(check.first_stage_in_flight, 8, capsys).startswith("correct")
    assert verdict(check.first_stage_in_flight, 8.0, capsys).startswith("correct")
    assert "GPipe" in verdict(check.first_stage_in_flight, 32, capsys)
    assert "one short" in verdict(check.first_stage_in_flight, 7, capsys)
    assert "last stage" in verdict(check.first_stage_in_flight, 1, capsys)
    assert "whole number" in verdict(check.first_stage_in_flight, 7.5, capsys)
    assert verdict(check.first_stage_in_flight, 5, capsys).startswith("not quite")


def test_messages_per_step(capsys):
    assert verdict(check.messages_per_step, 96, capsys).startswith("correct")
    assert "one direction" in verdict(check.messages_per_step, 48, capsys)
    assert "p-1 boundaries" in verdict(check.messages_per_step, 128, capsys)
    assert "interior stage" in verdict(check.messages_per_step, 32, capsys)
    assert verdict(check.messages_per_step, 10, capsys).startswith("not quite")


@pytest.mark.parametrize("fn", [check.gpipe_bubble, check.first_stage_in_flight, check.messages_per_step])
@pytest.mark.parametrize("answer, message", [(None, "not answered yet"), ("8", "not str"), ([8], "not list")])
def test_non_answers(fn, answer, message, capsys):
    assert message in verdict(fn, answer, capsys)
