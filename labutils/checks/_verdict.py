"""What the chapter self-checks of this package share: reading a numeric answer and printing
one line."""
from __future__ import annotations

import math
import numbers

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


def close(answer: float, value: float, rel_tol: float) -> bool:
    """Whether ``answer`` is within ``rel_tol`` (a fraction) of ``value``."""
    return math.isclose(answer, value, rel_tol=rel_tol)


def say(message: str) -> None:
    """Print the one-line verdict a notebook shows."""
    print(message)
