"""
Backoff: how long to sleep before retry number n (n = 0 for the first retry), in seconds.

The client uses `full_jitter` only (AWS Architecture Blog, "Exponential Backoff And Jitter";
tenacity's `wait_random_exponential`):

    sleep = uniform(0, min(cap, base * 2**n))

The bound is computed without overflow for any n (`backoff_bound(1100, 0.5, 30)` is 30, with
no OverflowError), and the random number is drawn inside the bound: drawing first and capping
after would make almost every wait equal the cap.

The other strategies exist for the retry-storm simulator (`bench/simulate.py`), which
compares them using this same code:

| strategy             | sleep before retry n                                        |
| -------------------- | ----------------------------------------------------------- |
| `NoBackoff`          | 0                                                           |
| `FixedInterval(s)`   | s                                                           |
| `ExponentialBackoff` | min(cap, base * 2**n)                  (no jitter)          |
| `EqualJitter`        | b/2 + uniform(0, b/2), b = min(cap, base * 2**n)            |
| `FullJitter`         | uniform(0, min(cap, base * 2**n))                           |
| `DecorrelatedJitter` | min(cap, uniform(base, previous * 3)), previous starts at base |

`random` is always injected: a callable returning a float in [0, 1), such as
`random.Random(seed).random`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "Backoff",
    "DecorrelatedJitter",
    "EqualJitter",
    "ExponentialBackoff",
    "FixedInterval",
    "FullJitter",
    "NoBackoff",
    "backoff_bound",
    "full_jitter",
]

RandomSource = Callable[[], float]


def backoff_bound(n: int, base: float, cap: float) -> float:
    """
    Return min(cap, base * 2**n) in seconds, for n >= 0, without overflow for any n.

    `base` and `cap` are non-negative seconds. Raises ValueError for a negative n.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if base <= 0 or cap <= 0:
        return 0.0
    if base >= cap:
        return float(cap)
    # Smallest n at which base * 2**n reaches the cap; beyond it the bound is the cap, and
    # nothing is ever raised to a huge power.
    if n >= math.ceil(math.log2(cap) - math.log2(base)):
        return float(cap)
    return min(float(cap), math.ldexp(base, n))  # base * 2**n, exact, cannot overflow here


def full_jitter(n: int, base: float, cap: float, random: RandomSource) -> float:
    """Return uniform(0, min(cap, base * 2**n)) seconds, drawn inside the bound."""
    return random() * backoff_bound(n, base, cap)


class Backoff(Protocol):
    """A backoff strategy: `delay(n)` is the sleep before retry n (0-based), in seconds."""

    def delay(self, n: int) -> float:
        """Seconds to sleep before retry `n`."""
        ...


class NoBackoff:
    """Retry at once."""

    def delay(self, n: int) -> float:
        """Always 0."""
        return 0.0


class FixedInterval:
    """Retry every `interval` seconds (the naive strategy that synchronises a storm)."""

    def __init__(self, interval: float) -> None:
        self.interval = float(interval)

    def delay(self, n: int) -> float:
        """Always `interval`."""
        return self.interval


class ExponentialBackoff:
    """Capped exponential backoff without jitter: min(cap, base * 2**n)."""

    def __init__(self, base: float, cap: float) -> None:
        self.base, self.cap = float(base), float(cap)

    def delay(self, n: int) -> float:
        """min(cap, base * 2**n)."""
        return backoff_bound(n, self.base, self.cap)


class EqualJitter:
    """Half the exponential bound, plus uniform jitter over the other half."""

    def __init__(self, base: float, cap: float, random: RandomSource) -> None:
        self.base, self.cap, self.random = float(base), float(cap), random

    def delay(self, n: int) -> float:
        """b/2 + uniform(0, b/2) with b = min(cap, base * 2**n)."""
        half = backoff_bound(n, self.base, self.cap) / 2
        return half + self.random() * half


class FullJitter:
    """uniform(0, min(cap, base * 2**n)): what the client uses."""

    def __init__(self, base: float, cap: float, random: RandomSource) -> None:
        self.base, self.cap, self.random = float(base), float(cap), random

    def delay(self, n: int) -> float:
        """uniform(0, min(cap, base * 2**n))."""
        return full_jitter(n, self.base, self.cap, self.random)


class DecorrelatedJitter:
    """min(cap, uniform(base, previous * 3)), starting from previous = base; keeps state."""

    def __init__(self, base: float, cap: float, random: RandomSource) -> None:
        self.base, self.cap, self.random = float(base), float(cap), random
        self.previous = float(base)

    def delay(self, n: int) -> float:
        """The next decorrelated sleep (n is not used: the previous sleep is the state)."""
        low, high = self.base, self.previous * 3
        self.previous = min(self.cap, low + self.random() * (high - low))
        return self.previous
