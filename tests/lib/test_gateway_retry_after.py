"""The strict Retry-After / HTTP-date reader: the vectors of docs/reference/retries.md, and more."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from resilience.retry_after import (
    MAX_DELAY_SECONDS,
    parse_http_date,
    parse_retry_after,
)

#: The vectors' "now": 2019-06-03T11:00:00Z.
NOW = datetime(2019, 6, 3, 11, 0, 0, tzinfo=UTC).timestamp()


def epoch(*fields: int) -> float:
    return datetime(*fields, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("  5 ", 5.0),
        ("0", 0.0),
        ("Mon, 03 Jun 2019 11:30:12 GMT", 1812.0),
        ("Monday, 03-Jun-19 11:30:12 GMT", 1812.0),
        ("Mon Jun  3 11:30:12 2019", 1812.0),
        ("Fri, 31 Dec 1999 23:59:59 GMT", 0.0),
    ],
    ids=["120", "whitespace", "zero", "imf-fixdate", "rfc850", "asctime", "past"],
)
def test_reference_vectors_read(value: str, expected: float) -> None:
    """The valid vectors of the Retry-After table read as the listed number of seconds."""
    assert parse_retry_after(value, now=NOW) == expected


@pytest.mark.parametrize(
    "value",
    [
        "-1",
        "+1",
        "1.0",
        "1.5",
        "1e3",
        "0x10",
        "1m0s",
        "",
        "Mon, 03 Jun 2019 12:30:12 +0100",
        "2019-06-03T11:30:12Z",
    ],
)
def test_reference_vectors_invalid(value: str) -> None:
    """The invalid vectors of the Retry-After table read as None (ignore the header)."""
    assert parse_retry_after(value, now=NOW) is None


@pytest.mark.parametrize(
    "value",
    [
        "mon, 03 Jun 2019 11:30:12 GMT",
        "Mon, 03 jun 2019 11:30:12 GMT",
        "Mon, 03 Jun 2019 11:30:12 gmt",
        "Mon, 03 Jun 2019 11:30:12 UTC",
        "Mon, 03 Jun 2019 11:30:12",
        "Mon, 03 Jun 2019 25:30:12 GMT",
        "Mon, 03 Jun 2019 11:60:12 GMT",
        "Mon, 03 Jun 2019 11:30:61 GMT",
        "Mon, 31 Jun 2019 11:30:12 GMT",
        "Mon,  03 Jun 2019 11:30:12 GMT",
        "Mon, 3 Jun 2019 11:30:12 GMT",
        "Mon, 03 Jun 19 11:30:12 GMT",
        "Monday, 03 Jun 2019 11:30:12 GMT",
        "Mon, 03-Jun-19 11:30:12 GMT",
        "Mon Jun 3 11:30:12 2019",
        "Mon Jun  3 11:30:12 2019 GMT",
        "Mon, 03 Jun 2019 11:30:12 GMT extra",
        "Mon, ٠٣ Jun 2019 11:30:12 GMT",
        "١٢٠",
        "5\n",
        "Mon,\t03 Jun 2019 11:30:12 GMT",
    ],
)
def test_lenient_forms_are_refused(value: str) -> None:
    """Case, zone, spacing, field ranges and non-ASCII digits are checked strictly."""
    assert parse_retry_after(value, now=NOW) is None


def test_none_reads_as_none() -> None:
    """An absent header reads as None."""
    assert parse_retry_after(None, now=NOW) is None


def test_leading_zeros_are_digits() -> None:
    """`007` is 7 seconds (1*DIGIT allows leading zeros)."""
    assert parse_retry_after("007", now=NOW) == 7.0


def test_huge_delay_is_capped_not_infinite() -> None:
    """A 40-digit delay reads as MAX_DELAY_SECONDS: finite, so now + wait stays a datetime."""
    assert parse_retry_after("9" * 40, now=NOW) == MAX_DELAY_SECONDS


def test_three_forms_name_the_same_instant() -> None:
    """IMF-fixdate, rfc850 and asctime of RFC 9110's example are the same instant."""
    expected = epoch(1994, 11, 6, 8, 49, 37)
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == expected
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", now=NOW) == expected
    assert parse_http_date("Sun Nov  6 08:49:37 1994") == expected


def test_asctime_two_digit_day() -> None:
    """asctime with a two-digit day (`Nov 16`) reads."""
    assert parse_http_date("Wed Nov 16 08:49:37 1994") == epoch(1994, 11, 16, 8, 49, 37)


def test_rfc850_year_more_than_50_years_ahead_is_last_century() -> None:
    """With now in 2019, `70` is 1970 (2070 would be 51 years ahead)."""
    assert parse_http_date("Thursday, 01-Jan-70 00:00:00 GMT", now=NOW) == 0.0


def test_rfc850_year_50_years_ahead_stays_this_century() -> None:
    """With now in 2019, `69` is 2069 (exactly 50 years ahead is not more than 50)."""
    assert parse_http_date("Tuesday, 01-Jan-69 00:00:00 GMT", now=NOW) == epoch(2069, 1, 1)


def test_rfc850_needs_a_clock() -> None:
    """Without `now`, a two-digit year cannot be placed: None."""
    assert parse_http_date("Monday, 03-Jun-19 11:30:12 GMT") is None


def test_leap_second_is_accepted() -> None:
    """Second 60 (a leap second) reads as the following second."""
    assert parse_http_date("Sat, 31 Dec 2016 23:59:60 GMT") == epoch(2017, 1, 1)


def test_dates_are_read_in_utc_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """TZ=Asia/Kolkata changes nothing: HTTP-dates are GMT, read in UTC."""
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        assert parse_retry_after("Mon, 03 Jun 2019 11:30:12 GMT", now=NOW) == 1812.0
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_weekday_is_not_checked_against_the_date() -> None:
    """A valid weekday name that does not match the date still reads (RFC 9110 gives no rule)."""
    assert parse_retry_after("Fri, 03 Jun 2019 11:30:12 GMT", now=NOW) == 1812.0


@pytest.mark.parametrize("value", [None, 12, b"120", object()])
def test_non_string_values_never_raise(value: object) -> None:
    """Values that are not strings read as None instead of raising."""
    assert parse_retry_after(value, now=NOW) is None  # type: ignore[arg-type]
