"""tests/support/windows.py: a test counting against fixed windows starts clear of their ends,
on an injected clock."""

from __future__ import annotations

import pytest

from tests.support.windows import clear_of_window_ends


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(
    ("now", "offsets", "slept"),
    [
        (1000.0, [30], []),  # the window ending at 1050 (990 + 60): 50 s away
        (1049.0, [30], [1.1]),  # 1 s before 1050: past it
        (1049.0, [30, 41], [1.1]),  # past 1050; 1061 is then 10.9 s away
        (1049.0, [30, 31], [1.1, 1.0]),  # past 1050, then 0.9 s before 1051: past that too
        (1000.5, [41, 12], [0.6]),  # 0.5 s before 1001: past it; 1032 is far
    ],
)
def test_it_sleeps_past_the_ends_within_the_margin_only(now, offsets, slept):
    clock = Clock(now)
    clear_of_window_ends(offsets, 60, clock=clock, sleep=clock.sleep)
    assert clock.slept == pytest.approx(slept)
    assert all((o - clock.now) % 60 >= 2 for o in offsets)


def test_ends_closer_together_than_the_margin_everywhere_are_refused():
    clock = Clock(0.0)
    with pytest.raises(AssertionError, match=r"no 2\.0 s clear"):
        clear_of_window_ends([0, 1, 2], 3, clock=clock, sleep=clock.sleep)
