"""Argument checks shared by the cost models: one clear ValueError per bad input."""
from __future__ import annotations

import math

GB = 1e9  #: bytes in a GB (SI), as in GB/s = 1e9 B/s


def choice_error(what: str, value, choices) -> ValueError:
    """The error for a name that is not one of ``choices``; lists the valid ones."""
    return ValueError(f"unknown {what} {value!r}; choose one of: {', '.join(choices)}")


def check_nonnegative(**values: float) -> None:
    """ValueError unless every value is a finite number >= 0."""
    for name, value in values.items():
        if value is None or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def check_positive_int(**values) -> None:
    """ValueError unless every value is a whole number >= 1 (ints or whole floats, not bools)."""
    for name, value in values.items():
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not is_number or value != int(value) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def check_divisible(value: int, divisor: int, value_name: str, divisor_name: str) -> None:
    """ValueError unless ``divisor`` divides ``value``."""
    if value % divisor:
        raise ValueError(f"{value_name} ({value}) must be a multiple of {divisor_name} ({divisor})")
