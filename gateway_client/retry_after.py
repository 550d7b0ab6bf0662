"""
Reading the `Retry-After` header.

First cut: only the delay-seconds form of RFC 9110 section 10.2.3 (`1*DIGIT`, ASCII digits, no
sign, no fraction), with surrounding SP/HTAB ignored. Everything else, HTTP-dates included,
reads as None ("ignore the header, use the backoff"). The full parser, HTTP-dates in their
three forms, replaces this module later.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_delay_seconds"]

_DELAY_SECONDS = re.compile(r"[0-9]+")

# Beyond this the value is no longer a meaningful wait (and float() of a very long digit
# string overflows); it still says "not before a very long time", so it reads as infinity.
_MAX_DIGITS = 15


def parse_delay_seconds(value: str | None) -> float | None:
    """Return the delay in seconds of a `Retry-After: <digits>` header, else None."""
    if value is None:
        return None
    stripped = value.strip(" \t")
    if not _DELAY_SECONDS.fullmatch(stripped):
        return None
    digits = stripped.lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        return math.inf
    return float(int(digits))
