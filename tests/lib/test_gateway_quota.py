"""Quota-header profiles (GitHub x-ratelimit-*, IETF RateLimit draft-10) and their precedence."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from gateway_client.classify import classify_status
from gateway_client.errors import AuthenticationError
from resilience.quota import (
    QUOTA_PROFILES,
    QuotaPolicy,
    ServiceLimit,
    parse_ratelimit,
    parse_ratelimit_policy,
    quota_profile,
)
from resilience.structured_fields import ParseError, Token, parse_list

NOW = datetime(2019, 6, 3, 11, 0, 0, tzinfo=UTC).timestamp()
AUTO = quota_profile("auto")
IETF = quota_profile("ietf")
GITHUB = quota_profile("github")
PLAIN = quota_profile("retry-after")


def wait(profile, headers: dict[str, str], status: int = 429) -> float | None:
    return profile.server_wait(status, httpx.Headers(headers), now=NOW).seconds


def test_profiles_are_named() -> None:
    """The four profiles are reachable by their configuration names."""
    assert set(QUOTA_PROFILES) == {"auto", "ietf", "github", "retry-after"}


def test_ietf_ratelimit_r_zero_gives_t() -> None:
    """`RateLimit: "default";r=0;t=30` means wait 30 s."""
    assert wait(IETF, {"RateLimit": '"default";r=0;t=30'}) == 30.0


def test_retry_after_beats_ratelimit() -> None:
    """With `Retry-After: 10` as well, the wait is 10 s."""
    headers = {"RateLimit": '"default";r=0;t=30', "Retry-After": "10"}
    result = IETF.server_wait(429, httpx.Headers(headers), now=NOW)
    assert (result.seconds, result.source) == (10.0, "retry-after")


def test_ratelimit_with_quota_left_gives_no_wait() -> None:
    """r > 0: no wait from the header."""
    assert wait(IETF, {"RateLimit": '"default";r=5;t=30'}) is None


def test_longest_exhausted_item_wins() -> None:
    """Several exhausted policies: the longest t is the wait."""
    value = '"burst";r=0;t=2, "daily";r=0;t=3600, "hourly";r=7;t=60'
    assert wait(IETF, {"RateLimit": value}) == 3600.0


@pytest.mark.parametrize(
    "value",
    ['"default";r=0;t=', "default;r=0;t=30,", '"default";r=0;t=3.5', '"d";r="0";t=30', "r=0,t=30"],
)
def test_malformed_ratelimit_is_ignored_and_reported(value: str) -> None:
    """A malformed or mistyped RateLimit gives no wait; a syntax error names the header."""
    result = IETF.server_wait(429, httpx.Headers({"RateLimit": value}), now=NOW)
    assert result.seconds is None


def test_syntax_error_is_listed_as_invalid() -> None:
    """A RateLimit field that is not a structured List is listed in `invalid`."""
    result = IETF.server_wait(429, httpx.Headers({"RateLimit": "r=0;t=30,,"}), now=NOW)
    assert result.invalid == ("ratelimit",)


def test_malformed_policy_is_reported_but_harmless() -> None:
    """A malformed RateLimit-Policy is listed as invalid; RateLimit still counts."""
    headers = {"RateLimit-Policy": "q=100;;", "RateLimit": '"default";r=0;t=4'}
    result = IETF.server_wait(429, httpx.Headers(headers), now=NOW)
    assert (result.seconds, result.invalid) == (4.0, ("ratelimit-policy",))


def test_github_reset_is_an_epoch_minus_now() -> None:
    """x-ratelimit-reset is absolute: the wait is reset - now, never the raw epoch."""
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 42)}
    assert wait(GITHUB, headers) == 42.0


def test_github_reset_in_the_past_is_zero() -> None:
    """A reset already passed means wait 0."""
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) - 42)}
    assert wait(GITHUB, headers) == 0.0


def test_github_remaining_above_zero_gives_the_secondary_floor() -> None:
    """A GitHub rate limit without Retry-After or remaining 0: wait at least 60 s."""
    headers = {"x-ratelimit-remaining": "12", "x-ratelimit-reset": str(int(NOW) + 42)}
    assert wait(GITHUB, headers) is None
    result = GITHUB.server_wait(429, httpx.Headers(headers), now=NOW, rate_limited=True)
    assert (result.seconds, result.header) == (60.0, "secondary")


@pytest.mark.parametrize(
    ("name", "value"), [("x-ratelimit-reset", "soon"), ("x-ratelimit-remaining", "-0")]
)
def test_github_malformed_values_are_ignored_and_reported(name: str, value: str) -> None:
    """A non-numeric x-ratelimit value is ignored and listed as invalid."""
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 5), name: value}
    result = GITHUB.server_wait(429, httpx.Headers(headers), now=NOW)
    assert result.seconds is None
    assert result.invalid == (name,)


def test_auto_precedence_ratelimit_before_github() -> None:
    """auto: RateLimit t (r=0) comes before x-ratelimit-reset - now."""
    headers = {
        "RateLimit": '"default";r=0;t=7',
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": str(int(NOW) + 99),
    }
    assert wait(AUTO, headers) == 7.0


def test_auto_falls_back_to_github_then_nothing() -> None:
    """auto: without RateLimit, the GitHub reset; without either, no wait (the backoff)."""
    github = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 9)}
    assert wait(AUTO, github) == 9.0
    assert wait(AUTO, {}) is None


def test_invalid_retry_after_falls_through_to_quota_headers() -> None:
    """An invalid Retry-After is reported and the quota headers decide."""
    headers = {"Retry-After": "1.5", "RateLimit": '"default";r=0;t=8'}
    result = AUTO.server_wait(429, httpx.Headers(headers), now=NOW)
    assert (result.seconds, result.source, result.invalid) == (
        8.0,
        "quota-header",
        ("retry-after",),
    )


def test_retry_after_only_profile_ignores_quota_headers() -> None:
    """The retry-after profile reads nothing else."""
    assert wait(PLAIN, {"RateLimit": '"default";r=0;t=30'}) is None


@pytest.mark.parametrize(
    ("profile", "headers", "confirmed"),
    [
        (AUTO, {"Retry-After": "5"}, True),
        (AUTO, {"x-ratelimit-remaining": "0"}, True),
        (AUTO, {"RateLimit": '"default";r=0;t=5'}, True),
        (AUTO, {"RateLimit": '"default";r=0'}, True),
        (AUTO, {"x-ratelimit-remaining": "3"}, False),
        (AUTO, {}, False),
        (PLAIN, {"x-ratelimit-remaining": "0"}, False),
        (IETF, {"x-ratelimit-remaining": "0"}, False),
        (GITHUB, {"RateLimit": '"default";r=0;t=5'}, False),
    ],
)
def test_403_confirmation_follows_the_profile(profile, headers, confirmed: bool) -> None:
    """A 403 is a rate limit only when the profile's headers (or Retry-After) confirm it."""
    assert profile.confirms_rate_limit(httpx.Headers(headers), now=NOW) is confirmed


def test_seen_headers_are_sanitised_for_logs() -> None:
    """The rate headers seen are kept printable and short for the log event."""
    result = AUTO.server_wait(
        429, httpx.Headers({"Retry-After": "5", "RateLimit": '"d";r=0;t=5' + "x" * 300}), now=NOW
    )
    assert result.seen["retry-after"] == "5"
    assert len(result.seen["ratelimit"]) == 120


# -- structured fields ------------------------------------------------------------------------


def test_parse_list_reads_items_and_parameters() -> None:
    """A List of strings and tokens with integer, decimal, byte and boolean parameters."""
    (first, second) = parse_list('"burst";q=100;w=60, daily;q=1.5;pk=:AQID:;x')
    assert (first.value, first.params) == ("burst", {"q": 100, "w": 60})
    assert isinstance(second.value, Token) and second.value == "daily"
    assert second.params == {"q": 1.5, "pk": b"\x01\x02\x03", "x": True}


def test_parse_list_reads_inner_lists() -> None:
    """An inner list is a Member whose value is a tuple of Members."""
    (member,) = parse_list('(1 2 "a");p=?0')
    assert [m.value for m in member.value] == [1, 2, "a"]
    assert member.params == {"p": False}


@pytest.mark.parametrize(
    "text",
    ["a,", ",a", "a;Q=1", '"unterminated', "1.2345", "-", "a b", "é", ":!!:", "?2", "(1 2"],
)
def test_parse_list_refuses_invalid_fields(text: str) -> None:
    """Anything off the RFC 8941 grammar raises ParseError."""
    with pytest.raises(ParseError):
        parse_list(text)


# -- the member rules of RateLimit and RateLimit-Policy (draft-10) -----------------------------

#: RateLimit values that parse as RFC 9651 Lists but break the field's member rules.
RATELIMIT_BREAKING_ITS_RULES = {
    "token-not-string": "default;r=0;t=30",
    "display-string": '%"default";r=0;t=30',
    "inner-list": '("default");r=0;t=30',
    "integer-member": "1;r=0;t=30",
    "r-missing": '"default";t=30',
    "r-string": '"default";r="0";t=30',
    "r-boolean": '"default";r=?0;t=30',
    "r-decimal": '"default";r=0.0;t=30',
    "r-date": '"default";r=@0;t=30',
    "r-negative": '"default";r=-1;t=30',
    "t-negative": '"default";r=0;t=-30',
    "t-decimal": '"default";r=0;t=3.5',
    "t-token": '"default";r=0;t=soon',
    "pk-string": '"default";r=0;t=30;pk="user-1"',
    "one-bad-member": '"burst";r=0;t=2, daily;r=0;t=3600',
}


@pytest.mark.parametrize(
    "value", RATELIMIT_BREAKING_ITS_RULES.values(), ids=RATELIMIT_BREAKING_ITS_RULES.keys()
)
def test_ratelimit_breaking_its_member_rules_is_ignored_reported_and_never_acted_on(value):
    """Valid structured-field syntax, wrong member types: no wait, listed as invalid, and a 403
    carrying it is not taken for a rate limit (by the profile or by the classifier)."""
    with pytest.raises(ParseError):
        parse_ratelimit(value)
    headers = httpx.Headers({"RateLimit": value})
    result = AUTO.server_wait(429, headers, now=NOW)
    assert (result.seconds, result.invalid) == (None, ("ratelimit",))
    assert AUTO.confirms_rate_limit(headers, now=NOW) is False
    assert classify_status(403, headers=headers) is AuthenticationError


def test_ratelimit_members_are_read_and_extensions_ignored():
    """Each item: policy, r, t, pk; an unknown parameter is an extension and is ignored."""
    limits = parse_ratelimit('"burst";r=0;t=2;pk=:AQID:, "daily";r=7;x=?1')
    assert limits == (
        ServiceLimit("burst", 0, 2, b"\x01\x02\x03"),
        ServiceLimit("daily", 7, None, None),
    )
    assert wait(AUTO, {"RateLimit": '"default";r=0;t=5;comment="hi"'}) == 5.0
    assert parse_ratelimit("") == ()


@pytest.mark.parametrize(
    "value",
    ['"burst";w=60', "burst;q=100", '"b";q=100;qu=requests', '"b";q=-1', '"b";q=100;w=1.5',
     '"b";q=100;pk=abc', '("b");q=100'],
    ids=["q-missing", "token", "qu-token", "q-negative", "w-decimal", "pk-token", "inner-list"],
)  # fmt: skip
def test_ratelimit_policy_breaking_its_member_rules_is_reported(value):
    """RateLimit-Policy members are Strings with q (required) and w non-negative Integers, qu a
    String and pk a Byte Sequence; anything else is invalid, and RateLimit still counts."""
    with pytest.raises(ParseError):
        parse_ratelimit_policy(value)
    headers = {"RateLimit-Policy": value, "RateLimit": '"b";r=0;t=4'}
    result = IETF.server_wait(429, httpx.Headers(headers), now=NOW)
    assert (result.seconds, result.invalid) == (4.0, ("ratelimit-policy",))


def test_ratelimit_policy_members_are_read():
    """The draft's example policies, with the unit's default."""
    policies = parse_ratelimit_policy(
        '"burst";q=100;w=60, "daily";q=1000;w=86400;pk=:cHsxMjM0NTY3ODk=:;qu="content-bytes"'
    )
    assert policies == (
        QuotaPolicy("burst", 100, "requests", 60, None),
        QuotaPolicy("daily", 1000, "content-bytes", 86400, b"p{123456789"),
    )
