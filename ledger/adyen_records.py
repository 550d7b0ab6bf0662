"""An Adyen acquirer's records for the ledger audit: what Adyen told us, as we stored it.

Adyen's Checkout API lists nothing (no payment or modification can be looked up by our
reference, ADR 0041), and its settlement reports are files of the Customer Area, not read
here. What Adyen said is kept in two places, written when it said it and never rewritten
(ADR 0047):

- **its answers**: each ``acquirer_attempt`` event of a payment at this acquirer whose outcome
  is ``approved`` or ``declined`` (or ``action_required``: Adyen waits for the shopper, ADR
  0049) carries the ``pspReference`` Adyen answered; a payment
  resolved by reconciliation's same-key re-send has a ``reconciled`` event and the
  ``pspReference`` that answer stored on the payment;
- **its verified notifications** (HMAC-checked on the raw bytes, stored first): each
  ``AUTHORISATION`` item is Adyen's word on a payment (``success``, ``pspReference``, our
  payment id as ``merchantReference``, the amount), each ``REFUND`` / ``REFUND_FAILED`` item its
  word on one of our refunds (our refund id as ``merchantReference``, the payment's
  ``pspReference`` as ``originalReference``); a successful ``CANCELLATION`` of a payment
  Adyen answered waiting for its shopper makes its record ``canceled`` (the expiry's cancel).

:class:`AdyenAcquirerRecords` gives one :class:`~ledger.acquirer_records.AcquirerRecord` per
``pspReference`` (a notification's word over an answer's for the same one) and one
:class:`~ledger.acquirer_records.AcquirerRefundRecord` per refund notification. The audit then
finds what they can show: an ``AUTHORISATION`` for a reference that is none of ours (record
unknown to us), a second ``pspReference`` for one payment (authorized twice), a notification
that contradicts our status or amount, a refund Adyen reports that we do not hold or hold
otherwise. An answer agrees with our row by construction, so a payment with an answer and no
notification is only checked for presence. Capture states are not reported (None): captures
are settled by their notifications through the state machine already (ADR 0047).

Reads PostgreSQL only: no network call, no write.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import datetime

from ledger.acquirer_records import AcquirerRecord, AcquirerRefundRecord
from payments.models import Payment, PaymentEvent, PaymentEventType
from payments.notifications.records import adyen_notified_since

__all__ = ["AdyenAcquirerRecords"]

_CHUNK = 500
_REFUND_EVENTS = ("REFUND", "REFUND_FAILED")


class AdyenAcquirerRecords:
    """Adyen's answers and verified notifications for the acquirer ``acquirer`` (its name in
    ``ACQUIRERS``), as the module docstring says."""

    def __init__(self, *, acquirer: str) -> None:
        self.name = "adyen answers and notifications"
        self._acquirer = acquirer

    def records_since(self, since: datetime) -> Iterator[AcquirerRecord]:
        """Every payment record since ``since`` (answers by their event's time, notifications
        by their arrival), oldest first, one per ``pspReference``."""
        by_psp: dict[str, AcquirerRecord] = {}
        for record in self._answers(since):
            by_psp.setdefault(record.acquirer_reference, record)
        for item in adyen_notified_since(self._acquirer, since, ("AUTHORISATION",)):
            by_psp[item.psp_reference] = AcquirerRecord(
                acquirer_reference=item.psp_reference,
                reference=item.merchant_reference,
                status="approved" if item.success else "declined",
                amount=item.amount if item.amount is not None else 0,
                currency=item.currency or "",
                created_at=item.received_at,
            )
        for item in adyen_notified_since(self._acquirer, since, ("CANCELLATION",)):
            waited = by_psp.get(item.original_reference or "")
            if item.success and waited is not None and waited.status == "requires_action":
                # The expiry's cancel of a payment that waited for its shopper (ADR 0049).
                by_psp[waited.acquirer_reference] = replace(waited, status="canceled")
        return iter(sorted(by_psp.values(), key=lambda r: (r.created_at, r.acquirer_reference)))

    def refunds_since(self, since: datetime) -> Iterator[AcquirerRefundRecord]:
        """Every refund notification (``REFUND`` succeeded; ``REFUND_FAILED`` or an unsuccessful
        ``REFUND`` failed) received since ``since``, oldest first."""
        records = [
            AcquirerRefundRecord(
                acquirer_reference=item.psp_reference,
                charge=item.original_reference or "",
                reference=item.merchant_reference,
                status="succeeded" if item.success and item.event_code == "REFUND" else "failed",
                amount=item.amount if item.amount is not None else 0,
                currency=item.currency or "",
                created_at=item.received_at,
            )
            for item in adyen_notified_since(self._acquirer, since, _REFUND_EVENTS)
        ]
        return iter(sorted(records, key=lambda r: (r.created_at, r.acquirer_reference)))

    def _answers(self, since: datetime) -> Iterable[AcquirerRecord]:
        payments = {
            p.id: p
            for p in Payment.objects.filter(acquirer=self._acquirer, created_at__gte=since).only(
                "id", "amount", "currency", "acquirer_reference"
            )
        }
        ids = list(payments)
        for start in range(0, len(ids), _CHUNK):
            events = PaymentEvent.objects.filter(
                payment_id__in=ids[start : start + _CHUNK],
                type__in=(PaymentEventType.ACQUIRER_ATTEMPT, PaymentEventType.RECONCILED),
            ).only("payment_id", "type", "to_status", "data", "created_at")
            for event in events:
                payment = payments[event.payment_id]
                answered = _answered(event, payment, self._acquirer)
                if answered is not None:
                    yield AcquirerRecord(
                        acquirer_reference=answered[0],
                        reference=payment.id,
                        status=answered[1],
                        amount=payment.amount,
                        currency=payment.currency,
                        created_at=event.created_at,
                    )


def _answered(event: PaymentEvent, payment: Payment, acquirer: str) -> tuple[str, str] | None:
    """(pspReference, ``approved``, ``declined`` or ``requires_action``) Adyen answered in
    ``event``, or None."""
    if event.type == PaymentEventType.ACQUIRER_ATTEMPT:
        data = event.data or {}
        outcome, psp = data.get("outcome"), data.get("acquirer_reference")
        if data.get("operation", "authorize") != "authorize" or data.get("acquirer") != acquirer:
            return None
        if outcome in ("approved", "declined") and isinstance(psp, str) and psp:
            return psp, outcome
        if outcome == "action_required" and isinstance(psp, str) and psp:
            return psp, "requires_action"
        return None
    if event.to_status in ("succeeded", "declined") and payment.acquirer_reference:
        status = "approved" if event.to_status == "succeeded" else "declined"
        return payment.acquirer_reference, status
    return None
