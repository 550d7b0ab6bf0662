"""
Adyen's standard notifications (webhooks), framework-free: the HMAC signature of an item and
the body parsed into items, for the service's notification endpoint (built elsewhere: it
receives the POST, calls these, and records each item's outcome).

The signature (Adyen's "Verify HMAC signatures" for standard webhooks): HMAC-SHA256, keyed
with the HMAC key from the Customer Area (64 hex digits, decoded to bytes), over the item's
`pspReference`, `originalReference`, `merchantAccountCode`, `merchantReference`,
`amount.value`, `amount.currency`, `eventCode` and `success` joined with `:` (a missing
field is the empty string; nothing is escaped: a `:` or `\\` in a merchant reference is
signed as it is), base64-encoded; it travels in `additionalData.hmacSignature`. Compared in
constant time.

    items = notification_items(body)               # NotificationError for a malformed body
    for item in items:
        if not signature_valid(item.raw, hmac_key_hex):
            ...                                    # refuse the whole request (401)
        outcome = item_outcome(item)               # what it says about which operation

An item's `amount` is converted to our minor units (ISO 4217) like the dialect's answers.

`AdyenNotifications` is the service's `NotificationConnector` for Adyen, built on these:
`verify` checks every item's HMAC on the raw body (any of the configured keys, newest first,
during a rotation) and that every item is for our merchant account; `parse` maps each item to
a `ProviderNotification`. Adyen answers a capture, cancel or refund `received` and tells its
outcome only here, and has no look-up, so those items carry an `OperationOutcome`: the
record that settles the operation (ADR 0047). An `AUTHORISATION` item is a hint (the
authorization is resolved by re-sending with its idempotency key), except for a payment
waiting for its shopper, whose action it ends (`authorised`: its `success`; ADR 0049);
dispute events carry a `DisputeNotice` keyed by the payment's `pspReference` (one dispute
per payment at Adyen); anything else is `other`. Adyen expects `[accepted]` in a 2xx answer.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from .adyen import from_adyen_amount
from .disputes import ADYEN_DISPUTE_EVENTS, ADYEN_DISPUTE_STATUSES, DisputeNotice
from .notifications import (
    NotificationRejected,
    OperationOutcome,
    ProviderNotification,
    Subject,
)
from .wire import MalformedBody

__all__ = [
    "AdyenNotifications",
    "NotificationError",
    "NotificationItem",
    "NotificationOutcome",
    "item_outcome",
    "notification_items",
    "signature",
    "signature_valid",
    "signed_payload",
]

_HEX_KEY = re.compile(r"(?:[0-9A-Fa-f]{2}){16,128}")
_CURRENCY = re.compile(r"[A-Z]{3}")
_MAX_BODY = 1_000_000


class NotificationError(ValueError):
    """A notification body or item that is not Adyen's documented shape; the message names
    the field, never a value."""


@dataclass(frozen=True, slots=True)
class NotificationItem:
    """
    One `NotificationRequestItem`.

    `psp_reference`: Adyen's id of what the event is about (a payment, or a modification:
    a capture's, a refund's); `original_reference`: for a modification, the payment's
    `pspReference` (None otherwise); `merchant_reference`: the `reference` we sent (our
    payment id, or our operation's or refund's id for a modification); `merchant_account`;
    `event_code` (`AUTHORISATION`, `CAPTURE`, `CAPTURE_FAILED`, `CANCELLATION`, `REFUND`,
    `REFUND_FAILED`, ...); `success`: the item's `"true"` / `"false"`; `amount` in our minor
    units of `currency` (ISO 4217), None when absent; `reason` (a refusal's reason, or
    details; free text, never logged); `raw`: the item as received (what the signature is
    computed over; not part of equality or repr).
    """

    psp_reference: str
    original_reference: str | None
    merchant_reference: str
    merchant_account: str
    event_code: str
    success: bool
    amount: int | None
    currency: str | None
    reason: str | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)


def signed_payload(item: Mapping[str, Any]) -> str:
    """The string an item's HMAC signs: the eight fields joined with `:` (see the module
    docstring), each as received (missing: empty)."""
    amount = item.get("amount")
    amount = amount if isinstance(amount, Mapping) else {}
    parts = [
        item.get("pspReference"),
        item.get("originalReference"),
        item.get("merchantAccountCode"),
        item.get("merchantReference"),
        amount.get("value"),
        amount.get("currency"),
        item.get("eventCode"),
        item.get("success"),
    ]
    return ":".join("" if part is None else str(part) for part in parts)


def signature(item: Mapping[str, Any], hmac_key_hex: str) -> str:
    """The base64 HMAC-SHA256 of `signed_payload(item)` under `hmac_key_hex` (the Customer
    Area's key: 32 to 256 hex digits, decoded to bytes). ValueError for a key that is not
    hex (the message never repeats it)."""
    if not isinstance(hmac_key_hex, str) or not _HEX_KEY.fullmatch(hmac_key_hex):
        raise ValueError("the HMAC key must be an even number (32-256) of hex digits")
    key = binascii.unhexlify(hmac_key_hex)
    digest = hmac.new(key, signed_payload(item).encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_valid(item: Mapping[str, Any], hmac_key_hex: str) -> bool:
    """True when the item's `additionalData.hmacSignature` is its signature under
    `hmac_key_hex`, compared in constant time; False when it is missing or differs.
    ValueError for a bad key (a configuration error, not a bad notification)."""
    expected = signature(item, hmac_key_hex)
    additional = item.get("additionalData")
    given = additional.get("hmacSignature") if isinstance(additional, Mapping) else None
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))


def notification_items(body: bytes) -> list[NotificationItem]:
    """The items of a notification body (`{"live": ..., "notificationItems":
    [{"NotificationRequestItem": {...}}, ...]}`), in order. NotificationError naming the
    field for anything else (not JSON, too large, a missing or mistyped field)."""
    if not isinstance(body, bytes) or len(body) > _MAX_BODY:
        raise NotificationError("the body is not bytes of at most 1 MB")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise NotificationError("the body is not JSON") from None
    wrapped = document.get("notificationItems") if isinstance(document, dict) else None
    if not isinstance(wrapped, list) or not wrapped:
        raise NotificationError("field 'notificationItems' is missing or empty")
    items = []
    for index, entry in enumerate(wrapped):
        raw = entry.get("NotificationRequestItem") if isinstance(entry, dict) else None
        if not isinstance(raw, dict):
            raise NotificationError(f"notificationItems[{index}]: no NotificationRequestItem")
        items.append(notification_item(raw, where=f"notificationItems[{index}]"))
    return items


def notification_item(raw: Mapping[str, Any], *, where: str = "item") -> NotificationItem:
    """One `NotificationRequestItem` (a mapping) as a NotificationItem; NotificationError
    naming the field when it is not the documented shape."""

    def text(name: str, *, required: bool = True) -> str | None:
        value = raw.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or (required and not value):
            raise NotificationError(f"{where}: field {name!r} is missing or not a string")
        return value

    success = text("success")
    if success not in ("true", "false"):
        raise NotificationError(f"{where}: field 'success' is not 'true' or 'false'")
    amount = currency = None
    if raw.get("amount") is not None:
        amount, currency = _amount(raw["amount"], where)
    return NotificationItem(
        psp_reference=text("pspReference") or "",
        original_reference=text("originalReference", required=False) or None,
        merchant_reference=text("merchantReference") or "",
        merchant_account=text("merchantAccountCode") or "",
        event_code=text("eventCode") or "",
        success=success == "true",
        amount=amount,
        currency=currency,
        reason=text("reason", required=False) or None,
        raw=raw,
    )


def _amount(value: Any, where: str) -> tuple[int, str]:
    if not isinstance(value, Mapping):
        raise NotificationError(f"{where}: field 'amount' is not an object")
    currency, minor = value.get("currency"), value.get("value")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise NotificationError(f"{where}: field 'amount.currency' is not an ISO 4217 code")
    if type(minor) is not int or minor < 0:
        raise NotificationError(f"{where}: field 'amount.value' is not a non-negative integer")
    try:
        return from_adyen_amount(minor, currency), currency
    except MalformedBody:
        raise NotificationError(f"{where}: field 'amount.value' has no ISO 4217 amount") from None


#: What an event says: (the operation it settles, whether it says "applied" when `success`).
_EVENTS: dict[str, tuple[Literal["authorize", "capture", "void", "refund"], bool]] = {
    "AUTHORISATION": ("authorize", True),
    "CAPTURE": ("capture", True),
    "CAPTURE_FAILED": ("capture", False),
    "CANCELLATION": ("void", True),
    "REFUND": ("refund", True),
    "REFUND_FAILED": ("refund", False),
}


@dataclass(frozen=True, slots=True)
class NotificationOutcome:
    """What an item settles: `operation` ("authorize", "capture", "void", "refund"),
    `applied` (True: authorised / captured / cancelled / refunded; False: refused or failed),
    `acquirer_reference` (Adyen's id of the payment for an authorization, of the modification
    otherwise: what our row recorded from the answer), `payment_reference` (Adyen's id of the
    payment: `originalReference` for a modification), `reference` (ours, as echoed),
    `failure_code` (a token when not applied), `amount` (our minor units, or None)."""

    operation: Literal["authorize", "capture", "void", "refund"]
    applied: bool
    acquirer_reference: str
    payment_reference: str
    reference: str
    failure_code: str | None
    amount: int | None


def item_outcome(item: NotificationItem) -> NotificationOutcome | None:
    """The outcome `item` reports, or None for an event that settles none of our operations
    (REPORT_AVAILABLE, a dispute's events: the caller records and ignores them).

    `CAPTURE` / `CANCELLATION` / `REFUND` with `success` "true" are applied, with "false"
    failed (Adyen refused the modification); `CAPTURE_FAILED` and `REFUND_FAILED` are failed
    whatever `success` says (the scheme refused it after Adyen accepted it). The failure code
    is `adyen_<event code in lower case>` (the reason is free text and not kept)."""
    event = _EVENTS.get(item.event_code)
    if event is None:
        return None
    operation, applied_when_success = event
    applied = applied_when_success and item.success
    payment = item.psp_reference if operation == "authorize" else item.original_reference
    if payment is None:
        raise NotificationError(f"{item.event_code}: field 'originalReference' is missing")
    return NotificationOutcome(
        operation=operation,
        applied=applied,
        acquirer_reference=item.psp_reference,
        payment_reference=payment,
        reference=item.merchant_reference,
        failure_code=None if applied else f"adyen_{item.event_code.lower()}",
        amount=item.amount,
    )


#: Longest event id stored (`AcquirerNotification.event_id`).
_MAX_EVENT_ID = 255


class AdyenNotifications:
    """Adyen's notification connector (see the module docstring). `hmac_keys`: the HMAC keys
    of the webhook, newest first (hex, as the Customer Area shows them); `merchant_account`:
    ours, the only one whose items are accepted. ValueError for no key or a key that is not
    hex (the message never repeats a key)."""

    def __init__(self, hmac_keys: Sequence[str], *, merchant_account: str) -> None:
        if not hmac_keys:
            raise ValueError("at least one HMAC key is required")
        for key in hmac_keys:
            if not isinstance(key, str) or not _HEX_KEY.fullmatch(key):
                raise ValueError("an HMAC key must be an even number (32-256) of hex digits")
        self._keys = tuple(hmac_keys)
        self._merchant_account = merchant_account

    def __repr__(self) -> str:
        return f"AdyenNotifications(hmac_keys=<{len(self._keys)} hidden>)"

    def verify(self, raw: bytes, headers: dict[str, str]) -> None:
        """Every item of `raw` signed by one of our keys and for our merchant account.
        NotificationRejected: `malformed` (not Adyen's shape), `missing_signature` (an item
        without `hmacSignature`), `bad_signature` (one that matches no key, or another
        merchant account's item: one bad item refuses the batch, which Adyen then retries)."""
        try:
            items = notification_items(raw)
        except NotificationError as exc:
            raise NotificationRejected("malformed", str(exc)) from None
        for index, item in enumerate(items):
            additional = item.raw.get("additionalData")
            given = additional.get("hmacSignature") if isinstance(additional, Mapping) else None
            if not isinstance(given, str) or not given:
                raise NotificationRejected(
                    "missing_signature", f"item {index} has no additionalData.hmacSignature"
                )
            if not any(signature_valid(item.raw, key) for key in self._keys):
                raise NotificationRejected("bad_signature", f"item {index}: no key signs it")
            if item.merchant_account != self._merchant_account:
                raise NotificationRejected(
                    "bad_signature", f"item {index} is for another merchant account"
                )

    def parse(self, raw: bytes) -> list[ProviderNotification]:
        """The items of a verified body, in order (see the module docstring)."""
        try:
            return [_notification(item) for item in notification_items(raw)]
        except NotificationError as exc:
            raise NotificationRejected("malformed", str(exc)) from None

    def acknowledgement(self) -> tuple[int, bytes, str]:
        """200 `[accepted]`: what Adyen's notification system expects."""
        return 200, b"[accepted]", "text/plain; charset=utf-8"


def _notification(item: NotificationItem) -> ProviderNotification:
    flag = "true" if item.success else "false"
    event_id = ":".join((item.event_code, item.psp_reference, item.merchant_reference, flag))
    if len(event_id) > _MAX_EVENT_ID:
        raise NotificationError("the item's references are too long for an event id")
    occurred_at = _event_date(item.raw.get("eventDate"))
    other = ProviderNotification(
        event_id=event_id, event_type=item.event_code, subject="other", occurred_at=occurred_at
    )
    if item.event_code in ADYEN_DISPUTE_EVENTS:
        return replace(
            other,
            subject="dispute",
            payment_reference=item.merchant_reference,
            acquirer_reference=item.original_reference,
            dispute=_dispute(item),
        )
    outcome = item_outcome(item)
    if outcome is None:
        return other
    if outcome.operation == "authorize":
        return replace(
            other,
            subject="payment",
            payment_reference=item.merchant_reference,
            acquirer_reference=item.psp_reference,
            authorised=item.success,
        )
    subject: Subject = "refund" if outcome.operation == "refund" else "payment"
    return replace(
        other,
        subject=subject,
        acquirer_reference=outcome.payment_reference,
        refund_reference=item.merchant_reference if subject == "refund" else None,
        outcome=OperationOutcome(
            operation=outcome.operation,
            applied=outcome.applied,
            reference=outcome.reference,
            acquirer_reference=outcome.acquirer_reference,
            failure_code=outcome.failure_code,
            amount=outcome.amount,
        ),
    )


def _event_date(value: Any) -> datetime | None:
    """`eventDate` (ISO 8601 with an offset) as aware UTC; None when absent or unreadable
    (the date is informative: nothing is refused for it)."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.astimezone(UTC) if moment.tzinfo is not None else None


def _dispute(item: NotificationItem) -> DisputeNotice:
    """A dispute item's notice: keyed by the payment's `pspReference` (`originalReference`),
    its status from the event code, overridden by a `CHARGEBACK`'s `disputeStatus`."""
    if item.original_reference is None:
        raise NotificationError(f"{item.event_code}: field 'originalReference' is missing")
    if item.amount is None or item.currency is None:
        raise NotificationError(f"{item.event_code}: field 'amount' is missing")
    additional = item.raw.get("additionalData")
    additional = additional if isinstance(additional, Mapping) else {}
    provider_status = additional.get("disputeStatus")
    status = ADYEN_DISPUTE_EVENTS[item.event_code]
    if item.event_code == "CHARGEBACK" and isinstance(provider_status, str):
        status = ADYEN_DISPUTE_STATUSES.get(provider_status, status)
    reason = additional.get("chargebackReasonCode") or additional.get("rfiReasonCode") or ""
    return DisputeNotice(
        dispute_reference=item.original_reference,
        amount=item.amount,
        currency=item.currency,
        reason=reason if isinstance(reason, str) else "",
        status=status,
        evidence_due_by=_event_date(additional.get("defensePeriodEndsAt")),
        provider_status=provider_status if isinstance(provider_status, str) else item.event_code,
    )
