"""Adyen's stored notifications read back as records, for the ledger audit (docs/connectors.md,
"The ledger audit per provider"; ADR 0047).

:func:`adyen_notified_since` gives, for an ``adyen`` acquirer, every stored (so verified)
notification item of the given event codes received since a moment, as :class:`Notified`
values. A row's ``body`` is the whole batch as received (card numbers redacted); its item is the
one whose identity (``eventCode:pspReference:merchantReference:success``) is the row's
``event_id``. Reads PostgreSQL only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime

from gateway_client import NotificationError, NotificationItem, notification_items
from payments.models import AcquirerNotification

__all__ = ["Notified", "adyen_notified_since"]

_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Notified:
    """One notification item as Adyen signed it: ``psp_reference`` (its id of the payment or of
    the modification), ``original_reference`` (a modification's payment; None otherwise),
    ``merchant_reference`` (ours: a payment id, or a refund's or operation's id),
    ``event_code``, ``success``, ``amount`` in our minor units of ``currency`` (ISO 4217; None
    when absent), ``received_at`` (when we stored it, aware)."""

    psp_reference: str
    original_reference: str | None
    merchant_reference: str
    event_code: str
    success: bool
    amount: int | None
    currency: str | None
    received_at: datetime


def adyen_notified_since(
    acquirer: str, since: datetime, codes: Collection[str]
) -> Iterator[Notified]:
    """The stored items of ``acquirer`` with an event code in ``codes`` received at or after
    ``since``, in no particular order."""
    rows = AcquirerNotification.objects.filter(
        acquirer=acquirer, event_type__in=list(codes), received_at__gte=since
    ).only("event_id", "body", "received_at")
    for row in rows.iterator(chunk_size=_CHUNK):
        try:
            items = notification_items(row.body.encode("utf-8"))
        except NotificationError:
            continue  # stored only after parsing: only a hand-edited row can fail here
        for item in items:
            if _identity(item) == row.event_id:
                yield Notified(
                    psp_reference=item.psp_reference,
                    original_reference=item.original_reference,
                    merchant_reference=item.merchant_reference,
                    event_code=item.event_code,
                    success=item.success,
                    amount=item.amount,
                    currency=item.currency,
                    received_at=row.received_at,
                )
                break


def _identity(item: NotificationItem) -> str:
    """The item's event identity, as the Adyen connector stores it."""
    flag = "true" if item.success else "false"
    return ":".join((item.event_code, item.psp_reference, item.merchant_reference, flag))
