"""
Time as the client sees it: an injectable clock, so timing logic is exact and fast in tests.

Two readings, never mixed:

* `monotonic()`: seconds on a clock that never jumps (deadlines, elapsed times, backoff).
* `time()`: wall-clock seconds since the Unix epoch, UTC (HTTP-dates, `x-ratelimit-reset`,
  the `not_before` instant handed to callers).

`SystemClock` reads the machine's clocks. `ManualClock` only moves when told to: its `sleep`
advances both readings, so a test (or the simulator) that hands `clock=c, sleep=c.sleep` to
the client runs a 30 s backoff in microseconds and asserts the exact waits from `c.sleeps`.
"""

from __future__ import annotations

import threading
import time as _time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Two readings in seconds: `monotonic()` for durations, `time()` for the UTC epoch."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences are meaningful."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since 1970-01-01T00:00:00Z."""
        ...


class SystemClock:
    """The machine's clocks: `time.monotonic()` and `time.time()`."""

    def monotonic(self) -> float:
        """`time.monotonic()`, in seconds."""
        return _time.monotonic()

    def time(self) -> float:
        """`time.time()`, seconds since the Unix epoch (UTC)."""
        return _time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """
    A clock that moves only by `advance(seconds)` or `sleep(seconds)`; thread-safe.

    `monotonic` starts at `start` (default 0.0), `time()` at `wall` (default
    2019-06-03T11:00:00Z, the instant of docs/reference/retries.md's vectors). `sleeps` lists
    every duration passed to `sleep`, in order. Negative durations raise ValueError.
    """

    #: 2019-06-03T11:00:00Z as a Unix timestamp.
    DEFAULT_WALL = 1559559600.0

    def __init__(self, start: float = 0.0, wall: float = DEFAULT_WALL) -> None:
        self._lock = threading.Lock()
        self._monotonic = float(start)
        self._offset = float(wall) - float(start)
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        """The current monotonic reading, in seconds."""
        with self._lock:
            return self._monotonic

    def time(self) -> float:
        """The current wall-clock reading, seconds since the Unix epoch."""
        with self._lock:
            return self._monotonic + self._offset

    def advance(self, seconds: float) -> None:
        """Move both readings forward by `seconds` (>= 0) without recording a sleep."""
        if seconds < 0:
            raise ValueError("a clock cannot go back")
        with self._lock:
            self._monotonic += seconds

    def sleep(self, seconds: float) -> None:
        """Record `seconds` in `sleeps` and advance by it (a drop-in for `time.sleep`)."""
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        with self._lock:
            self.sleeps.append(seconds)
            self._monotonic += seconds

    def __repr__(self) -> str:
        return f"ManualClock(monotonic={self.monotonic()!r}, time={self.time()!r})"
