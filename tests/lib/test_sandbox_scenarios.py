"""Sandbox tokens (scenarios.resolve_scenario) and the Retry-After values of injected faults."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sandbox_acquirer.faults import PROBLEMS, Fault, format_http_date, retry_after_value
from sandbox_acquirer.models import InvalidRequest
from sandbox_acquirer.scenarios import ALWAYS, Scenario, ScenarioSettings, resolve_scenario

SETTINGS = ScenarioSettings(hang_seconds=2.0, trickle_seconds_per_byte=0.5)
NOW = datetime(2019, 6, 3, 11, 0, 0, tzinfo=UTC).timestamp()


def resolve(token: str) -> Scenario:
    return resolve_scenario(token, SETTINGS)


# -- tokens ---------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["tok_visa", "tok_mastercard", "tok_", "tok_fail", "tok_slowly"])
def test_unknown_and_plain_tokens_are_approved_without_faults(token: str) -> None:
    """tok_visa and tokens the sandbox does not know resolve to a plain approval."""
    assert resolve(token) == Scenario()


@pytest.mark.parametrize("status", sorted(PROBLEMS))
def test_fail_token_fails_the_first_n_attempts_with_its_status(status: int) -> None:
    """tok_fail_<status>_<n> fails n attempts with that status, then approves."""
    scenario = resolve(f"tok_fail_{status}_3")

    assert scenario.fail_attempts == 3
    assert scenario.failure == Fault(kind="status", status=status, reason="tok_fail")
    assert scenario.status == "approved"


def test_fail_token_with_zero_attempts_never_fails() -> None:
    """tok_fail_503_0 is a plain approval in effect."""
    assert resolve("tok_fail_503_0").fail_attempts == 0


@pytest.mark.parametrize(
    "token",
    ["tok_fail_418_1", "tok_fail_503", "tok_fail_503_", "tok_fail_503_x", "tok_fail_503_1001",
     "tok_fail_abc_1", "tok_fail_200_1", "tok_fail__1"],
)  # fmt: skip
def test_malformed_fail_token_is_invalid(token: str) -> None:
    """An unsupported status or a bad count in tok_fail_ is a 400, not an approval."""
    with pytest.raises(InvalidRequest, match="tok_fail_<status>_<n>"):
        resolve(token)


def test_ratelimit_token_fails_once_with_delay_seconds() -> None:
    """tok_ratelimit_7: one 429 with Retry-After as delay-seconds 7."""
    scenario = resolve("tok_ratelimit_7")

    assert scenario.fail_attempts == 1
    assert scenario.failure == Fault(
        kind="status", status=429, retry_after_seconds=7, reason="tok_ratelimit"
    )


def test_ratelimit_date_token_fails_once_with_an_http_date() -> None:
    """tok_ratelimit_date_7: one 429 whose Retry-After is a date 7 s ahead."""
    scenario = resolve("tok_ratelimit_date_7")

    assert scenario.failure is not None
    assert scenario.failure.retry_after_format == "date"
    assert scenario.failure.retry_after_seconds == 7


@pytest.mark.parametrize(
    "token", ["tok_ratelimit_", "tok_ratelimit_-1", "tok_ratelimit_1.5", "tok_ratelimit_86401",
              "tok_ratelimit_date_", "tok_ratelimit_date_x"],
)  # fmt: skip
def test_malformed_ratelimit_token_is_invalid(token: str) -> None:
    """A Retry-After that is not whole seconds from 0 to 86400 is a 400."""
    with pytest.raises(InvalidRequest):
        resolve(token)


@pytest.mark.parametrize("token", ["tok_reset_before_commit", "tok_close_before_commit"])
def test_connection_faults_before_commit_hit_every_attempt(token: str) -> None:
    """tok_reset_before_commit and tok_close_before_commit fail every attempt, unanswered."""
    scenario = resolve(token)

    assert scenario.fail_attempts == ALWAYS
    assert scenario.failure is not None and not scenario.failure.answers


@pytest.mark.parametrize(("token", "reply"), [("tok_reset_after_commit", "reset"),
                                              ("tok_close_after_commit", "close")])  # fmt: skip
def test_connection_faults_after_commit_record_then_drop(token: str, reply: str) -> None:
    """The after-commit connection tokens record the charge, then drop the connection."""
    scenario = resolve(token)

    assert scenario.reply == reply
    assert scenario.fail_attempts == 0


def test_trickle_uses_the_configured_pace() -> None:
    """tok_trickle sends one byte per trickle_seconds_per_byte (here 0.5 s)."""
    assert resolve("tok_trickle").trickle_seconds_per_byte == 0.5


def test_trickle_with_milliseconds_sets_its_own_pace() -> None:
    """tok_trickle_20 sends one byte per 20 ms."""
    assert resolve("tok_trickle_20").trickle_seconds_per_byte == 0.02


def test_lookup_lag_token_sets_the_lag_in_seconds() -> None:
    """tok_lookup_lag_90 hides the charge from look-ups for 90 s."""
    assert resolve("tok_lookup_lag_90").lookup_lag_seconds == 90.0


def test_malformed_lookup_lag_is_invalid() -> None:
    """tok_lookup_lag_ without whole seconds is a 400."""
    with pytest.raises(InvalidRequest):
        resolve("tok_lookup_lag_soon")


def test_timeout_after_commit_uses_hang_seconds() -> None:
    """tok_timeout_after_commit waits hang_seconds after recording."""
    assert resolve("tok_timeout_after_commit").reply_delay_seconds == 2.0


# -- Retry-After values -----------------------------------------------------------------------


def test_http_date_is_imf_fixdate_in_gmt() -> None:
    """format_http_date renders RFC 9110's IMF-fixdate, always GMT."""
    assert format_http_date(NOW + 1812) == "Mon, 03 Jun 2019 11:30:12 GMT"


def test_retry_after_seconds_is_the_plain_number() -> None:
    """A delay-seconds Retry-After is the digits alone."""
    assert retry_after_value(120, "seconds", NOW + 0.4) == "120"


def test_retry_after_date_rounds_up_to_the_next_second() -> None:
    """A date Retry-After is never earlier than now + s: fractions round up."""
    assert retry_after_value(30, "date", NOW + 0.2) == "Mon, 03 Jun 2019 11:00:31 GMT"


def test_retry_after_date_on_a_whole_second_is_exact() -> None:
    """On a whole second, the date is exactly now + s."""
    assert retry_after_value(30, "date", NOW) == "Mon, 03 Jun 2019 11:00:30 GMT"


def test_fault_refuses_a_status_outside_the_catalogue() -> None:
    """Fault(status=418) is a programming error."""
    with pytest.raises(ValueError, match="418"):
        Fault(kind="status", status=418)
