"""
The API's objects as typed values, decoded strictly from its JSON.

`Payment` and `Refund` mirror the README's payment and refund objects (amounts in minor units
of `currency`, ISO 4217; timestamps aware UTC datetimes). Every result also says how it was
obtained, outside equality: `replayed` (the answer carried `Idempotent-Replayed: true`: the
API's stored answer to an earlier request with the same idempotency key), `request_id` (the
answer's `Request-Id` header, None without one), `status_code` and `attempts` (requests sent
by the call).

`ActionRequired` is a payment the acquirer holds for the shopper (`requires_action`, 3-D
Secure): send the shopper's browser to its `url` before `expires_at`.

`Pending` is a `202`: the outcome is not known yet (never a failure); `object` is the payment
(`processing`, `deferred`, `capture_pending`, `void_pending`) or the refund (`pending`) as the
API showed it, `retry_after` the seconds the API asks to wait before looking again (for a
`deferred` payment: until its `not_before`).

Unknown fields are ignored (the API may add some); a missing field or a wrong JSON type raises
`DecodeError`, which the client turns into `OutcomeUnknown` for a 2xx.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

__all__ = [
    "FINAL_PAYMENT_STATUSES",
    "FINAL_REFUND_STATUSES",
    "ActionRequired",
    "Answered",
    "DecodeError",
    "NextAction",
    "Page",
    "Payment",
    "Pending",
    "Refund",
    "decode_payment",
    "decode_refund",
    "field_of",
    "timestamp_of",
]

#: A payment in one of these statuses will not change without a new request (needs_review
#: waits for an operator; a captured payment can still be refunded, which is its own object).
FINAL_PAYMENT_STATUSES = frozenset(
    {"succeeded", "requires_capture", "canceled", "declined", "failed", "needs_review"}
)
#: The refund statuses that end its `pending` state.
FINAL_REFUND_STATUSES = frozenset({"succeeded", "failed", "needs_review"})


class DecodeError(ValueError):
    """The JSON is not the documented object (names the field, never echoes the value)."""


@dataclass(frozen=True, slots=True)
class Answered:
    """How a result was obtained, outside equality and keyword-only: `replayed`, `request_id`,
    `status_code` and `attempts` (see the module docstring)."""

    replayed: bool = field(default=False, compare=False, kw_only=True)
    request_id: str | None = field(default=None, compare=False, kw_only=True)
    status_code: int = field(default=200, compare=False, kw_only=True)
    attempts: int = field(default=1, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class NextAction:
    """What the shopper must do for a `requires_action` payment: `type` (`redirect_to_url`:
    send the shopper's browser to `url`, the acquirer's page), `expires_at` (aware UTC: not
    finished by then, the payment is voided and ends `canceled`, `decline_code`
    `action_expired`)."""

    type: str
    url: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Payment(Answered):
    """
    The payment object (docs/api.md, "API contract"). `amount`, `amount_captured` and
    `amount_refunded` in minor units of `currency`; `status` one of `processing`, `deferred`
    (created with `allow_deferred=True` while no acquirer could take it: not sent anywhere yet,
    sent at `not_before` or later), `succeeded`, `requires_capture`, `capture_pending`,
    `void_pending`, `canceled`, `declined`, `failed`, `needs_review`. `not_before`: an aware
    UTC datetime while `deferred`, else None. `acquirer`: the name of the acquirer that holds
    it (captures, voids and refunds go there; None from a server older than several
    acquirers). `amount_disputed`: minor units held or withdrawn by the payment's open and lost
    disputes (None from a server older than disputes). `return_url`: the merchant's page the
    shopper comes back to after a customer action, as sent; `next_action`: a `NextAction`
    while `requires_action` (the acquirer holds it for the shopper, 3-D Secure), else None
    (both None from a server older than customer actions). `final` is True when the status
    will not change by itself.
    """

    id: str
    status: str
    amount: int
    currency: str
    payment_method: str
    reference: str | None
    description: str | None
    decline_code: str | None
    failure_code: str | None
    acquirer_reference: str | None
    capture_method: str
    amount_captured: int
    amount_refunded: int
    created_at: datetime
    updated_at: datetime
    not_before: datetime | None = None
    acquirer: str | None = None
    amount_disputed: int | None = None
    return_url: str | None = None
    next_action: NextAction | None = None

    @property
    def final(self) -> bool:
        """True unless the status is `processing`, `deferred`, `requires_action`,
        `capture_pending` or `void_pending`."""
        return self.status in FINAL_PAYMENT_STATUSES


@dataclass(frozen=True, slots=True)
class Refund(Answered):
    """
    The refund object: `id` (`re_...`), `payment` (the payment's id), `amount` in minor units
    of `currency`, `status` (`pending`, `succeeded`, `failed`, `needs_review`), `reason`,
    `failure_code` (why it failed), `acquirer_reference`.
    """

    id: str
    payment: str
    amount: int
    currency: str
    status: str
    reason: str | None
    failure_code: str | None
    acquirer_reference: str | None
    created_at: datetime
    updated_at: datetime

    @property
    def final(self) -> bool:
        """True unless the status is `pending`."""
        return self.status in FINAL_REFUND_STATUSES


T = TypeVar("T", Payment, Refund)


@dataclass(frozen=True, slots=True)
class Pending(Generic[T]):
    """
    A `202`: the outcome is not known yet; the API resolves it (reconciliation) and the same
    request, or `MerchantClient.wait_until_final(pending)`, returns the final object later.
    `object`: the payment or refund as it is now; `retry_after`: seconds to wait before
    looking again (None if the answer gave none); `id`: the object's id.
    """

    object: T
    retry_after: float | None
    replayed: bool = field(default=False, compare=False)
    request_id: str | None = field(default=None, compare=False)
    attempts: int = field(default=1, compare=False)

    @property
    def id(self) -> str:
        """The pending payment's or refund's id."""
        return self.object.id


@dataclass(frozen=True, slots=True)
class ActionRequired:
    """
    A payment the acquirer holds for the shopper (`requires_action`, 3-D Secure by redirect):
    send the shopper's browser to `url` (the acquirer's page) before `expires_at` (aware UTC).
    The shopper comes back to the `return_url` given at creation with `payment_id` in its
    query; then `MerchantClient.get_payment(id)` (or the webhook event) says the outcome:
    `succeeded` / `requires_capture`, `declined`, or, expired unfinished, `canceled`.
    `payment`: the payment as the API showed it; `replayed`, `request_id`, `attempts` as on
    every result.
    """

    payment: Payment
    replayed: bool = field(default=False, compare=False)
    request_id: str | None = field(default=None, compare=False)
    attempts: int = field(default=1, compare=False)

    @property
    def id(self) -> str:
        """The payment's id."""
        return self.payment.id

    @property
    def url(self) -> str:
        """Where to send the shopper's browser."""
        assert self.payment.next_action is not None  # checked by `action_required`
        return self.payment.next_action.url

    @property
    def expires_at(self) -> datetime:
        """When the action expires unfinished (aware UTC)."""
        assert self.payment.next_action is not None
        return self.payment.next_action.expires_at


def action_required(payment: Payment) -> ActionRequired | Payment:
    """`payment` as an `ActionRequired` when it is `requires_action` (which `decode_payment`
    checked has its `next_action`), else unchanged."""
    if payment.status != "requires_action":
        return payment
    return ActionRequired(
        payment,
        replayed=payment.replayed,
        request_id=payment.request_id,
        attempts=payment.attempts,
    )


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list, newest first: `data`, `has_more`; pass the last item's id as
    `starting_after` to read the next page. `request_id` as on every result."""

    data: tuple[T, ...]
    has_more: bool
    request_id: str | None = field(default=None, compare=False)


def field_of(document: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """`document[name]` if present and of JSON type `kind` (a bool is never an int); else
    raises DecodeError naming the field."""
    value = document.get(name)
    if name not in document or not isinstance(value, kind) or isinstance(value, bool):
        raise DecodeError(f"field {name!r} is missing or not of the documented type")
    return value


def _optional_str(document: Mapping[str, Any], name: str) -> str | None:
    value = document.get(name)
    if value is not None and not isinstance(value, str):
        raise DecodeError(f"field {name!r} is not a string or null")
    return value


def _optional_int(document: Mapping[str, Any], name: str) -> int | None:
    value = document.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise DecodeError(f"field {name!r} is not an integer or null")
    return value


def timestamp_of(document: Mapping[str, Any], name: str) -> datetime:
    """`document[name]` read as an RFC 3339 timestamp with an offset; else DecodeError."""
    text = field_of(document, name, str)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise DecodeError(f"field {name!r} is not an RFC 3339 timestamp") from None
    if value.tzinfo is None:
        raise DecodeError(f"field {name!r} has no UTC offset")
    return value


def _optional_timestamp(document: Mapping[str, Any], name: str) -> datetime | None:
    """`document[name]` as `timestamp_of` reads it, or None when it is null or absent."""
    if document.get(name) is None:
        return None
    return timestamp_of(document, name)


def _next_action(document: Mapping[str, Any], name: str) -> NextAction | None:
    """`document[name]` as a `NextAction` (`type`, `url`, `expires_at`), or None when null or
    absent. Raises DecodeError."""
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DecodeError(f"field {name!r} is not an object or null")
    return NextAction(
        type=field_of(value, "type", str),
        url=field_of(value, "url", str),
        expires_at=timestamp_of(value, "expires_at"),
    )


def _object(document: object, kind: str) -> Mapping[str, Any]:
    if not isinstance(document, dict) or document.get("object") != kind:
        raise DecodeError(f"not a {kind} object")
    return document


#: How each annotated field type of `Payment` and `Refund` is read from the JSON.
_READERS: dict[str, Callable[[Mapping[str, Any], str], Any]] = {
    "str": lambda document, name: field_of(document, name, str),
    "int": lambda document, name: field_of(document, name, int),
    "str | None": _optional_str,
    "int | None": _optional_int,
    "datetime": timestamp_of,
    "datetime | None": _optional_timestamp,
    "NextAction | None": _next_action,
}


def _decode(cls: type[T], kind: str, document: object, meta: dict[str, Any]) -> T:
    doc = _object(document, kind)
    values = {
        f.name: _READERS[str(f.type)](doc, f.name) for f in dataclasses.fields(cls) if f.compare
    }
    return cls(**values, **meta)


def decode_payment(document: object, **meta: Any) -> Payment:
    """A `Payment` from the decoded JSON of a payment object; `meta` sets `replayed`,
    `request_id`, `status_code`, `attempts`. Raises DecodeError (also for a `requires_action`
    payment without its `next_action`)."""
    payment = _decode(Payment, "payment", document, meta)
    if payment.status == "requires_action" and payment.next_action is None:
        raise DecodeError("field 'next_action' is missing for a requires_action payment")
    return payment


def decode_refund(document: object, **meta: Any) -> Refund:
    """A `Refund` from the decoded JSON of a refund object; `meta` as `decode_payment`'s.
    Raises DecodeError."""
    return _decode(Refund, "refund", document, meta)
