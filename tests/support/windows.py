"""Tests that count requests against a fixed window (payments/api/limits.py) on the real clock:
a count starts again at its window's end, so a test whose requests straddled one would see an
answer allowed where it expects the refusal. They start clear of every end they depend on."""

from __future__ import annotations

import time
from collections.abc import Callable


def clear_of_window_ends(
    offsets: list[int],
    window: int,
    *,
    margin: float = 2.0,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once no window of ``window`` seconds starting at one of ``offsets`` (seconds past
    a multiple of ``window`` in Unix time, as ``authentication_window_offset`` and
    ``request_rate_window_offset`` give them) ends within ``margin`` seconds, sleeping past
    the ends that do. Raises ``AssertionError`` if the ends leave no such gap."""
    for _ in range(len(offsets) + 1):
        soonest = min((offset - clock()) % window for offset in offsets)
        if soonest >= margin:
            return
        sleep(soonest + 0.1)
    raise AssertionError(f"no {margin} s clear of the ends of windows at {offsets} / {window} s")
