"""
The values that cross between the payment service and the acquirer client.

Plain frozen dataclasses: the configuration (handed in by the caller, never read from settings
or the environment here), the requests (an authorisation, a capture, a void, a refund) and the
acquirer's answers (the charge as `Authorization`, with its capture state when the answer
carries it; the refund as `Refund`). Amounts are integers in ISO 4217 minor units, never
floats.

References, as the payments field names them: `payment_reference` is our payment's id and
`refund_reference` our refund's (both sent as the wire's "reference"); `acquirer_reference` is
the acquirer's own id of the charge (`ch_...`) or of the refund (`re_...`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeGuard
from urllib.parse import urlsplit

from resilience.validate import positive_seconds

__all__ = [
    "AcquirerConfig",
    "ActionDetailsRequest",
    "ActionRequired",
    "AttemptRecord",
    "Authorization",
    "AuthorizationRequest",
    "CaptureRequest",
    "Received",
    "Refund",
    "RefundRequest",
    "RefundStatus",
    "VoidRequest",
]

#: A refund's outcome at the acquirer: `failed` is a result (refused), like a decline.
RefundStatus = Literal["succeeded", "failed"]

_CURRENCY = re.compile(r"[A-Z]{3}")
# Printable ASCII without space (%x21-7E): what may appear in a header token safely.
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
_MAX_IDEMPOTENCY_KEY_LENGTH = 255
_QUOTA_PROFILES = ("auto", "ietf", "github", "retry-after")
_MAX_REFERENCE_LENGTH = 255
_MAX_URL_LENGTH = 2048
_MAX_REDIRECT_RESULT_LENGTH = 8192


def is_page_url(value: object) -> TypeGuard[str]:
    """Whether `value` is the address of a page a shopper's browser can be sent to: an
    absolute http(s) URL with a host (RFC 3986), printable ASCII without spaces, at most 2,048
    characters. Our return address, and every provider's page for the shopper (the sandbox's,
    Stripe's `redirect_to_url`, Adyen's redirect `action.url`), are held to it."""
    return (
        isinstance(value, str)
        and len(value) <= _MAX_URL_LENGTH
        and _VISIBLE_ASCII.fullmatch(value) is not None
        and urlsplit(value).scheme in ("http", "https")
        and bool(urlsplit(value).hostname)
    )


def _validate_return_url(value: object) -> None:
    """None, or a page URL (is_page_url)."""
    if value is not None and not is_page_url(value):
        raise ValueError("return_url must be None or an absolute http(s) URL (<= 2048 ASCII)")


def _validate_idempotency_key(value: object) -> None:
    if (
        not isinstance(value, str)
        or len(value) > _MAX_IDEMPOTENCY_KEY_LENGTH
        or not _VISIBLE_ASCII.fullmatch(value)
    ):
        raise ValueError(
            "idempotency_key must be 1 to 255 characters of printable ASCII (no spaces)"
        )


def _validate_reference(name: str, value: object) -> None:
    """A reference that goes into a URL path or query: 1 to 255 printable ASCII, no spaces."""
    if (
        not isinstance(value, str)
        or len(value) > _MAX_REFERENCE_LENGTH
        or not _VISIBLE_ASCII.fullmatch(value)
    ):
        raise ValueError(f"{name} must be 1 to 255 characters of printable ASCII (no spaces)")


def _validate_optional_amount(value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("amount must be None or a positive integer in minor units")


def _validate_optional_currency(value: object) -> None:
    if value is not None and (not isinstance(value, str) or not _CURRENCY.fullmatch(value)):
        raise ValueError("currency must be None or an ISO 4217 alpha-3 code in upper case")


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
    "retry-after" (see quota.py). `rate_scope` names the quota shared by the rate gate and the
    concurrency limit (a Redis key and a metric label); None: `name`. Never derived from
    `api_key`.
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
    token) is kept out of repr(). `capture`: True (the default) authorises and captures in one
    call, as before; False authorises only (manual capture: `AcquirerClient.capture` or
    `void` follows). The body carries `"capture": false` only when False, so an automatic
    request is byte-identical to one made before the field existed. `return_url`: where the
    provider sends the shopper back after a customer action (3-D Secure); None (the default,
    not sent): no shopper can come back, so a provider asking for one declines
    (`shopper_action_required`). Kept out of repr() (it carries our unguessable return token).
    """

    amount: int
    currency: str
    payment_method: str = field(repr=False)
    payment_reference: str
    idempotency_key: str
    capture: bool = True
    return_url: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.amount, bool) or not isinstance(self.amount, int) or self.amount <= 0:
            raise ValueError("amount must be a positive integer in minor units")
        if not isinstance(self.currency, str) or not _CURRENCY.fullmatch(self.currency):
            raise ValueError("currency must be an ISO 4217 alpha-3 code in upper case")
        if not isinstance(self.payment_method, str) or not self.payment_method:
            raise ValueError("payment_method must be a non-empty string")
        if not isinstance(self.payment_reference, str) or not self.payment_reference:
            raise ValueError("payment_reference must be a non-empty string")
        _validate_idempotency_key(self.idempotency_key)
        if not isinstance(self.capture, bool):
            raise ValueError("capture must be a bool")
        _validate_return_url(self.return_url)


@dataclass(frozen=True, slots=True)
class ActionDetailsRequest:
    """
    Finish a customer action with what the shopper's browser brought back, at a provider
    that decides the outcome on it instead of offering a look-up (Adyen's
    `POST /payments/details` with `details.redirectResult`; docs/adr/0049). The provider
    verifies the result (opaque, signed by the provider) and answers the payment's outcome:
    nothing from the browser is believed.

    `payment_reference`, `amount` (minor units), `currency` (ISO 4217) and `capture`: the
    payment's, as its AuthorizationRequest had them; the answer is checked against them and
    decoded like the authorization's. `redirect_result`: the provider's result, 1 to 8192
    printable ASCII characters, kept out of repr() and never logged. `idempotency_key`:
    fixed per payment and result (e.g. `details-<payment id>-<digest of the result>`), sent
    on every attempt. Raises ValueError on bad values.
    """

    payment_reference: str
    amount: int
    currency: str
    capture: bool
    redirect_result: str = field(repr=False)
    idempotency_key: str

    def __post_init__(self) -> None:
        _validate_reference("payment_reference", self.payment_reference)
        if isinstance(self.amount, bool) or not isinstance(self.amount, int) or self.amount <= 0:
            raise ValueError("amount must be a positive integer in minor units")
        if not isinstance(self.currency, str) or not _CURRENCY.fullmatch(self.currency):
            raise ValueError("currency must be an ISO 4217 alpha-3 code in upper case")
        if not isinstance(self.capture, bool):
            raise ValueError("capture must be a bool")
        if (
            not isinstance(self.redirect_result, str)
            or len(self.redirect_result) > _MAX_REDIRECT_RESULT_LENGTH
            or not _VISIBLE_ASCII.fullmatch(self.redirect_result)
        ):
            raise ValueError("redirect_result must be 1 to 8192 printable ASCII characters")
        _validate_idempotency_key(self.idempotency_key)


@dataclass(frozen=True, slots=True)
class CaptureRequest:
    """
    Capture an authorised, uncaptured charge (`POST /charges/{id}/capture`).

    `acquirer_reference`: the acquirer's charge id (`Authorization.acquirer_reference`).
    `amount`: minor units to capture, at most the authorised amount (a partial capture
    releases the rest: one capture per charge); None captures the whole authorised amount.
    `idempotency_key`: fixed once per capture by the caller (e.g. `capture-<payment id>`) and
    sent unchanged on every attempt and re-send. `currency`: the charge's ISO 4217 code, for
    a provider whose capture names it (Adyen; None: not sent). `reference`: our operation's
    id, for a provider that files the capture under it (Adyen's `reference`; None: not
    sent). Raises ValueError on bad values.
    """

    acquirer_reference: str
    amount: int | None
    idempotency_key: str
    currency: str | None = None
    reference: str | None = None

    def __post_init__(self) -> None:
        _validate_reference("acquirer_reference", self.acquirer_reference)
        _validate_optional_amount(self.amount)
        _validate_idempotency_key(self.idempotency_key)
        _validate_optional_currency(self.currency)
        if self.reference is not None:
            _validate_reference("reference", self.reference)


@dataclass(frozen=True, slots=True)
class VoidRequest:
    """
    Release an authorised, uncaptured charge (`POST /charges/{id}/void`).

    `acquirer_reference`: the acquirer's charge id. `idempotency_key`: fixed once per void
    (e.g. `void-<payment id>`), sent on every attempt. `reference`: our operation's id, for a
    provider that files the void under it (Adyen; None: not sent). Raises ValueError on bad
    values.
    """

    acquirer_reference: str
    idempotency_key: str
    reference: str | None = None

    def __post_init__(self) -> None:
        _validate_reference("acquirer_reference", self.acquirer_reference)
        _validate_idempotency_key(self.idempotency_key)
        if self.reference is not None:
            _validate_reference("reference", self.reference)


@dataclass(frozen=True, slots=True)
class RefundRequest:
    """
    Give back part or all of a captured charge (`POST /refunds`).

    `acquirer_reference`: the acquirer's charge id. `refund_reference`: our refund's id, sent
    as the wire's "reference"; `lookup_refunds` finds the refund by it after a lost answer.
    `amount`: minor units, at most what remains refundable (captured minus refunded); None
    refunds all that remains. `idempotency_key`: fixed once per refund (e.g.
    `refund-<refund id>`), sent on every attempt. `currency`: the charge's ISO 4217 code, for
    a provider whose refund names it (Adyen; None: not sent). Raises ValueError on bad values.
    """

    acquirer_reference: str
    refund_reference: str
    amount: int | None
    idempotency_key: str
    currency: str | None = None

    def __post_init__(self) -> None:
        _validate_reference("acquirer_reference", self.acquirer_reference)
        _validate_reference("refund_reference", self.refund_reference)
        _validate_optional_amount(self.amount)
        _validate_idempotency_key(self.idempotency_key)
        _validate_optional_currency(self.currency)


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """
    One step of a call to the acquirer, as its attempt log line says it: a request sent
    (`sent` True) or the call stopped before sending one (the breaker, the rate gate, the
    concurrency limiter, the deadline: `sent` False). A call's records, in order, are its
    result's or its error's `attempt_log`.

    `attempt`: requests sent so far (this one included). `started_at`: when this request
    started, wall clock, seconds since the Unix epoch (None when nothing was sent);
    `elapsed`: its duration in seconds. `status_code`: the acquirer's HTTP status (None
    without an answer). `outcome`: the result's outcome (`approved`, `declined`, `ok`,
    `succeeded` ...) or the error's class name, which `error` repeats for an error.
    `decision`: `return`, `retry` or `raise`, with `stop_reason` for a raise (`permanent`,
    `ambiguous`, `max_attempts`, `budget`, `gate`, `circuit_open`, `concurrency`, `deadline`,
    `server_wait_too_long`, `provider_no_retry`: the provider said not to, e.g.
    `Stripe-Should-Retry: false`). `wait` (seconds) and `wait_source` (`retry-after`,
    `quota-header`, `gate`, `backoff`): the sleep chosen before the next attempt;
    `server_wait`: the acquirer's own wait. `budget_retries`: the retry budget's retries
    available at that moment; `gate_remaining`: the rate gate's remaining closed time
    (seconds); `gate_waited`: seconds the call waited for the gate so far. `breaker_state`: the
    circuit breaker's state after this step. `provider_request_id`: the provider's id of
    this request from its answer (Stripe's `Request-Id`; None when it sends none). All seconds
    rounded to milliseconds.
    """

    attempt: int
    sent: bool
    outcome: str
    decision: str
    started_at: float | None = None
    elapsed: float | None = None
    status_code: int | None = None
    error: str | None = None
    stop_reason: str | None = None
    wait: float | None = None
    wait_source: str | None = None
    server_wait: float | None = None
    budget_retries: float | None = None
    gate_remaining: float | None = None
    gate_waited: float = 0.0
    breaker_state: str | None = None
    provider_request_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields that apply (None left out), JSON-ready."""
        return {
            name: value for name in self.__slots__ if (value := getattr(self, name)) is not None
        }


@dataclass(frozen=True, slots=True)
class Authorization:
    """
    The charge as the acquirer shows it: the authorisation (approved or declined) and, when
    the answer carries it, its capture state.

    A decline is a value (`approved=False`, usually with a `decline_code`), not an exception.
    `replayed` is True when the acquirer answered from its idempotency store. `attempts` is
    how many requests the call sent to get this answer (1 without retries) and `attempt_log`
    each of them (`AttemptRecord`, in order); neither is part of equality.
    `payment_reference` is the one the request carried, as the acquirer echoes it;
    `acquirer_reference` is the acquirer's own id of the charge.

    The capture state (all None when the answer has none: an automatic authorisation's
    answer; present in the answers of a manual authorisation, a capture, a void and a
    look-up): `captured` (captured at once or by a capture), `amount_captured` (minor units;
    less than `amount` after a partial capture, 0 before a capture), `amount_refunded` (the
    sum of the succeeded refunds, at most `amount_captured`), `voided` (the authorisation was
    released), `captured_at` and `voided_at` (aware UTC, or None).
    """

    acquirer_reference: str
    approved: bool
    decline_code: str | None
    amount: int
    currency: str
    payment_reference: str
    created_at: datetime
    replayed: bool = False
    captured: bool | None = None
    amount_captured: int | None = None
    amount_refunded: int | None = None
    voided: bool | None = None
    captured_at: datetime | None = None
    voided_at: datetime | None = None
    attempts: int = field(default=1, compare=False)
    attempt_log: tuple[AttemptRecord, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Refund:
    """
    The acquirer's refund of (part of) a captured charge: succeeded or failed.

    A failed refund is a value (`status="failed"` with a `failure_code` such as
    `do_not_honor`), not an exception, like a decline; only `succeeded` counts in the charge's
    `amount_refunded`. `acquirer_reference` is the acquirer's refund id (`re_...`); `charge`
    the acquirer's charge id it refunds; `refund_reference` ours, as the acquirer echoes it;
    `amount` minor units of `currency` (the charge's). `created_at` aware UTC. `replayed` and
    `attempts` and `attempt_log` as in Authorization (not part of equality).
    """

    acquirer_reference: str
    charge: str
    amount: int
    currency: str
    refund_reference: str
    status: RefundStatus
    failure_code: str | None
    created_at: datetime
    replayed: bool = False
    attempts: int = field(default=1, compare=False)
    attempt_log: tuple[AttemptRecord, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class Received:
    """
    A capture, void or refund the provider accepted without its outcome (Adyen's `201`
    `"status": "received"`): pending, neither applied nor failed, until the provider says which
    (a notification: CAPTURE / CAPTURE_FAILED, CANCELLATION, REFUND / REFUND_FAILED). Never
    "done": the service keeps the operation pending (a capture's payment `capture_pending`).

    `operation`: "capture", "void" or "refund". `acquirer_reference`: the provider's id of the
    modification (Adyen's `pspReference`), which its notification names; `charge`: the
    provider's id of the payment it modifies (Adyen's `paymentPspReference`). `reference`:
    ours as the provider echoes it (the operation's or refund's id; None when it echoes none).
    `amount`: minor units of `currency` (None for a void). `replayed`, `attempts`,
    `attempt_log` as in Authorization (not part of equality).
    """

    operation: Literal["capture", "void", "refund"]
    acquirer_reference: str
    charge: str
    reference: str | None
    amount: int | None
    currency: str | None
    replayed: bool = False
    attempts: int = field(default=1, compare=False)
    attempt_log: tuple[AttemptRecord, ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class ActionRequired:
    """
    The provider holds the authorisation for the shopper (3-D Secure by redirect): neither
    approved nor declined until the shopper acts on the provider's page, `url`, and comes
    back (to the request's `return_url`). A look-up later shows the outcome (`Authorization`)
    or, while the shopper has not finished, this again.

    `acquirer_reference`: the provider's id of the payment (the sandbox's `ch_...`, Stripe's
    `pi_...`), which a void of the abandoned action names. `url`: the absolute http(s) URL
    of the page to send the shopper's browser to. `payment_reference`, `amount` (minor
    units), `currency` (ISO 4217), `created_at` (aware UTC) as in Authorization; `replayed`,
    `attempts` and `attempt_log` as there (not part of equality).
    """

    acquirer_reference: str
    url: str
    amount: int
    currency: str
    payment_reference: str
    created_at: datetime
    replayed: bool = False
    attempts: int = field(default=1, compare=False)
    attempt_log: tuple[AttemptRecord, ...] = field(default=(), compare=False)

    @classmethod
    def waiting(cls, base: Authorization, url: str) -> ActionRequired:
        """The action of an authorization whose fields (`base`: the provider's id, amount,
        currency, our reference, creation, replayed) were read from the same answer, the
        shopper's page at `url` (checked by the caller with is_page_url)."""
        return cls(
            acquirer_reference=base.acquirer_reference,
            url=url,
            amount=base.amount,
            currency=base.currency,
            payment_reference=base.payment_reference,
            created_at=base.created_at,
            replayed=base.replayed,
        )
