"""Acquirer-wide conditions: validation, outage and flapping windows, rate limits, capacity,
latency. Times are epoch seconds handed in by the test, so every value is exact."""

from __future__ import annotations

import random
from typing import Any

import pytest

from sandbox_acquirer.conditions import (
    ENDPOINTS,
    ConditionError,
    ConditionSet,
    Latency,
    parse_cli_value,
    parse_condition,
)
from sandbox_acquirer.faults import Fault

#: A whole minute since the epoch (2026-11-29T17:00:00Z), so window arithmetic is readable.
T0 = 1_795_971_600.0
POST = "POST /charges"
GET = "GET /charges"


def conditions(**items: dict[str, Any]) -> ConditionSet:
    """A ConditionSet with ``items`` set at T0."""
    result = ConditionSet()
    result.reset(T0)
    for name, data in items.items():
        result.set(name, data, T0)
    return result


def headers_of(verdict: Any) -> dict[str, str]:
    return dict(verdict.headers)


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("outage", {}, "duration_seconds is required"),
        ("outage", {"duration_seconds": 0}, "duration_seconds must be a number > 0"),
        ("outage", {"duration_seconds": -5}, "duration_seconds"),
        ("outage", {"duration_seconds": 86401}, "<= 86400"),
        ("outage", {"duration_seconds": "10"}, "must be a number"),
        ("outage", {"duration_seconds": True}, "must be a number"),
        ("outage", {"duration_seconds": 10, "failure": 418}, "failure must be"),
        ("outage", {"duration_seconds": 10, "failure": "boom"}, "failure must be"),
        ("outage", {"duration_seconds": 10, "failure": True}, "failure must be"),
        ("outage", {"duration_seconds": 10, "retry_after": -1}, "retry_after must be"),
        ("outage", {"duration_seconds": 10, "retry_after": 1.5}, "retry_after must be"),
        ("outage", {"duration_seconds": 10, "retry_after": "soon"}, "retry_after must be"),
        ("outage", {"duration_seconds": 10, "failure": "reset", "retry_after": 5},
         "needs an HTTP status"),
        ("outage", {"duration_seconds": 10, "failure": "refused", "phase": "after_commit"},
         "before_commit"),
        ("outage", {"duration_seconds": 10, "phase": "later"}, "phase must be one of"),
        ("outage", {"duration_seconds": 10, "retry_after_format": "http"}, "retry_after_format"),
        ("outage", {"duration_seconds": 10, "endpoints": []}, "endpoints must be"),
        ("outage", {"duration_seconds": 10, "endpoints": ["POST /payouts"]}, "endpoints must be"),
        ("outage", {"duration_seconds": 10, "colour": "red"}, "unknown field(s) colour"),
        ("outage", [10], "must be a JSON object"),
        ("flapping", {"healthy_seconds": 5}, "failing_seconds is required"),
        ("flapping", {"healthy_seconds": 0, "failing_seconds": 5}, "healthy_seconds"),
        ("flapping", {"healthy_seconds": 5, "failing_seconds": 5, "start": "down"}, "start"),
        ("rate_limit", {"window_seconds": 60}, "limit is required"),
        ("rate_limit", {"limit": 0, "window_seconds": 60}, "limit must be an integer >= 1"),
        ("rate_limit", {"limit": 1.5, "window_seconds": 60}, "limit must be an integer"),
        ("rate_limit", {"limit": 5, "window_seconds": 0}, "window_seconds"),
        ("rate_limit", {"limit": 5, "window_seconds": 60, "mode": "tertiary"}, "mode"),
        ("rate_limit", {"limit": 5, "window_seconds": 60, "retry_after": "yes"}, "true or false"),
        ("capacity", {}, "max_per_second, max_concurrent or both"),
        ("capacity", {"max_per_second": 0}, "max_per_second"),
        ("capacity", {"max_concurrent": 5, "overload_delay_ms": 60001}, "overload_delay_ms"),
        ("latency", {"distribution": "fixed"}, "ms is required"),
        ("latency", {"distribution": "gamma", "ms": 5}, "distribution must be one of"),
        ("latency", {"distribution": "uniform", "min_ms": 10, "max_ms": 5}, "min_ms"),
        ("latency", {"distribution": "normal", "mean_ms": 10}, "sd_ms is required"),
        ("latency", {"distribution": "fixed", "ms": 1e309}, "ms must be a number"),
        ("latency", {"distribution": "fixed", "ms": 5, "seed": -1}, "seed"),
        ("weather", {}, "Unknown condition"),
    ],
)  # fmt: skip
def test_invalid_condition_is_refused_with_a_clear_message(
    name: str, data: Any, message: str
) -> None:
    """Each bad value raises ConditionError naming the field (the control API's 400)."""
    with pytest.raises(ConditionError) as caught:
        parse_condition(name, data, T0)

    assert message in caught.value.detail


def test_outage_defaults_to_503_before_commit_on_every_endpoint() -> None:
    """An outage given only a duration fails every acquirer endpoint with 503 before commit."""
    outage = parse_condition("outage", {"duration_seconds": 10}, T0)

    assert outage.to_json() == {
        "starts_at": T0,
        "ends_at": T0 + 10,
        "duration_seconds": 10,
        "failure": 503,
        "phase": "before_commit",
        "endpoints": list(ENDPOINTS),
    }


def test_cli_value_reads_key_value_pairs_as_json_scalars() -> None:
    """`failure=503,duration_seconds=2.5,retry_after=until_end` becomes typed values."""
    assert parse_cli_value("failure=503,duration_seconds=2.5,retry_after=until_end") == {
        "failure": 503,
        "duration_seconds": 2.5,
        "retry_after": "until_end",
    }


def test_cli_value_reads_an_endpoint_with_a_space() -> None:
    """`endpoints=POST /charges` names one endpoint."""
    assert parse_cli_value("duration_seconds=1,endpoints=POST /charges")["endpoints"] == [POST]


def test_cli_value_accepts_a_json_object() -> None:
    """A value starting with { is parsed as JSON."""
    assert parse_cli_value('{"limit": 5, "window_seconds": 60}') == {
        "limit": 5,
        "window_seconds": 60,
    }


def test_cli_value_without_equals_is_refused() -> None:
    """`duration_seconds` alone is not key=value."""
    with pytest.raises(ConditionError, match="key=value"):
        parse_cli_value("duration_seconds")


# -- outage and flapping ------------------------------------------------------------------------


def test_outage_fails_from_its_start_until_just_before_its_end() -> None:
    """A 10 s outage fails at 0 s and 9.999 s, not at 10 s."""
    active = conditions(outage={"duration_seconds": 10})

    assert active.window_fault(T0, POST, "before_commit") is not None
    assert active.window_fault(T0 + 9.999, POST, "before_commit") is not None
    assert active.window_fault(T0 + 10, POST, "before_commit") is None


def test_delayed_outage_starts_later() -> None:
    """start_in_seconds=5 leaves the first 5 s healthy."""
    active = conditions(outage={"duration_seconds": 10, "start_in_seconds": 5})

    assert active.window_fault(T0 + 4.999, POST, "before_commit") is None
    assert active.window_fault(T0 + 5, POST, "before_commit") is not None


def test_outage_fault_carries_status_and_retry_after() -> None:
    """failure=502 with retry_after=7 gives that status and a 7 s Retry-After."""
    active = conditions(outage={"duration_seconds": 10, "failure": 502, "retry_after": 7})

    assert active.window_fault(T0, POST, "before_commit") == Fault(
        kind="status", status=502, retry_after_seconds=7, reason="outage"
    )


def test_retry_after_until_end_counts_down_to_the_window_end() -> None:
    """retry_after=until_end is the rest of the outage, rounded up."""
    active = conditions(outage={"duration_seconds": 10, "retry_after": "until_end"})

    fault = active.window_fault(T0 + 2.5, POST, "before_commit")

    assert fault is not None and fault.retry_after_seconds == 8


def test_outage_applies_only_to_its_phase() -> None:
    """An after-commit outage is not reported for the before-commit phase."""
    active = conditions(outage={"duration_seconds": 10, "phase": "after_commit"})

    assert active.window_fault(T0, POST, "before_commit") is None
    assert active.window_fault(T0, POST, "after_commit") is not None


def test_outage_applies_only_to_its_endpoints() -> None:
    """An outage of POST /charges leaves look-ups working."""
    active = conditions(outage={"duration_seconds": 10, "endpoints": [POST]})

    assert active.window_fault(T0, GET, "before_commit") is None
    assert active.window_fault(T0, POST, "before_commit") is not None


def test_refused_outage_refuses_connections() -> None:
    """failure=refused makes refuses() true during the window only."""
    active = conditions(outage={"duration_seconds": 10, "failure": "refused"})

    assert active.refuses(T0 + 1, POST) is True
    assert active.refuses(T0 + 11, POST) is False


def test_flapping_alternates_healthy_and_failing_periods() -> None:
    """healthy 3 s then failing 2 s, repeating: healthy at 0-3, failing at 3-5, healthy at 5."""
    active = conditions(flapping={"healthy_seconds": 3, "failing_seconds": 2})
    states = [
        active.window_fault(T0 + offset, POST, "before_commit") is not None
        for offset in (0, 2.999, 3, 4.999, 5, 8, 10)
    ]

    assert states == [False, False, True, True, False, True, False]


def test_flapping_can_start_failing() -> None:
    """start=failing puts the failing period first."""
    active = conditions(flapping={"healthy_seconds": 3, "failing_seconds": 2, "start": "failing"})

    assert active.window_fault(T0, POST, "before_commit") is not None
    assert active.window_fault(T0 + 2, POST, "before_commit") is None
    assert active.window_fault(T0 + 5, POST, "before_commit") is not None


def test_flapping_retry_after_until_end_counts_to_the_end_of_the_failing_period() -> None:
    """During a failing period, until_end is the time left in that period."""
    active = conditions(
        flapping={"healthy_seconds": 3, "failing_seconds": 2, "retry_after": "until_end"}
    )

    fault = active.window_fault(T0 + 3.5, POST, "before_commit")

    assert fault is not None and fault.retry_after_seconds == 2


# -- rate limit -------------------------------------------------------------------------------


def test_rate_limit_allows_up_to_the_limit_then_refuses() -> None:
    """limit 2 per 60 s: two requests pass, the third is refused."""
    active = conditions(rate_limit={"limit": 2, "window_seconds": 60})

    verdicts = [active.rate_limit("acct_1", POST, T0 + 1).allowed for _ in range(3)]

    assert verdicts == [True, True, False]


def test_rate_limit_headers_have_exact_values() -> None:
    """Within the limit: GitHub headers with the absolute reset epoch, IETF draft-10 fields."""
    active = conditions(rate_limit={"limit": 5, "window_seconds": 60})

    verdict = active.rate_limit("acct_1", POST, T0 + 20.5)

    assert headers_of(verdict) == {
        "x-ratelimit-limit": "5",
        "x-ratelimit-remaining": "4",
        "x-ratelimit-reset": str(int(T0) + 60),
        "x-ratelimit-used": "1",
        "x-ratelimit-resource": "charges",
        "RateLimit-Policy": '"default";q=5;w=60;pk=:YWNjdF8x:',
        "RateLimit": '"default";r=4;t=40',
    }
    assert verdict.retry_after is None


def test_rate_limited_request_gets_retry_after_until_the_reset() -> None:
    """Over the limit: remaining 0, Retry-After = whole seconds until the window resets."""
    active = conditions(rate_limit={"limit": 1, "window_seconds": 60})
    active.rate_limit("acct_1", POST, T0 + 10)

    verdict = active.rate_limit("acct_1", POST, T0 + 20.5)

    assert verdict.allowed is False
    assert verdict.retry_after == 40
    assert headers_of(verdict)["x-ratelimit-remaining"] == "0"
    assert headers_of(verdict)["x-ratelimit-reset"] == str(int(T0) + 60)
    assert headers_of(verdict)["RateLimit"] == '"default";r=0;t=40'


def test_rate_limit_window_resets_on_its_boundary() -> None:
    """A new window (aligned on multiples of window_seconds) restores the quota."""
    active = conditions(rate_limit={"limit": 1, "window_seconds": 60})
    active.rate_limit("acct_1", POST, T0 + 59)

    assert active.rate_limit("acct_1", POST, T0 + 59.999).allowed is False
    assert active.rate_limit("acct_1", POST, T0 + 60).allowed is True


def test_rate_limit_is_counted_per_api_key() -> None:
    """Another account has its own quota."""
    active = conditions(rate_limit={"limit": 1, "window_seconds": 60})
    active.rate_limit("acct_1", POST, T0)

    assert active.rate_limit("acct_2", POST, T0).allowed is True


def test_rate_limit_headers_can_be_switched_off() -> None:
    """github_headers=false and ietf_headers=false leave only Retry-After."""
    active = conditions(
        rate_limit={"limit": 1, "window_seconds": 60, "github_headers": False,
                    "ietf_headers": False}
    )  # fmt: skip
    active.rate_limit("acct_1", POST, T0)

    verdict = active.rate_limit("acct_1", POST, T0)

    assert verdict.headers == ()
    assert verdict.retry_after == 60


def test_rate_limit_retry_after_can_be_switched_off() -> None:
    """retry_after=false: the 429 relies on the quota headers alone."""
    active = conditions(rate_limit={"limit": 1, "window_seconds": 60, "retry_after": False})
    active.rate_limit("acct_1", POST, T0)

    assert active.rate_limit("acct_1", POST, T0).retry_after is None


def test_secondary_limit_has_no_quota_or_reset_headers() -> None:
    """mode=secondary: refused without x-ratelimit-* or RateLimit fields, no Retry-After."""
    active = conditions(rate_limit={"limit": 1, "window_seconds": 60, "mode": "secondary"})
    first = active.rate_limit("acct_1", POST, T0)

    second = active.rate_limit("acct_1", POST, T0)

    assert (first.allowed, first.headers) == (True, ())
    assert (second.allowed, second.mode, second.headers, second.retry_after) == (
        False, "secondary", (), None,
    )  # fmt: skip


def test_rate_limit_ignores_endpoints_outside_its_list() -> None:
    """A limit on POST /charges does not count look-ups."""
    active = conditions(rate_limit={"limit": 1, "window_seconds": 60, "endpoints": [POST]})

    assert all(active.rate_limit("acct_1", GET, T0).allowed for _ in range(5))


# -- capacity ---------------------------------------------------------------------------------


def test_capacity_admits_max_per_second_in_each_second() -> None:
    """max_per_second 2: the third request within one second is refused; the next second
    admits again."""
    active = conditions(capacity={"max_per_second": 2})

    admitted = [active.admit(T0 + 0.1 * index, 1).admitted for index in range(3)]

    assert admitted == [True, True, False]
    assert active.admit(T0 + 1, 1).admitted is True


def test_capacity_refuses_above_max_concurrent() -> None:
    """max_concurrent 3: a request that would be the fourth in flight is refused."""
    active = conditions(capacity={"max_concurrent": 3})

    assert active.admit(T0, 3).admitted is True
    assert active.admit(T0, 4).admitted is False


def test_capacity_refusal_carries_its_delay_and_retry_after() -> None:
    """overload_delay_ms and retry_after are handed to the refused request."""
    active = conditions(capacity={"max_concurrent": 1, "overload_delay_ms": 250, "retry_after": 2})

    verdict = active.admit(T0, 2)

    assert (verdict.delay_seconds, verdict.retry_after) == (0.25, 2)


# -- latency ----------------------------------------------------------------------------------


def test_fixed_latency_is_constant() -> None:
    """distribution=fixed, ms=40: every draw is 0.04 s."""
    active = conditions(latency={"distribution": "fixed", "ms": 40})

    assert [active.latency() for _ in range(3)] == [0.04, 0.04, 0.04]


def test_seeded_latency_repeats_after_a_reset() -> None:
    """The same seed gives the same sequence of draws."""
    data = {"distribution": "normal", "mean_ms": 50, "sd_ms": 10, "seed": 7}
    first = conditions(latency=data)
    second = conditions(latency=data)

    assert [first.latency() for _ in range(5)] == [second.latency() for _ in range(5)]


def test_uniform_latency_stays_within_its_bounds() -> None:
    """uniform 10..20 ms draws between 0.01 and 0.02 s."""
    active = conditions(latency={"distribution": "uniform", "min_ms": 10, "max_ms": 20, "seed": 1})

    draws = [active.latency() for _ in range(200)]

    assert min(draws) >= 0.01 and max(draws) <= 0.02


def test_normal_latency_never_draws_a_negative_delay() -> None:
    """A normal draw below zero counts as zero."""
    latency = Latency("normal", mean_ms=0, sd_ms=100)
    rng = random.Random(3)

    assert min(latency.draw(rng) for _ in range(200)) == 0.0


def test_no_latency_condition_means_no_delay() -> None:
    """Without a latency condition the draw is 0."""
    assert conditions().latency() == 0.0


# -- set, clear, reset --------------------------------------------------------------------------


def test_reset_drops_conditions_set_at_run_time() -> None:
    """reset() removes what the control API set."""
    active = conditions(outage={"duration_seconds": 10})

    active.reset(T0)

    assert active.to_json()["outage"] is None


def test_reset_reapplies_the_baseline_with_a_fresh_timer() -> None:
    """A command-line outage restarts at the reset instant."""
    active = ConditionSet({"outage": {"duration_seconds": 10}})
    active.reset(T0)

    active.reset(T0 + 100)

    assert active.window_fault(T0 + 105, POST, "before_commit") is not None
    assert active.window_fault(T0 + 110, POST, "before_commit") is None


def test_invalid_baseline_is_refused_at_construction() -> None:
    """A bad command-line condition fails at start, not at the first request."""
    with pytest.raises(ConditionError):
        ConditionSet({"outage": {"duration_seconds": -1}})


def test_clear_removes_one_condition() -> None:
    """clear(name) removes that condition only."""
    active = conditions(outage={"duration_seconds": 10}, latency={"ms": 5})

    active.clear("outage")

    assert active.to_json()["outage"] is None
    assert active.to_json()["latency"] == {"distribution": "fixed", "ms": 5, "seed": None}
