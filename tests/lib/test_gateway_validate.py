"""The one validator module: every config type refuses the same bad numbers the same way."""

from __future__ import annotations

import math

import pytest

from gateway_client.policy import RetryPolicy
from gateway_client.types import AcquirerConfig
from resilience.aimd import AimdConfig
from resilience.breaker_types import BreakerConfig
from resilience.validate import positive_int, positive_number, positive_seconds


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3", None])
def test_positive_int_refuses_what_is_not_an_integer_of_at_least_one(value: object) -> None:
    """0, negatives, floats, bools, strings and None are refused, naming the field."""
    with pytest.raises(ValueError, match=r"^field must be an integer >= 1$"):
        positive_int("field", value)


@pytest.mark.parametrize("value", [0, -0.1, math.inf, math.nan, False, "1"])
def test_positive_number_and_seconds_refuse_zero_infinite_and_non_numbers(value: object) -> None:
    """Zero, negatives, inf, nan, bools and strings are refused by both."""
    with pytest.raises(ValueError, match=r"^field must be"):
        positive_number("field", value)
    with pytest.raises(ValueError, match=r"^field must be"):
        positive_seconds("field", value)


def test_allow_zero_and_allow_none_widen_only_what_they_say() -> None:
    """allow_zero admits 0 (never a negative); allow_none admits None."""
    positive_seconds("field", 0, allow_zero=True)
    positive_seconds("field", None, allow_none=True)
    positive_number("field", None, allow_none=True)
    with pytest.raises(ValueError, match=">= 0"):
        positive_seconds("field", -1, allow_zero=True)
    with pytest.raises(ValueError, match=r"^field must be a finite number of seconds$"):
        positive_seconds("field", None)


@pytest.mark.parametrize(
    "build",
    [
        lambda: RetryPolicy(deadline=0),
        lambda: RetryPolicy(max_attempts=True),
        lambda: AcquirerConfig(base_url="http://a", api_key="k", connect_timeout=math.inf),
        lambda: BreakerConfig(open_duration=-1),
        lambda: BreakerConfig(half_open_permits=0),
        lambda: AimdConfig(slot_lease=0),
        lambda: AimdConfig(poll_interval=True),
    ],
)
def test_every_config_type_uses_the_validators(build) -> None:
    """RetryPolicy, AcquirerConfig, BreakerConfig and AimdConfig refuse bad numbers."""
    with pytest.raises(ValueError, match="must be"):
        build()
