"""The dispute state machine: a provider's dispute notice -> the ``Dispute`` row, the payment's
``amount_disputed``, the payment's event and the merchant's ``dispute.*`` event, in one
transaction.

Statuses (``gateway_client.disputes``): ``needs_response`` and ``under_review`` are open,
``won`` and ``lost`` closed and final: a closed dispute never changes again, so a late
``updated`` after a ``closed`` changes nothing. A notice older than the last one applied
(``provider_updated_at``, the provider's event time) changes nothing either: notifications
arrive out of order. ``Payment.amount_disputed`` is the sum of the payment's open and lost
disputes (what is held or withdrawn); a won dispute gives its amount back.

Merchant events (``webhooks.outbox``): ``dispute.created`` when the row is created,
``dispute.updated`` when an open dispute changes, ``dispute.closed`` when it closes (a dispute
first reported closed gets ``created`` then ``closed``).

Lock order: the payment (:func:`~payments.core.payment_states.payment_lock`), then the dispute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Sum

from gateway_client import CLOSED_DISPUTE_STATUSES, DisputeNotice
from payments.core.payment_states import payment_event_record, payment_lock
from payments.models import Dispute, Payment, PaymentEventType
from webhooks.outbox import event_record

__all__ = ["DisputeChange", "DisputeMismatch", "dispute_document", "dispute_record"]


class DisputeMismatch(ValueError):
    """The notice cannot be about this payment (another currency): nothing recorded."""


@dataclass(frozen=True, slots=True)
class DisputeChange:
    """What :func:`dispute_record` did: ``events`` are the merchant's event types written
    (empty: nothing changed)."""

    dispute: Dispute
    events: tuple[str, ...]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def dispute_document(dispute: Dispute) -> dict[str, object]:
    """The dispute object of the merchant's ``dispute.*`` events (docs/webhooks.md): amounts
    in minor units, timestamps RFC 3339 UTC."""
    return {
        "id": dispute.id,
        "object": "dispute",
        "payment": dispute.payment_id,
        "amount": dispute.amount,
        "currency": dispute.currency,
        "reason": dispute.reason,
        "status": dispute.status,
        "evidence_due_by": _iso(dispute.evidence_due_by),
        "created_at": _iso(dispute.created_at),
        "updated_at": _iso(dispute.updated_at),
        "closed_at": _iso(dispute.closed_at),
    }


def dispute_record(
    *,
    payment_id: str,
    acquirer: str,
    notice: DisputeNotice,
    occurred_at: datetime | None,
    now: datetime,
) -> DisputeChange:
    """Apply ``notice`` (at the provider's ``occurred_at``, when known) to the payment's dispute.

    Inside the caller's transaction (the row locks need one). Raises
    :class:`DisputeMismatch` when the notice's currency is not the payment's, and
    ``Payment.DoesNotExist`` for an unknown payment."""
    payment = payment_lock(payment_id)
    if notice.currency != payment.currency:
        raise DisputeMismatch(f"dispute in {notice.currency} for a {payment.currency} payment")
    dispute = (
        Dispute.objects.select_for_update()
        .filter(acquirer=acquirer, acquirer_dispute_reference=notice.dispute_reference)
        .first()
    )
    closes = notice.status in CLOSED_DISPUTE_STATUSES
    events: list[str] = []
    if dispute is None:
        dispute = Dispute(
            payment=payment,
            acquirer=acquirer,
            acquirer_dispute_reference=notice.dispute_reference,
            created_at=now,
        )
        events.append("dispute.created")
    elif (
        dispute.status in CLOSED_DISPUTE_STATUSES
        or _older(occurred_at, dispute)
        or not _changes(dispute, notice)
    ):
        return DisputeChange(dispute, ())
    elif not closes:
        events.append("dispute.updated")
    if closes:
        events.append("dispute.closed")
    dispute.amount, dispute.currency = notice.amount, notice.currency
    dispute.reason, dispute.status = notice.reason, notice.status
    dispute.provider_status, dispute.evidence_due_by = (
        notice.provider_status,
        notice.evidence_due_by,
    )
    dispute.provider_updated_at = occurred_at or dispute.provider_updated_at
    dispute.updated_at = now
    dispute.closed_at = now if closes else None
    dispute.save()
    _amount_disputed_refresh(payment, now)
    event_type = {
        "dispute.created": PaymentEventType.DISPUTE_OPENED,
        "dispute.updated": PaymentEventType.DISPUTE_UPDATED,
        "dispute.closed": PaymentEventType.DISPUTE_CLOSED,
    }[events[-1]]
    payment_event_record(
        payment=payment,
        event_type=event_type,
        now=now,
        data={
            "dispute": dispute.id,
            "status": dispute.status,
            "amount": dispute.amount,
            "reason": dispute.reason,
        },
    )
    document = dispute_document(dispute)
    for merchant_event in events:
        event_record(
            merchant_id=payment.merchant_id,
            event_type=merchant_event,
            object_id=dispute.id,
            obj=document,
            now=now,
        )
    return DisputeChange(dispute, tuple(events))


def _older(occurred_at: datetime | None, dispute: Dispute) -> bool:
    return (
        occurred_at is not None
        and dispute.provider_updated_at is not None
        and occurred_at < dispute.provider_updated_at
    )


def _changes(dispute: Dispute, notice: DisputeNotice) -> bool:
    return (dispute.status, dispute.amount, dispute.reason, dispute.evidence_due_by) != (
        notice.status,
        notice.amount,
        notice.reason,
        notice.evidence_due_by,
    )


def _amount_disputed_refresh(payment: Payment, now: datetime) -> None:
    """``amount_disputed`` = the sum of the payment's disputes not won (open or lost)."""
    total = (
        Dispute.objects.filter(payment_id=payment.pk)
        .exclude(status="won")
        .aggregate(total=Sum("amount"))["total"]
    )
    payment.amount_disputed = total or 0
    payment.updated_at = now
    payment.save(update_fields=["amount_disputed", "updated_at"])
