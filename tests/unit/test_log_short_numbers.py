"""The log lines' number shortening (``observability.log_config._short_numbers``) gives what its
former implementation gave, for a generated corpus of values of every kind a line can carry:
exact types and their subclasses (enums, bool), floats at and around the limits (NaN, inf),
integers around 12 digits, and containers nested in each other."""

from __future__ import annotations

import enum
import math
import random
from typing import Any

import pytest

from observability.log_config import _short_numbers


def reference(value: Any) -> Any:
    """The former ``_short_number``: one ``isinstance`` chain for every value."""
    if isinstance(value, float):
        return round(value, 4) if abs(value) < 1e8 else str(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**11:
        return str(value)
    if isinstance(value, dict):
        return {name: reference(item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [reference(item) for item in value]
    return value


class Code(enum.IntEnum):
    SMALL = 7
    LONG = 4111111111111111


class Word(enum.StrEnum):
    OK = "ok"


class Amount(float):
    pass


SCALARS: list[Any] = [
    None, True, False, 0, 1, -1, 99_999_999_999, 100_000_000_000, -100_000_000_000,
    4111111111111111, 0.0, -0.0, 0.123456789, 1e8, 1e8 - 1, -1e8, 12345678.98765, math.nan,
    math.inf, -math.inf, "", "text", "4111111111111111", b"bytes", Code.SMALL, Code.LONG,
    Word.OK, Amount(3.14159265), Amount(1e9), object,
]  # fmt: skip


def generated(rng: random.Random, depth: int = 0) -> Any:
    """A scalar, or (at most three levels deep) a dict, list or tuple of generated values."""
    if depth < 3 and rng.random() < 0.3:
        kind = rng.choice((dict, list, tuple))
        items = [generated(rng, depth + 1) for _ in range(rng.randrange(4))]
        if kind is dict:
            return {f"k{n}": item for n, item in enumerate(items)}
        return kind(items)
    if rng.random() < 0.5:
        return rng.choice(SCALARS)
    return rng.choice(
        (rng.uniform(-1e10, 1e10), rng.randrange(-(10**13), 10**13), str(rng.random()))
    )


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and of the same type at every level."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("seed", range(20))
def test_the_same_as_the_former_implementation(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        event = {f"field{n}": generated(rng) for n in range(rng.randrange(1, 12))}
        assert same(
            _short_numbers(None, "info", event), {k: reference(v) for k, v in event.items()}
        )


def test_every_scalar() -> None:
    for value in SCALARS:
        assert same(_short_numbers(None, "info", {"v": value}), {"v": reference(value)}), value
