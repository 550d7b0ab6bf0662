"""
The number checks of frozen configuration values, in one place.

`BreakerConfig` and `AimdConfig` here, and gateway_client's `RetryPolicy` and `AcquirerConfig`,
validate themselves in `__post_init__` with these. Each raises ValueError naming the field; a
bool is never a number here (`True` is an int in Python, but `max_attempts=True` is a mistake).
"""

from __future__ import annotations

import math
from typing import TypeGuard

__all__ = [
    "positive_int",
    "positive_number",
    "positive_seconds",
]


def _is_finite_number(value: object) -> TypeGuard[int | float]:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def positive_int(name: str, value: object) -> None:
    """Raise ValueError unless `value` is an int >= 1 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1")


def positive_number(name: str, value: object, *, allow_none: bool = False) -> None:
    """Raise ValueError unless `value` is a finite int or float > 0 (or None if allowed)."""
    if value is None and allow_none:
        return
    if not _is_finite_number(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number")


def positive_seconds(
    name: str, value: object, *, allow_zero: bool = False, allow_none: bool = False
) -> None:
    """
    Raise ValueError unless `value` is a finite number of seconds, > 0 (or >= 0 with
    `allow_zero`; None with `allow_none`).
    """
    if value is None and allow_none:
        return
    if not _is_finite_number(value):
        raise ValueError(f"{name} must be a finite number of seconds")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} seconds")
