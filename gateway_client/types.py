"""
The values that cross between the payment service and the acquirer client.

Plain frozen dataclasses: the configuration (handed in by the caller, never read from settings
or the environment here), one authorisation request, and the acquirer's answer. Amounts are
integers in ISO 4217 minor units, never floats.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

from ._validate import positive_seconds

__all__ = ["AcquirerConfig", "Authorization", "AuthorizationRequest"]

_CURRENCY = re.compile(r"[A-Z]{3}")
# Printable ASCII without space (%x21-7E): what may appear in a header token safely.
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
_MAX_IDEMPOTENCY_KEY_LENGTH = 255
_QUOTA_PROFILES = ("auto", "ietf", "github", "retry-after")


def _validate_base_url(value: object) -> None:
    if not isinstance(value, str):
        raise ValueError("base_url must be a string")
    if not _VISIBLE_ASCII.fullmatch(value):
        raise ValueError("base_url must be printable ASCII without spaces")
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises ValueError on a bad port
    except ValueError:
        raise ValueError("base_url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("base_url must be an absolute http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("base_url must not carry credentials; pass api_key instead")
    if parts.query or parts.fragment:
        raise ValueError("base_url must not have a query or a fragment")


@dataclass(frozen=True, slots=True)
class AcquirerConfig:
    """
    How to reach one acquirer.

    `api_key` is kept out of repr() and is never put into logs or error messages. The client
    does not read proxies, certificates or credentials from the environment.

    `connect_timeout` and `read_timeout` (seconds) are the per-attempt timeouts of the default
    RetryPolicy. `honours_idempotency_keys`: the acquirer replays a request sent again with
    the same key, so ambiguous outcomes may be re-sent. `name` names the acquirer in logs,
    metrics and the retry budget. `quota_profile` says which rate headers the acquirer sends:
    "auto" (Retry-After, IETF RateLimit, GitHub-style x-ratelimit-*), "ietf", "github" or
    "retry-after" (see quota.py). `rate_scope` names the quota shared by the rate gate; None
    derives it from `name` and a fingerprint of `api_key` (never the key itself).
    """

    base_url: str
    api_key: str = field(repr=False)
    connect_timeout: float = 1.0
    read_timeout: float = 3.0
    honours_idempotency_keys: bool = True
    name: str = "acquirer"
    quota_profile: str = "auto"
    rate_scope: str | None = None

    def __post_init__(self) -> None:
        _validate_base_url(self.base_url)
        # The key goes into an HTTP header: printable ASCII only, so that no HTTP library ever
        # rejects the header and quotes its value in an exception message.
        if not isinstance(self.api_key, str) or not _VISIBLE_ASCII.fullmatch(self.api_key):
            raise ValueError("api_key must be a non-empty string of printable ASCII (no spaces)")
        positive_seconds("connect_timeout", self.connect_timeout)
        positive_seconds("read_timeout", self.read_timeout)
        if not isinstance(self.honours_idempotency_keys, bool):
            raise ValueError("honours_idempotency_keys must be a bool")
        if not isinstance(self.name, str) or not _VISIBLE_ASCII.fullmatch(self.name):
            raise ValueError("name must be a non-empty string of printable ASCII (no spaces)")
        if self.quota_profile not in _QUOTA_PROFILES:
            raise ValueError(f"quota_profile must be one of {sorted(_QUOTA_PROFILES)}")
        if self.rate_scope is not None and (
            not isinstance(self.rate_scope, str) or not _VISIBLE_ASCII.fullmatch(self.rate_scope)
        ):
            raise ValueError("rate_scope must be None or printable ASCII (no spaces)")


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """
    One authorisation to ask the acquirer for.

    `payment_reference` is our payment's id, unique across merchants (not the merchant's own
    order reference); the acquirer files the charge under it and `lookup` finds it by it (the
    wire calls it "reference"). `idempotency_key` is generated once per payment by the caller
    and sent unchanged on every attempt and every later re-send. `payment_method` (a card
    token) is kept out of repr().
    """

    amount: int
    currency: str
    payment_method: str = field(repr=False)
    payment_reference: str
    idempotency_key: str

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int) or self.amount <= 0:
            raise ValueError("amount must be a positive integer in minor units")
        if not isinstance(self.currency, str) or not _CURRENCY.fullmatch(self.currency):
            raise ValueError("currency must be an ISO 4217 alpha-3 code in upper case")
        if not isinstance(self.payment_method, str) or not self.payment_method:
            raise ValueError("payment_method must be a non-empty string")
        if not isinstance(self.payment_reference, str) or not self.payment_reference:
            raise ValueError("payment_reference must be a non-empty string")
        if (
            not isinstance(self.idempotency_key, str)
            or len(self.idempotency_key) > _MAX_IDEMPOTENCY_KEY_LENGTH
            or not _VISIBLE_ASCII.fullmatch(self.idempotency_key)
        ):
            raise ValueError(
                "idempotency_key must be 1 to 255 characters of printable ASCII (no spaces)"
            )


@dataclass(frozen=True, slots=True)
class Authorization:
    """
    The acquirer's answer to an authorisation: approved or declined.

    A decline is a value (`approved=False`, usually with a `decline_code`), not an exception.
    `replayed` is True when the acquirer answered from its idempotency store. `attempts` is
    how many requests the call sent to get this answer (1 without retries); it is not part of
    equality. `payment_reference` is the one the request carried, as the acquirer echoes it;
    `acquirer_reference` is the acquirer's own id of the charge.
    """

    acquirer_reference: str
    approved: bool
    decline_code: str | None
    amount: int
    currency: str
    payment_reference: str
    created_at: datetime
    replayed: bool = False
    attempts: int = field(default=1, compare=False)
