"""Applying one stored notification through the state machines (ADR 0046).

A notification is re-read from its stored body (parsed by its acquirer's connector) and:

* about a **payment or a refund** (Stripe, the sandbox: providers with a look-up): a hint to
  re-fetch. The payment's authorization is reconciled now when it is unresolved
  (``processing``, or ``needs_review``: a look-up only), its customer action ended when the
  acquirer says the shopper finished (``requires_action``), and each of its pending operations;
  reconciliation's look-up, outside any transaction, says what is true and
  ``payments.core`` records it. Nothing in the notification's body is recorded as a fact, so
  an echo of our own refund is never a second refund, and a forged-but-verified one could
  only make us look.
* about a **capture, void or refund a provider settles only by notification** (Adyen's
  ``CAPTURE``, ``CAPTURE_FAILED``, ``CANCELLATION``, ``REFUND``, ``REFUND_FAILED``: its
  answer was ``received`` and it has no look-up): the record, ADR 0047. The operation is
  found by our reference (the operation's or refund's id, echoed), checked against the
  provider's id of the modification our phase 2 stored, and settled once through
  ``payments.reconciliation.notified``. Before our phase 2 has stored that id, the
  notification waits. A later item that contradicts a settled operation (a ``CAPTURE_FAILED``
  after its ``CAPTURE``) changes nothing: it is logged as an error and kept ``ignored`` with
  why, for an operator.
* about a payment **waiting for its shopper at a provider without a look-up** (Adyen,
  ADR 0049): its ``AUTHORISATION`` is the record of the action's outcome, and the
  ``CANCELLATION`` of the expiry sweep's cancel ends it ``canceled``; both through
  ``payments.reconciliation.actions.action_notified``, the one rule of the return.
* about a **dispute**: the record (a dispute exists only as the provider's word):
  ``payments.core.dispute_states.dispute_record``.
* about anything else, or another account's payment: ``ignored``.

Early and out of order are normal: a notification for a payment whose phase 2 has not
committed (its idempotency key held by a live request: looked at again every
``NOTIFICATION_IN_FLIGHT_RETRY_SECONDS``, so it applies right after), or not known yet
(Stripe's dispute names only its PaymentIntent, which we learn in phase 2), or not confirmed
yet by the look-up,
stays ``received`` with a ``next_attempt_at`` (backoff from ``NOTIFICATION_RETRY_BASE_SECONDS``
doubling to ``NOTIFICATION_RETRY_CAP_SECONDS``) and is applied once, later. Nothing is dropped:
``payments_notifications_oldest_unapplied_age_seconds`` shows one waiting too long.

Marking a notification applied (with the payment's ``acquirer_notification`` event) and a
dispute's change happen in one transaction under the notification's row lock, then the
payment's: a notification is applied once, whatever the redeliveries and workers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from card_data import REDACTED_CARD_NUMBER
from gateway_client import NotificationRejected, OperationOutcome, ProviderNotification
from idempotency.models import IdempotencyKey
from payments.acquirer.client import client_for, reconciliation_retry_policy
from payments.core.dispute_states import DisputeMismatch, dispute_record
from payments.core.payment_states import payment_event_record, payment_lock
from payments.models import (
    AcquirerNotification,
    NotificationStatus,
    OperationStatus,
    Payment,
    PaymentEventType,
    PaymentOperation,
    PaymentStatus,
)
from payments.monitoring.metrics import record_notification_applied
from payments.notifications.connectors import notification_connector
from payments.reconciliation.actions import action_complete, action_notified
from payments.reconciliation.notified import Notified, operation_notified
from payments.reconciliation.operations import operation_reconciliation_run
from payments.reconciliation.payments import reconciliation_run
from payments.reconciliation.schedule import ReconciliationPolicy

__all__ = ["ApplyReport", "notification_apply", "notifications_due"]

logger = logging.getLogger(__name__)

APPLIED, RETRY_LATER, IGNORED, ALREADY = "applied", "retry_later", "ignored", "already_done"
#: Statuses whose authorization a notification re-fetches now.
_UNRESOLVED = (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW)


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """What one application did: ``result`` (``applied``, ``retry_later``, ``ignored``,
    ``already_done``), ``detail`` (why, for logs), ``retry_at`` (when ``retry_later``)."""

    notification_id: int
    result: str
    detail: str = ""
    retry_at: datetime | None = None


def notification_apply(
    notification_id: int, *, clock: Callable[[], datetime] = timezone.now
) -> ApplyReport:
    """Apply the stored notification ``notification_id`` (see the module docstring). Outside
    any transaction (the look-ups are network calls). Never raises for an acquirer failure
    (reconciliation schedules its own next check; the notification waits)."""
    row = AcquirerNotification.objects.filter(pk=notification_id).first()
    if row is None or row.status != NotificationStatus.RECEIVED:
        return ApplyReport(notification_id, ALREADY)
    report = _apply(row, clock)
    record_notification_applied(row.acquirer, report.result)
    logger.info(
        "notification %s (%s %s): %s %s",
        row.pk,
        row.acquirer,
        row.event_type,
        report.result,
        report.detail,
    )
    return report


def notifications_due(*, now: datetime, limit: int = 100) -> list[int]:
    """Ids of ``received`` notifications whose ``next_attempt_at`` has passed, oldest due
    first (the partial index ``acquirer_notification_due``)."""
    return list(
        AcquirerNotification.objects.filter(
            status=NotificationStatus.RECEIVED, next_attempt_at__lte=now
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )


def _apply(row: AcquirerNotification, clock: Callable[[], datetime]) -> ApplyReport:
    connector = notification_connector(row.acquirer)
    if connector is None:
        return _later(row, clock(), "the acquirer takes no notifications now")
    try:
        item = next(
            i for i in connector.parse(row.body.encode("utf-8")) if i.event_id == row.event_id
        )
    except (NotificationRejected, StopIteration):
        return _finish(row, None, IGNORED, clock(), detail="the stored body no longer parses")
    if item.subject == "other":
        return _finish(row, None, IGNORED, clock(), detail="nothing to apply")
    if item.outcome is not None:
        return _action_cancel(row, item, clock()) or _settle(row, item.outcome, clock())
    payment = _payment_for(row.acquirer, item)
    if payment is None:
        return _later(row, clock(), "no payment of ours matches it (yet)")
    if item.subject == "dispute":
        return _dispute(row, item, payment, clock())
    if _in_flight(payment, clock()):
        # Our phase 2 commits within the request's deadline: look again soon, without growing
        # the backoff, so the notification resolves the payment right after it.
        wait = settings.NOTIFICATION_IN_FLIGHT_RETRY_SECONDS
        return _later(row, clock(), "our own request for it has not committed yet", wait=wait)
    if payment.status == PaymentStatus.DEFERRED:
        return _later(row, clock(), "the payment has not been sent yet")
    if payment.status in _UNRESOLVED:
        reconciliation_run(payment.pk, include_review=True, clock=clock)
    elif payment.status == PaymentStatus.REQUIRES_ACTION and item.authorised is not None:
        # Held for the shopper at a provider without a look-up (Adyen): its AUTHORISATION is
        # the record of the outcome, through the same one rule as the return (ADR 0049).
        outcome = "approved" if item.authorised else "declined"
        reference = item.acquirer_reference or ""
        action_notified(payment.pk, acquirer_reference=reference, outcome=outcome, now=clock())
    elif payment.status == PaymentStatus.REQUIRES_ACTION:
        # Held for the shopper: the same look-up and record as the shopper's return, so the
        # two racing end in one outcome (ADR 0049). Still waiting: applied; expiry ends it.
        action_complete(payment.pk, how="notification", clock=clock)
    pending = PaymentOperation.objects.filter(payment_id=payment.pk, status=OperationStatus.PENDING)
    for operation_id in pending.values_list("pk", flat=True):
        operation_reconciliation_run(
            operation_id,
            client=client_for(payment.acquirer),
            acquirer_policy=reconciliation_retry_policy(),
            clock=clock,
        )
    payment.refresh_from_db(fields=["status"])
    if payment.status in _UNRESOLVED or pending.exists():
        return _later(row, clock(), "the look-up has not confirmed it yet")
    return _finish(row, payment, APPLIED, clock())


def _payment_for(acquirer: str, item: ProviderNotification) -> Payment | None:
    """Our payment the notification names, at this acquirer only: by our reference, our
    refund's reference, or the acquirer's id of the payment."""
    payments = Payment.objects.filter(acquirer=acquirer)
    if item.payment_reference and (found := payments.filter(pk=item.payment_reference).first()):
        return found
    if item.refund_reference:
        operation = PaymentOperation.objects.filter(
            pk=item.refund_reference, payment__acquirer=acquirer
        ).first()
        if operation is not None:
            return payments.get(pk=operation.payment_id)
    if item.acquirer_reference:
        return payments.filter(acquirer_reference=item.acquirer_reference).first()
    return None


def _settle(row: AcquirerNotification, outcome: OperationOutcome, now: datetime) -> ApplyReport:
    """The provider's record of one of our captures, voids or refunds (see the module
    docstring)."""
    operation = _operation_for(row.acquirer, outcome)
    if operation is None:
        return _later(row, now, "no operation of ours matches it (yet)")
    if operation.acquirer_reference is None:
        # Our phase 2 has not stored the provider's id of the modification: a live request
        # commits it within its deadline; a dead one's operation is re-sent by reconciliation.
        if _key_in_flight(operation.idempotency_key_id, now):
            wait = settings.NOTIFICATION_IN_FLIGHT_RETRY_SECONDS
            return _later(row, now, "our own request for it has not committed yet", wait=wait)
        return _later(row, now, "the operation has no acquirer reference yet")
    if outcome.acquirer_reference not in (operation.acquirer_reference, REDACTED_CARD_NUMBER):
        detail = (
            f"operation {operation.pk} is {operation.acquirer_reference} at the acquirer; "
            f"the notification names {outcome.acquirer_reference}"
        )
        logger.error("notification %s: %s", row.pk, detail)
        return _finish(row, operation.payment, IGNORED, now, detail=detail)
    notified, settled = operation_notified(
        acquirer=row.acquirer,
        kind=outcome.operation,
        acquirer_reference=operation.acquirer_reference,
        applied=outcome.applied,
        failure_code=outcome.failure_code,
        amount=outcome.amount,
        now=now,
    )
    settled = settled or operation
    if notified == Notified.UNKNOWN:
        return _later(row, now, "no operation of ours matches it (yet)")
    if notified == Notified.MISMATCH:
        detail = f"operation {settled.pk} is a {settled.kind}, not a {outcome.operation}"
        return _finish(row, settled.payment, IGNORED, now, detail=detail)
    if notified == Notified.ALREADY_SETTLED:
        agrees = (settled.status == OperationStatus.SUCCEEDED) == outcome.applied
        if not agrees:
            detail = (
                f"operation {settled.pk} was settled {settled.status}; the acquirer now says "
                f"{'applied' if outcome.applied else 'not applied'}: review"
            )
            logger.error("notification %s: %s", row.pk, detail)
            return _finish(row, settled.payment, IGNORED, now, detail=detail)
    return _finish(row, settled.payment, APPLIED, now)


def _action_cancel(
    row: AcquirerNotification, item: ProviderNotification, now: datetime
) -> ApplyReport | None:
    """The provider's record of the cancel the expiry sweep sent for an abandoned customer
    action (a void that names no operation of ours, about a payment that had an action;
    ADR 0049), else None. Applied: the payment, still ``requires_action``, ends ``canceled``
    (``action_notified``); refused: nothing (the payment's AUTHORISATION decides). A cancel
    applied to a payment already recorded approved is logged as an error and kept
    ``ignored`` with why, for an operator."""
    outcome = item.outcome
    if outcome is None or outcome.operation != "void" or _operation_for(row.acquirer, outcome):
        return None
    payment = Payment.objects.filter(
        acquirer=row.acquirer,
        acquirer_reference=item.acquirer_reference,
        action_expires_at__isnull=False,
    ).first()
    if payment is None:
        return None
    if payment.status == PaymentStatus.REQUIRES_ACTION and outcome.applied:
        action_notified(
            payment.pk, acquirer_reference=payment.acquirer_reference, outcome="voided", now=now
        )
        payment.refresh_from_db(fields=["status"])
    # Declined agrees too: a return that reached Adyen after the cancel is answered Cancelled.
    if outcome.applied and payment.status not in (PaymentStatus.CANCELED, PaymentStatus.DECLINED):
        detail = f"the expiry's cancel applied to a payment recorded {payment.status}: review"
        logger.error("notification %s: %s", row.pk, detail)
        return _finish(row, payment, IGNORED, now, detail=detail)
    return _finish(row, payment, APPLIED, now)


def _operation_for(acquirer: str, outcome: OperationOutcome) -> PaymentOperation | None:
    """Our operation the outcome names, at this acquirer only: by our reference, else by the
    provider's id of the modification."""
    operations = PaymentOperation.objects.select_related("payment").filter(
        payment__acquirer=acquirer
    )
    found = operations.filter(pk=outcome.reference).first()
    if found is None and outcome.acquirer_reference != REDACTED_CARD_NUMBER:
        found = operations.filter(acquirer_reference=outcome.acquirer_reference).first()
    return found


def _in_flight(payment: Payment, now: datetime) -> bool:
    """Whether a live request holds the payment's idempotency key (its phase 2 has not
    committed): reconciliation's own rule, checked before claiming, so a waiting notification
    spends none of the payment's reconciliation attempts."""
    return _key_in_flight(payment.idempotency_key_id, now)


def _key_in_flight(key_id: int | None, now: datetime) -> bool:
    """Whether a live request holds the idempotency key ``key_id`` (see ``_in_flight``)."""
    if key_id is None:
        return False
    key = IdempotencyKey.objects.filter(pk=key_id).first()
    lock_timeout = timedelta(seconds=ReconciliationPolicy.from_settings().lock_timeout)
    return (
        key is not None
        and key.status == IdempotencyKey.Status.IN_PROGRESS
        and key.locked_at is not None
        and key.locked_at > now - lock_timeout
    )


def _later(
    row: AcquirerNotification, now: datetime, detail: str, wait: float | None = None
) -> ApplyReport:
    """Keep ``row`` for another attempt after the backoff (never dropped); ``wait`` (seconds):
    a fixed short wait instead, not counted as an attempt."""
    if wait is None:
        attempts = row.attempts + 1
        wait = min(
            settings.NOTIFICATION_RETRY_CAP_SECONDS,
            settings.NOTIFICATION_RETRY_BASE_SECONDS * 2 ** min(row.attempts, 30),
        )
    else:
        attempts = row.attempts
    retry_at = now + timedelta(seconds=wait)
    AcquirerNotification.objects.filter(pk=row.pk, status=NotificationStatus.RECEIVED).update(
        attempts=attempts, next_attempt_at=retry_at, last_error=detail[:255]
    )
    return ApplyReport(row.pk, RETRY_LATER, detail, retry_at)


def _locked(row: AcquirerNotification) -> AcquirerNotification | None:
    """The row locked (``FOR UPDATE``) if it is still ``received``, else None."""
    locked = AcquirerNotification.objects.select_for_update().get(pk=row.pk)
    return locked if locked.status == NotificationStatus.RECEIVED else None


def _mark(
    row: AcquirerNotification, status: str, now: datetime, payment_id: str | None, error: str = ""
) -> None:
    row.status, row.applied_at, row.payment_id = status, now, payment_id
    row.attempts, row.next_attempt_at, row.last_error = row.attempts + 1, None, error[:255]
    row.save(
        update_fields=[
            "status",
            "applied_at",
            "payment_id",
            "attempts",
            "next_attempt_at",
            "last_error",
        ]
    )


def _event_data(row: AcquirerNotification, result: str) -> dict[str, object]:
    return {
        "acquirer": row.acquirer,
        "event_id": row.event_id,
        "event_type": row.event_type,
        "result": result,
    }


def _finish(
    row: AcquirerNotification, payment: Payment | None, result: str, now: datetime, detail: str = ""
) -> ApplyReport:
    """Mark ``row`` applied (or ignored) once, with the payment's ``acquirer_notification``
    event when it names one of ours."""
    with transaction.atomic():
        locked = _locked(row)
        if locked is None:
            return ApplyReport(row.pk, ALREADY)
        status = NotificationStatus.APPLIED if result == APPLIED else NotificationStatus.IGNORED
        _mark(locked, status, now, payment.pk if payment else None, detail)
        if payment is not None:
            payment_event_record(
                payment=payment_lock(payment.pk),
                event_type=PaymentEventType.ACQUIRER_NOTIFICATION,
                now=now,
                data=_event_data(row, result),
            )
    return ApplyReport(row.pk, result, detail)


def _dispute(
    row: AcquirerNotification, item: ProviderNotification, payment: Payment, now: datetime
) -> ApplyReport:
    assert item.dispute is not None  # a dispute subject always carries its notice
    with transaction.atomic():
        locked = _locked(row)
        if locked is None:
            return ApplyReport(row.pk, ALREADY)
        try:
            with transaction.atomic():
                change = dispute_record(
                    payment_id=payment.pk,
                    acquirer=row.acquirer,
                    notice=item.dispute,
                    occurred_at=item.occurred_at,
                    now=now,
                )
        except DisputeMismatch as exc:
            logger.error("notification %s: %s", row.pk, exc)  # noqa: TRY400 - no traceback
            _mark(locked, NotificationStatus.IGNORED, now, payment.pk, str(exc))
            return ApplyReport(row.pk, IGNORED, str(exc))
        _mark(locked, NotificationStatus.APPLIED, now, payment.pk)
        payment_event_record(
            payment=payment_lock(payment.pk),
            event_type=PaymentEventType.ACQUIRER_NOTIFICATION,
            now=now,
            data=_event_data(row, APPLIED) | {"dispute": change.dispute.id},
        )
    detail = ", ".join(change.events) or "no change (closed, older, or the same)"
    return ApplyReport(row.pk, APPLIED, detail)
