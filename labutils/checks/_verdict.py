"""What the chapter self-checks of this package share: judging a numeric answer against the
expected value and the named mistakes, and printing one line."""
from __future__ import annotations

import math
import numbers
from typing import Sequence

NOT_ANSWERED = "not answered yet"


def number_or_reason(answer) -> tuple[float | None, str | None]:
    """(the answer as a float, None), or (None, why it is not a number to judge)."""
    if answer is None:
        return None, NOT_ANSWERED
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return None, f"give a number, not {answer!r}"
    if not math.isfinite(float(answer)):
        return None, f"give a finite number, not {answer!r}"
    return float(answer), None


def judge(answer, expected: float, correct: str, mistakes: Sequence[tuple[float, str]], otherwise: str,
          rel_tol: float = 0.0) -> None:
    """Print one line: "correct: {correct}" when ``answer`` is ``expected``, the message of the
    first named mistake it equals, else "not {answer}: {otherwise}".

    ``rel_tol`` (a fraction) is how close counts as equal; 0 asks for the exact number (whole
    numbers such as an index or a count of GPUs).
    """
    value, reason = number_or_reason(answer)
    if reason is not None:
        print(reason)
        return
    candidates = [(expected, f"correct: {correct}"), *mistakes]
    message = next((text for target, text in candidates if math.isclose(value, target, rel_tol=rel_tol)),
                   f"not {answer}: {otherwise}")
    print(message)
