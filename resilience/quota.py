"""
How long the acquirer asked us to wait: `Retry-After` and the provider's quota headers.

One interface, `QuotaProfile.server_wait(status, headers, now=...) -> ServerWait | None`, and
four profiles chosen by `AcquirerConfig.quota_profile` (the acquirer's own headers decide):

| profile         | reads, in this order of precedence                                          |
| --------------- | --------------------------------------------------------------------------- |
| "retry-after"   | Retry-After                                                                 |
| "ietf"          | Retry-After; `RateLimit` t where r=0 (draft-ietf-httpapi-ratelimit-headers-10) |
| "github"        | Retry-After; x-ratelimit-reset - now where x-ratelimit-remaining is 0; on a  |
|                 | rate-limit answer with neither, GitHub's "wait at least 60 s"               |
| "auto"          | Retry-After; RateLimit t where r=0; x-ratelimit-reset - now where remaining |
|                 | is 0 (docs/reference/retries.md); then the caller's backoff                 |

Rules:
- `Retry-After` (RFC 9110 section 10.2.3) always wins when it is valid; an invalid one is
  ignored (and counted by the caller) and the quota headers are read instead.
- `x-ratelimit-reset` is an absolute epoch (GitHub): the wait is `reset - now`, never the raw
  epoch; a reset in the past is a wait of 0.
- IETF draft-10: `RateLimit` is a structured field List of quota items with parameters `r`
  (remaining) and `t` (seconds until reset, relative); `RateLimit-Policy` lists the policies
  (`q` quota, `w` window seconds, `pk` partition key). The member types each field allows are
  checked (`parse_ratelimit`, `parse_ratelimit_policy`); a field that breaks its syntax (RFC
  9651) or those rules is ignored as a whole, listed in `invalid`, and never acted on. Several
  exhausted items: the longest `t` is the wait.
- A 403 is a rate limit only when these confirm it (`confirms_rate_limit`): Retry-After, a
  remaining of 0, or (checked by the classifier) an error code naming a rate limit.

`ServerWait.invalid` names the headers that were present but invalid, for the metric.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .retry_after import MAX_DELAY_SECONDS, parse_retry_after
from .structured_fields import Member, ParseError, parse_list

__all__ = [
    "QUOTA_PROFILES",
    "QuotaPolicy",
    "QuotaProfile",
    "ServerWait",
    "ServiceLimit",
    "WaitSource",
    "parse_ratelimit",
    "parse_ratelimit_policy",
    "quota_profile",
    "ratelimit_exhausted",
]

_DIGITS = re.compile(r"[0-9]{1,15}")

#: `ServerWait.source` values.
WaitSource = str
RETRY_AFTER = "retry-after"
QUOTA_HEADER = "quota-header"

#: GitHub: a secondary rate limit without Retry-After or remaining 0 means "wait at least 60 s".
GITHUB_SECONDARY_WAIT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class ServiceLimit:
    """
    One item of a `RateLimit` field (draft-ietf-httpapi-ratelimit-headers-10, section 3.1).

    `policy`: the quota policy's name (the item's String). `remaining`: quota units left (`r`,
    >= 0). `reset`: seconds until the quota resets (`t`, >= 0, relative), None if absent.
    `partition_key`: the `pk` Byte Sequence, None if absent.
    """

    policy: str
    remaining: int
    reset: int | None
    partition_key: bytes | None


@dataclass(frozen=True, slots=True)
class QuotaPolicy:
    """
    One item of a `RateLimit-Policy` field (draft-ietf-httpapi-ratelimit-headers-10, section 2.1).

    `policy`: the name (the item's String). `quota`: units per window (`q`, >= 0). `unit`: the
    `qu` String ("requests" when absent). `window`: seconds (`w`, >= 0), None if absent.
    `partition_key`: the `pk` Byte Sequence, None if absent.
    """

    policy: str
    quota: int
    unit: str
    window: int | None
    partition_key: bytes | None


#: The member rules of the two fields: each member is an Item (not an inner list) whose value
#: is a String; parameter name -> (type, required). Integers are non-negative; a Boolean, a
#: Decimal or a Date is not an Integer. Other parameters are extensions and are ignored.
RATELIMIT_PARAMETERS: dict[str, tuple[type, bool]] = {
    "r": (int, True),
    "t": (int, False),
    "pk": (bytes, False),
}
RATELIMIT_POLICY_PARAMETERS: dict[str, tuple[type, bool]] = {
    "q": (int, True),
    "qu": (str, False),
    "w": (int, False),
    "pk": (bytes, False),
}


def _checked_members(text: str, rules: Mapping[str, tuple[type, bool]]) -> list[Member]:
    """The members of the List `text`, each checked against `rules`; raises ParseError."""
    members = parse_list(text)
    for member in members:
        if type(member.value) is not str:  # not a Token, Display String, inner list, number
            raise ParseError("a member of this field is a String")
        for name, (kind, required) in rules.items():
            if name not in member.params:
                if required:
                    raise ParseError(f"parameter {name} is required")
                continue
            value = member.params[name]
            if type(value) is not kind:  # exact: no bool for int, no Token for str
                raise ParseError(f"parameter {name} has the wrong type")
            if isinstance(value, int) and value < 0:
                raise ParseError(f"parameter {name} is negative")
    return members


def parse_ratelimit(text: str) -> tuple[ServiceLimit, ...]:
    """
    Read a `RateLimit` field value (draft-ietf-httpapi-ratelimit-headers-10, section 3): a
    List of Items, each a String (the policy) with `r` (required) and `t` non-negative
    Integers and `pk` a Byte Sequence. Raises `ParseError` for anything else (RFC 9651 syntax
    or these member rules): the caller ignores the whole field.
    """
    return tuple(
        ServiceLimit(m.value, m.params["r"], m.params.get("t"), m.params.get("pk"))
        for m in _checked_members(text, RATELIMIT_PARAMETERS)
    )


def parse_ratelimit_policy(text: str) -> tuple[QuotaPolicy, ...]:
    """
    Read a `RateLimit-Policy` field value (draft-ietf-httpapi-ratelimit-headers-10, section 2):
    a List of Items, each a String (the policy name) with `q` (required) and `w` non-negative
    Integers, `qu` a String and `pk` a Byte Sequence. Raises `ParseError` for anything else.
    """
    return tuple(
        QuotaPolicy(
            m.value,
            m.params["q"],
            m.params.get("qu", "requests"),
            m.params.get("w"),
            m.params.get("pk"),
        )
        for m in _checked_members(text, RATELIMIT_POLICY_PARAMETERS)
    )


def ratelimit_exhausted(value: str | None) -> bool:
    """True when a valid `RateLimit` field value has an item with `r` = 0; an absent or
    invalid field says nothing (False)."""
    if value is None:
        return False
    try:
        return any(limit.remaining == 0 for limit in parse_ratelimit(value))
    except ParseError:
        return False


@dataclass(frozen=True, slots=True)
class ServerWait:
    """
    What the answer's headers say about waiting.

    `seconds`: the wait (>= 0) before any request may be sent, or None if the headers give
    none. `source`: "retry-after" or "quota-header". `header`: the header it came from.
    `invalid`: names of headers that were present but could not be read (ignored).
    `seen`: the rate headers present, as sanitised strings, for the attempt's log event.
    """

    seconds: float | None
    source: str | None = None
    header: str | None = None
    invalid: tuple[str, ...] = ()
    seen: dict[str, str] = field(default_factory=dict)


class QuotaProfile:
    """
    Reads the server's wait from an answer's headers, following one provider's conventions.

    `server_wait(status, headers, now=...)`: `status` is the HTTP status, `headers` a
    case-insensitive mapping (httpx.Headers) or a plain dict, `now` the wall clock (Unix
    seconds, UTC). Never raises on header values.
    """

    name = "retry-after"
    ietf = False
    github = False
    #: Wait for a rate-limit answer that gives no time at all (None: use the backoff).
    secondary_wait: float | None = None

    def server_wait(
        self, status: int, headers: Mapping[str, str], *, now: float, rate_limited: bool = False
    ) -> ServerWait:
        """
        Return the wait the headers ask for (see the module docstring for the precedence).

        `rate_limited` says the answer is a rate-limit refusal (429, or a confirmed 403); it
        enables profile rules that apply only to those (GitHub's 60 s floor).
        """
        lowered = _lowered(headers)
        invalid: list[str] = []
        seen = _seen(lowered)
        raw = lowered.get("retry-after")
        if raw is not None:
            seconds = parse_retry_after(raw, now=now)
            if seconds is not None:
                return ServerWait(seconds, RETRY_AFTER, "retry-after", tuple(invalid), seen)
            invalid.append("retry-after")
        if self.ietf:
            wait = _ietf_wait(lowered, invalid)
            if wait is not None:
                return ServerWait(wait, QUOTA_HEADER, "ratelimit", tuple(invalid), seen)
        if self.github:
            wait = _github_wait(lowered, now, invalid)
            if wait is not None:
                return ServerWait(wait, QUOTA_HEADER, "x-ratelimit-reset", tuple(invalid), seen)
            if rate_limited and self.secondary_wait is not None:
                return ServerWait(
                    self.secondary_wait, QUOTA_HEADER, "secondary", tuple(invalid), seen
                )
        return ServerWait(None, None, None, tuple(invalid), seen)

    def confirms_rate_limit(self, headers: Mapping[str, str], *, now: float) -> bool:
        """True if the headers say the quota is exhausted (a 403 is then a rate limit)."""
        lowered = _lowered(headers)
        if lowered.get("retry-after", "").strip(" \t"):
            return True
        if self.ietf and _ietf_wait(lowered, []) is not None:
            return True
        if self.ietf and _ietf_exhausted(lowered):
            return True
        return self.github and lowered.get("x-ratelimit-remaining", "").strip(" \t") == "0"

    def __repr__(self) -> str:
        return f"<QuotaProfile {self.name}>"


class _IetfProfile(QuotaProfile):
    name = "ietf"
    ietf = True


class _GitHubProfile(QuotaProfile):
    name = "github"
    github = True
    secondary_wait = GITHUB_SECONDARY_WAIT_SECONDS


class _AutoProfile(QuotaProfile):
    name = "auto"
    ietf = True
    github = True


#: Profile name -> profile; `AcquirerConfig.quota_profile` takes one of these names.
QUOTA_PROFILES: dict[str, QuotaProfile] = {
    profile.name: profile
    for profile in (QuotaProfile(), _IetfProfile(), _GitHubProfile(), _AutoProfile())
}


def quota_profile(name: str) -> QuotaProfile:
    """Return the profile called `name` ("retry-after", "ietf", "github", "auto"); KeyError else."""
    return QUOTA_PROFILES[name]


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    items: Any = headers.multi_items() if hasattr(headers, "multi_items") else headers.items()
    lowered: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        # Repeated headers: structured fields are joined with ", " (RFC 9110 5.3); for the
        # others the first one counts.
        if key in ("ratelimit", "ratelimit-policy") and key in lowered:
            lowered[key] = f"{lowered[key]}, {value}"
        else:
            lowered.setdefault(key, value)
    return lowered


_SEEN = ("retry-after", "ratelimit", "ratelimit-policy", "x-ratelimit-remaining",
         "x-ratelimit-reset", "x-ratelimit-limit")  # fmt: skip
_SAFE = re.compile(r"[^\x20-\x7e]")


def _seen(lowered: Mapping[str, str]) -> dict[str, str]:
    """The rate headers present, printable ASCII only and at most 120 characters each."""
    return {name: _SAFE.sub("?", lowered[name])[:120] for name in _SEEN if name in lowered}


def _ietf_items(lowered: Mapping[str, str], invalid: list[str]) -> tuple[ServiceLimit, ...] | None:
    raw = lowered.get("ratelimit")
    if raw is None:
        return None
    try:
        return parse_ratelimit(raw)
    except ParseError:
        if "ratelimit" not in invalid:
            invalid.append("ratelimit")
        return None


def _ietf_wait(lowered: Mapping[str, str], invalid: list[str]) -> float | None:
    """The longest `t` among the RateLimit items whose `r` is 0; None if none."""
    items = _ietf_items(lowered, invalid)
    if "ratelimit-policy" in lowered:
        try:
            parse_ratelimit_policy(lowered["ratelimit-policy"])
        except ParseError:
            if "ratelimit-policy" not in invalid:
                invalid.append("ratelimit-policy")
    if not items:
        return None
    waits = [
        float(min(limit.reset, MAX_DELAY_SECONDS))
        for limit in items
        if limit.remaining == 0 and limit.reset is not None
    ]
    return max(waits) if waits else None


def _ietf_exhausted(lowered: Mapping[str, str]) -> bool:
    return ratelimit_exhausted(lowered.get("ratelimit"))


def _github_wait(lowered: Mapping[str, str], now: float, invalid: list[str]) -> float | None:
    """`x-ratelimit-reset - now` when `x-ratelimit-remaining` is 0; None otherwise."""
    remaining = lowered.get("x-ratelimit-remaining")
    reset = lowered.get("x-ratelimit-reset")
    if remaining is not None and not _DIGITS.fullmatch(remaining.strip(" \t")):
        invalid.append("x-ratelimit-remaining")
        remaining = None
    if reset is not None and not _DIGITS.fullmatch(reset.strip(" \t")):
        invalid.append("x-ratelimit-reset")
        reset = None
    if remaining is None or reset is None or int(remaining) != 0:
        return None
    return min(max(0.0, int(reset) - now), float(MAX_DELAY_SECONDS))
