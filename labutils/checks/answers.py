"""Reading and judging a student's answer: what every chapter's self-check shares.

A self-check turns the answer a student typed into one line of text:

* ``"not answered yet"`` while the answer is still ``None``;
* what kind of answer is wanted, when it is not one yet: text such as ``"42"``, a list,
  ``True``, ``nan``, a percentage where a fraction is asked, GB where bytes are asked;
* else the message of the first (value, message) pair the answer equals: the right value
  first (its message starts with "correct:" and shows the working), then each usual mistake
  with the number it produces, and a hint when the answer matches none of them.

Each ``*_problem`` function returns that message, or ``None`` when the answer can be judged,
so a check reads as one chain (the right answer and the mistakes are computed just above)::

    return number_problem(answer, "a number of bytes") or first_match(answer, [
        (expected, f"correct: 2(n-1)/n x S = {expected:.3g} bytes"),
        (expected / 2, "that is one half of the all-reduce; it does both halves"),
    ], "not quite: a ring all-reduce sends 2(n-1)/n x S")

The helpers compare plain numbers: each check says in its docstring and its messages which
unit it asks for (bytes, seconds, GB = 1e9 bytes, GB/s = 1e9 bytes/s, a fraction from 0 to 1).
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Iterable

NOT_ANSWERED = "not answered yet"


def close(value: float, expected: float, rel_tol: float = 0.01) -> bool:
    """True when ``value`` is within ``rel_tol`` (a fraction: 0.01 is 1%) of ``expected``."""
    return math.isclose(value, expected, rel_tol=rel_tol)


def number_problem(answer, what: str = "a number", *, finite: str = "a finite number",
                   show_type: bool = False) -> str | None:
    """The message for an answer that is not a finite number yet, else None.

    ``None`` gives "not answered yet"; text, a list or ``True``/``False`` give
    "give {what}, not '42'" (``show_type=True``: "not str", the name of the answer's type);
    inf or nan give "give {finite}, not nan". ``what`` and ``finite`` name the unit asked for,
    e.g. "a number of bytes". Any real number passes (int, float, NumPy scalars).
    """
    if answer is None:
        return NOT_ANSWERED
    if isinstance(answer, bool) or not isinstance(answer, Real):
        return f"give {what}, not {type(answer).__name__ if show_type else repr(answer)}"
    if not math.isfinite(answer):
        return f"give {finite}, not {answer}"
    return None


def whole_number_problem(answer, what: str = "a whole number") -> str | None:
    """The message for an answer that is not a whole number (a count: GPUs, messages,
    microbatches), else None. ``8.0`` counts as whole; ``7.5`` gives "give {what}, not 7.5"."""
    problem = number_problem(answer, what, show_type=True)
    if problem is None and not float(answer).is_integer():
        return f"give {what}, not {answer}"
    return problem


def fraction_problem(answer) -> str | None:
    """The message for an answer that is not a fraction from 0 to 1, else None; an answer
    between 1 and 100 is named as a percentage (17.9 -> "17.9% is 0.179")."""
    problem = number_problem(answer, "a fraction between 0 and 1", show_type=True)
    if problem is None and 1 < answer <= 100:
        return f"give a fraction between 0 and 1, not a percentage ({answer}% is {answer / 100:g})"
    if problem is None and not 0 <= answer <= 1:
        return f"a fraction lies between 0 and 1, not {answer}"
    return problem


def bytes_problem(answer, expected: float) -> str | None:
    """The message for an answer that is not a number of bytes, else None: not a number (as
    :func:`number_problem` says), or the right amount given in GB (1e9 bytes) or MB (1e6
    bytes): ``answer`` x 1e9 or x 1e6 within 1% of ``expected`` (bytes)."""
    problem = number_problem(answer, "a number of bytes", show_type=True)
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if problem is None and close(answer * scale, expected):
            return f"right amount, wrong unit: give bytes, not {unit} ({answer} {unit} = {answer * scale:,.0f} bytes)"
    return problem


def name_problem(answer, what: str, example: str) -> str | None:
    """The message for an answer that should be a name (text) and is not, else None:
    ``None`` gives "not answered yet", anything else 'give {what} as a string, e.g. "{example}"'."""
    if answer is None:
        return NOT_ANSWERED
    if not isinstance(answer, str):
        return f'give {what} as a string, e.g. "{example}", not {answer!r}'
    return None


def first_match(answer: float, candidates: Iterable[tuple[float, str]], otherwise: str, *,
                rel_tol: float = 0.01) -> str:
    """The message of the first (value, message) pair in ``candidates`` whose value ``answer``
    equals within ``rel_tol`` (a fraction of the larger of the two; 0: exactly, for counts),
    else ``otherwise``. ``candidates`` lists the right value first, then the named mistakes."""
    return next((message for value, message in candidates if math.isclose(answer, value, rel_tol=rel_tol)),
                otherwise)
