"""What the parallelism chapters' self-checks share: reading a student's answer.

Each function returns the one-line message for an answer that is not a usable value yet
(None, text, a percentage where a fraction is asked), or None when the answer can be judged.
"""
from __future__ import annotations

import math
from numbers import Real


def close(value: float, expected: float, rel_tol: float = 0.01) -> bool:
    """True when ``value`` is within ``rel_tol`` (1% by default) of ``expected``."""
    return math.isclose(value, expected, rel_tol=rel_tol)


def number_problem(answer, what: str = "a number") -> str | None:
    """The message for an answer that is not a finite number, else None."""
    if answer is None:
        return "not answered yet"
    if isinstance(answer, bool) or not isinstance(answer, Real):
        return f"give {what}, not {type(answer).__name__}"
    if not math.isfinite(answer):
        return f"give a finite number, not {answer}"
    return None


def whole_number_problem(answer, what: str = "a whole number") -> str | None:
    """The message for an answer that is not a whole number, else None."""
    problem = number_problem(answer, what)
    if problem is None and not float(answer).is_integer():
        return f"give {what}, not {answer}"
    return problem


def fraction_problem(answer) -> str | None:
    """The message for an answer that is not a fraction between 0 and 1 (a percentage is named)."""
    problem = number_problem(answer, "a fraction between 0 and 1")
    if problem is None and 1 < answer <= 100:
        return f"give a fraction between 0 and 1, not a percentage ({answer}% is {answer / 100:g})"
    if problem is None and not 0 <= answer <= 1:
        return f"a fraction lies between 0 and 1, not {answer}"
    return problem


def bytes_unit_problem(answer: float, expected: float) -> str | None:
    """The message for a byte count given in GB or MB (1e9 or 1e6 bytes), else None."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if close(answer * scale, expected):
            return f"right amount, wrong unit: give bytes, not {unit} ({answer} {unit} = {answer * scale:,.0f} bytes)"
    return None


def first_match(answer: float, candidates, otherwise: str, rel_tol: float = 0.01) -> str:
    """The message of the first (value, message) pair whose value ``answer`` equals within
    ``rel_tol`` (0 for whole numbers: exactly), else ``otherwise``. The right answer comes
    first, each named mistake after it."""
    for value, message in candidates:
        if math.isclose(answer, value, rel_tol=rel_tol):
            return message
    return otherwise
