"""An injected clock and wait for unit tests of timing logic: time moves only when a test (or
a fake wait) moves it, so every delay and header value is exact and nothing sleeps."""

from __future__ import annotations

from datetime import datetime, timedelta

__all__ = ["FakeClock", "FakeWait"]


class FakeClock:
    """A clock (``Callable[[], datetime]``) that stands still at ``start`` (aware) until
    ``advance(seconds)`` moves it."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class FakeWait:
    """A ``wait(seconds)`` that records every pause in ``calls`` and moves ``clock`` instead
    of sleeping; returns ``False`` (not interrupted), like ``threading.Event.wait``."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> bool:
        self.calls.append(seconds)
        self.clock.advance(seconds)
        return False
