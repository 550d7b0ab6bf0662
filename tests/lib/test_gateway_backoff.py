"""Backoff bounds and strategies: docs/reference/retries.md's full-jitter vectors, and others."""

from __future__ import annotations

import itertools

import pytest

from resilience.backoff import (
    DecorrelatedJitter,
    EqualJitter,
    ExponentialBackoff,
    FixedInterval,
    FullJitter,
    NoBackoff,
    backoff_bound,
    full_jitter,
)


@pytest.mark.parametrize(
    ("n", "bound"),
    [(0, 0.5), (3, 4.0), (5, 16.0), (6, 30.0), (1100, 30.0)],
)
def test_reference_bounds(n: int, bound: float) -> None:
    """base 0.5, cap 30: bounds 0.5, 4, 16, 30 (32 capped) and 30 at n=1100."""
    assert backoff_bound(n, 0.5, 30) == bound


def test_attempt_zero_with_u_half_sleeps_a_quarter() -> None:
    """base 0.5, cap 30, n = 0, u = 0.5: 0.25 s."""
    assert full_jitter(0, 0.5, 30, lambda: 0.5) == 0.25


@pytest.mark.parametrize("n", [1024, 1100, 10**6, 10**18])
def test_huge_n_does_not_overflow(n: int) -> None:
    """Any n gives the cap without OverflowError."""
    assert backoff_bound(n, 0.5, 30) == 30.0
    assert full_jitter(n, 0.5, 30, lambda: 0.5) == 15.0


def test_tiny_base_huge_n_does_not_overflow() -> None:
    """A tiny base needs a large n to reach the cap, still without overflow."""
    assert backoff_bound(2000, 1e-300, 1e10) == 1e10
    assert backoff_bound(100, 1e-300, 1e10) == pytest.approx(1e-300 * 2**100)


def test_negative_n_is_refused() -> None:
    """n < 0 raises ValueError."""
    with pytest.raises(ValueError, match=r"^n must be >= 0$"):
        backoff_bound(-1, 0.5, 30)


def test_draw_is_inside_the_bound() -> None:
    """The draw scales the bound: u = 0.999 gives 0.999 x bound, not the cap."""
    assert full_jitter(6, 0.5, 30, lambda: 0.999) == pytest.approx(29.97)
    assert full_jitter(1, 0.5, 30, lambda: 0.999) == pytest.approx(0.999)


def test_bound_is_monotonic_and_capped() -> None:
    """The bound never decreases with n and never exceeds the cap."""
    bounds = [backoff_bound(n, 0.2, 2.0) for n in range(40)]
    assert bounds == sorted(bounds)
    assert max(bounds) == 2.0
    assert bounds[:4] == pytest.approx([0.2, 0.4, 0.8, 1.6])


def test_zero_base_means_no_wait() -> None:
    """base 0 gives a bound of 0."""
    assert backoff_bound(5, 0.0, 2.0) == 0.0


def test_no_backoff_and_fixed_interval() -> None:
    """NoBackoff is 0; FixedInterval(2) is 2 for every n."""
    assert [NoBackoff().delay(n) for n in range(3)] == [0.0, 0.0, 0.0]
    assert [FixedInterval(2).delay(n) for n in range(3)] == [2.0, 2.0, 2.0]


def test_exponential_without_jitter() -> None:
    """ExponentialBackoff(5, 2000) doubles from 5 up to the cap."""
    assert [ExponentialBackoff(5, 2000).delay(n) for n in (0, 1, 2, 8, 9)] == [
        5.0,
        10.0,
        20.0,
        1280.0,
        2000.0,
    ]


def test_equal_jitter_is_half_plus_uniform_half() -> None:
    """EqualJitter: b/2 + u * b/2."""
    assert EqualJitter(0.5, 30, lambda: 0.5).delay(3) == 3.0
    assert EqualJitter(0.5, 30, lambda: 0.0).delay(3) == 2.0


def test_full_jitter_strategy_uses_full_jitter() -> None:
    """FullJitter.delay(n) equals full_jitter(n, base, cap, random)."""
    assert FullJitter(0.5, 30, lambda: 0.25).delay(5) == 4.0


def test_decorrelated_jitter_grows_from_base_and_is_capped() -> None:
    """Decorrelated: min(cap, U(base, previous * 3)) from previous = base."""
    draws = itertools.cycle([1.0 - 1e-12])
    strategy = DecorrelatedJitter(5, 100, lambda: next(draws))
    delays = [strategy.delay(n) for n in range(4)]
    assert delays == pytest.approx([15.0, 45.0, 100.0, 100.0])
    low = DecorrelatedJitter(5, 100, lambda: 0.0)
    assert [low.delay(n) for n in range(3)] == [5.0, 5.0, 5.0]
