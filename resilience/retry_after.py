"""
A strict reader of the `Retry-After` header (RFC 9110 section 10.2.3) and of HTTP-dates
(RFC 9110 section 5.6.7).

    Retry-After   = HTTP-date / delay-seconds
    delay-seconds = 1*DIGIT                       ASCII digits: no sign, fraction or exponent

    HTTP-date     = IMF-fixdate / obs-date
    IMF-fixdate   Sun, 06 Nov 1994 08:49:37 GMT
    rfc850-date   Sunday, 06-Nov-94 08:49:37 GMT  a two-digit year more than 50 years in the
                                                  future means the previous century
    asctime-date  Sun Nov  6 08:49:37 1994        (day as SP DIGIT or 2DIGIT)

Everything is case-sensitive, single spaces only, GMT only, and read in UTC (never in the
machine's local zone). Surrounding spaces and tabs are not part of a field value and are
stripped; nothing else is forgiven. The standard library's `email.utils` parser is far too
lenient for this (other zones, no zone, lower case, hour 25), and Django's strict parser is
out of reach (this package imports no framework).

The weekday name must be a valid name for its form, but is not checked against the date (RFC
9110 gives no rule; the date fields are what say the instant). Second 60 (a leap second) is
accepted and read as the next second; day numbers must exist in their month.

Invalid values read as None: the caller ignores the header, uses its own backoff and counts the
invalid value (`Metrics`); nothing here raises on input.
"""

from __future__ import annotations

import calendar
import math
import re
from datetime import UTC, datetime

__all__ = [
    "MAX_DELAY_SECONDS",
    "parse_delay_seconds",
    "parse_http_date",
    "parse_retry_after",
]

#: Longest wait a header can express here, in seconds (2**31 - 1, about 68 years). Larger
#: delay-seconds read as this: still "not within any deadline", but finite, so that
#: `now + wait` and a `datetime` stay representable.
MAX_DELAY_SECONDS = 2**31 - 1

_DIGITS = re.compile(r"[0-9]+")
_OWS = " \t"

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}
_DAY_NAMES = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_DAY_NAMES_LONG = "Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
_MONTH = "(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"

_IMF_FIXDATE = re.compile(
    rf"(?:{_DAY_NAMES}), (?P<day>[0-9]{{2}}) {_MONTH} (?P<year>[0-9]{{4}}) {_TIME} GMT"
)
_RFC850_DATE = re.compile(
    rf"(?:{_DAY_NAMES_LONG}), (?P<day>[0-9]{{2}})-{_MONTH}-(?P<year>[0-9]{{2}}) {_TIME} GMT"
)
_ASCTIME_DATE = re.compile(
    rf"(?:{_DAY_NAMES}) {_MONTH} (?P<day>[0-9]{{2}}| [0-9]) {_TIME} (?P<year>[0-9]{{4}})"
)


def parse_delay_seconds(value: str | None) -> float | None:
    """
    Return the delay of a `Retry-After: <digits>` header in seconds, else None.

    Kept from the first cut: only delay-seconds, and a value of more than 15 significant
    digits reads as `math.inf`. `parse_retry_after` is the full reader.
    """
    if value is None:
        return None
    stripped = value.strip(_OWS)
    if not _DIGITS.fullmatch(stripped):
        return None
    digits = stripped.lstrip("0") or "0"
    if len(digits) > 15:
        return math.inf
    return float(int(digits))


def parse_http_date(value: str, *, now: float | None = None) -> float | None:
    """
    Return an HTTP-date (any of its three forms) as Unix seconds (UTC), else None.

    `now` (Unix seconds) anchors the 50-year rule of the two-digit rfc850 year; it is only
    needed for that form (None: the rfc850 form reads as None). Surrounding SP/HTAB are
    stripped; anything else that deviates from the grammar reads as None.
    """
    if not isinstance(value, str):
        return None
    text = value.strip(_OWS)
    match = _IMF_FIXDATE.fullmatch(text) or _ASCTIME_DATE.fullmatch(text)
    if match is not None:
        year = int(match["year"])
    else:
        match = _RFC850_DATE.fullmatch(text)
        if match is None or now is None:
            return None
        year = _rfc850_year(int(match["year"]), now)
    day = int(match["day"].strip(" "))
    month = _MONTHS[match["month"]]
    hour, minute, second = int(match["hour"]), int(match["minute"]), int(match["second"])
    if hour > 23 or minute > 59 or second > 60:
        return None
    try:
        # Validates the day of the month (and the year range); second 60 is added below.
        midnight = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return float(calendar.timegm(midnight.timetuple()) + hour * 3600 + minute * 60 + second)


def parse_retry_after(value: str | None, *, now: float) -> float | None:
    """
    Return the wait a `Retry-After` value asks for, in seconds (>= 0), else None.

    `now` is the wall clock (Unix seconds, UTC) against which an HTTP-date is read; a date in
    the past reads as 0 (retry now). None means absent or invalid: ignore the header. Values
    beyond `MAX_DELAY_SECONDS` read as `MAX_DELAY_SECONDS`. Never raises on the value.
    """
    if value is None or not isinstance(value, str):
        return None
    stripped = value.strip(_OWS)
    if _DIGITS.fullmatch(stripped):
        digits = stripped.lstrip("0") or "0"
        if len(digits) > 10:
            return float(MAX_DELAY_SECONDS)
        return float(min(int(digits), MAX_DELAY_SECONDS))
    instant = parse_http_date(stripped, now=now)
    if instant is None:
        return None
    return min(max(0.0, instant - now), float(MAX_DELAY_SECONDS))


def _rfc850_year(two_digits: int, now: float) -> int:
    """RFC 9110: a year that appears more than 50 years in the future is in the past century."""
    current = datetime.fromtimestamp(now, tz=UTC).year
    year = current - current % 100 + two_digits
    if year - current > 50:
        year -= 100
    return year
