"""What the chapters' self-checks share: reading a student's answer before judging it."""
from __future__ import annotations

import math


def not_a_number(answer, unit: str) -> str | None:
    """The verdict for a missing (None) or non-numeric answer ("give a finite number of GB/s"), else None."""
    if answer is None:
        return "not answered yet"
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not math.isfinite(answer):
        return f"give a finite number of {unit}, not {answer!r}"
    return None


def first_match(answer: float, candidates, tolerance: float, otherwise: str) -> str:
    """The text of the first (value, text) in ``candidates`` within ``tolerance`` (relative) of ``answer``.

    ``candidates`` lists the right value first, then each named mistake; ``otherwise`` is the
    verdict when none is close.
    """
    return next((text for value, text in candidates if abs(answer - value) <= tolerance * abs(value)), otherwise)
