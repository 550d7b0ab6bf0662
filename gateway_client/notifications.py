"""
The connector seam of provider notifications: what a provider pushes to us, verified on the
raw bytes and parsed into plain values. Framework-free: no Django, no storage, no settings.

Each provider has one `NotificationConnector` next to its dialect (`stripe_notifications.py`,
`sandbox_notifications.py`; Adyen's plugs in the same way):

    connector = StripeNotifications(secrets=("whsec_...",), clock=time.time)
    connector.verify(raw_body, headers)          # raises NotificationRejected, else None
    for notice in connector.parse(raw_body):     # [ProviderNotification], or NotificationRejected
        ...
    status, body, content_type = connector.acknowledgement()   # what the provider expects back

`verify` checks the whole request on its raw bytes (Stripe's `Stripe-Signature`, the sandbox's
Standard Webhooks headers, Adyen's HMAC of every `NotificationRequestItem`); `parse` reads a
verified body (the service stores it with card numbers redacted, and parses what it stored),
and raises `NotificationRejected` (`malformed`) for what it cannot read.
`headers` maps lower-case names to values. Nothing here logs; a rejection's message never holds
a secret, a signature or the body.

A notification is a hint or a record (ADR 0046): `ProviderNotification.subject` says what it is
about (`payment`, `refund`, `dispute`, or `other`: stored and ignored), with our references
where the provider echoes them (`payment_reference`: our payment id; `refund_reference`: our
refund id) and the provider's (`acquirer_reference`: its payment's id). A dispute carries its
`DisputeNotice` (disputes.py): a dispute exists only as the provider's word.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from .disputes import DisputeNotice

__all__ = [
    "MAX_NOTIFICATION_BYTES",
    "NotificationConnector",
    "NotificationRejected",
    "OperationOutcome",
    "ProviderNotification",
    "Subject",
]

#: The largest notification body any connector accepts (bytes): Stripe's events and Adyen's
#: batches stay well below it.
MAX_NOTIFICATION_BYTES = 256 * 1024

#: What a notification is about.
Subject = Literal["payment", "refund", "dispute", "other"]


class NotificationRejected(Exception):
    """A notification that failed verification or cannot be read. `reason` is a short stable
    code for the metric's label (`missing_signature`, `bad_signature`, `stale_timestamp`,
    `malformed`, `too_large`); the message says what was wrong without quoting a secret, a
    signature or the body."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class OperationOutcome:
    """The provider's word on one of our captures, voids or refunds, for a provider that
    answers a modification `received` and tells its outcome only by notification (Adyen): a
    record, not a hint (ADR 0047).

    `operation`: `capture`, `void` or `refund`; `applied`: True when the provider applied it,
    False when it refused or failed it; `reference`: ours, as echoed (the operation's id, or
    the refund's); `acquirer_reference`: the provider's id of the modification (what its
    `received` answer gave); `failure_code`: a token when not applied; `amount`: minor units
    (ISO 4217) when the provider says, else None.
    """

    operation: Literal["capture", "void", "refund"]
    applied: bool
    reference: str
    acquirer_reference: str
    failure_code: str | None = None
    amount: int | None = None


@dataclass(frozen=True, slots=True)
class ProviderNotification:
    """One verified notification item.

    `event_id`: the provider's identity of the event (Stripe's `evt_...`, the sandbox's
    `ntf_...`; Adyen: the item's event code, `pspReference`, `merchantReference` and success
    flag), the key that deduplicates; `event_type`: the provider's name for it; `occurred_at`:
    when the provider says it happened (aware UTC), when it says. `payment_reference` /
    `refund_reference`: ours, echoed by the provider; `acquirer_reference`: the provider's id
    of the payment. `outcome`: the provider's word on a capture, void or refund
    (`OperationOutcome`), from a provider whose notifications are records of them (Adyen);
    None from the others. `authorised`: the provider's word on the payment's authorization
    (Adyen's `AUTHORISATION` `success`), which ends a customer action at a provider without
    a look-up (docs/adr/0049); None from the others and for other events.
    """

    event_id: str
    event_type: str
    subject: Subject
    occurred_at: datetime | None = None
    payment_reference: str | None = None
    acquirer_reference: str | None = None
    refund_reference: str | None = None
    dispute: DisputeNotice | None = None
    outcome: OperationOutcome | None = None
    authorised: bool | None = None


class NotificationConnector(Protocol):
    """A provider's notification verifier and parser (see the module docstring)."""

    def verify(self, raw: bytes, headers: dict[str, str]) -> None:
        """Check `raw` (the body's exact bytes) against its signature headers. Raises
        `NotificationRejected`; returns None when the request is the provider's."""

    def parse(self, raw: bytes) -> list[ProviderNotification]:
        """The items of a verified body. Raises `NotificationRejected` (`malformed`)."""

    def acknowledgement(self) -> tuple[int, bytes, str]:
        """(status, body, content type) the provider expects for a notification accepted."""
