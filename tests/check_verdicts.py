"""How the self-check tests (tests/test_checks_*.py) read a check's verdict: call the check with an
answer, take the one line it printed. ``verdict_test`` turns a table of answers, each with words
its verdict must hold, into one parametrized test.

    test_ridge_point = verdict_test(check.ridge_point, [(153, "correct: P / BW"), (306, "2:4-sparse")])
"""
from __future__ import annotations

import pytest

#: How a verdict starts when it is not a named mistake: the right answer, or a wrong one it cannot name.
KINDS = ("correct", "not quite")


def verdict(capsys, check, answer) -> str:
    """The line ``check(answer)`` printed: a self-check prints exactly one line and returns None."""
    assert check(answer) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1, f"one line expected, got {out!r}"
    return out.strip()


def verdict_test(check, cases: list):
    """A test of ``check`` for each (answer, words) of ``cases``: the verdict holds ``words``, and it
    starts with one of ``KINDS`` exactly when ``words`` do (so "correct" is never a named mistake)."""
    @pytest.mark.parametrize("answer, words", cases)
    def test(capsys, answer, words):
        line = verdict(capsys, check, answer)
        assert words in line
        assert [line.startswith(kind) for kind in KINDS] == [words.startswith(kind) for kind in KINDS], line
    return test
