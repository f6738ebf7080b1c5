"""labutils.checks.pipeline: chapter 9's self-checks name each classic mistake."""
from __future__ import annotations

import pytest
from check_verdicts import verdict, verdict_test

from labutils.checks import pipeline as check

test_gpipe_bubble = verdict_test(check.gpipe_bubble, [
    (7 / 39, "correct"),
    (7 / 32, "relative to the ideal"),
    (7 / 8, "naive bubble"),
    (17.9, "percentage"),
    (-0.2, "between 0 and 1"),
    (0.5, "not quite"),
])


test_first_stage_in_flight = verdict_test(check.first_stage_in_flight, [
    (8, "correct"),
    (8.0, "correct"),
    (32, "GPipe"),
    (7, "one short"),
    (1, "last stage"),
    (7.5, "whole number"),
    (5, "not quite"),
])


test_messages_per_step = verdict_test(check.messages_per_step, [
    (96, "correct"),
    (48, "one direction"),
    (128, "p-1 boundaries"),
    (32, "interior stage"),
    (10, "not quite"),
])


@pytest.mark.parametrize("fn", [check.gpipe_bubble, check.first_stage_in_flight, check.messages_per_step])
@pytest.mark.parametrize("answer, message", [(None, "not answered yet"), ("8", "not str"), ([8], "not list")])
def test_non_answers(fn, answer, message, capsys):
    assert message in verdict(capsys, fn, answer)
