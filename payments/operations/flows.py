"""The operations after the authorization, idempotent, in two phases like ``payment_create``:
:func:`payment_capture`, :func:`payment_void` and :func:`refund_create`.

* Phase 1, one short transaction (:func:`_claim`): lock the payment **first** (the documented
  order: payment, then key), claim the merchant's idempotency key (the route, with the payment
  id, is part of the fingerprint), check the payment's state and amounts under that lock
  (``payments.core.operation_states.operation_check``: a conflict is a ``409`` with nothing stored
  and the
  key free), create the operation ``pending`` with its own acquirer idempotency key, and move
  the payment to ``capture_pending`` / ``void_pending``; commit. Concurrent refunds queue on the
  payment's lock and each sees the others' pending amounts.
* The acquirer call, outside any transaction (``payments.acquirer.operations.operation_send``).
* Phase 2, one short transaction (:func:`operation_attempt_finish`): the outcome table
  (``payments.core.operation_states.OPERATION_OUTCOMES``), the answer rendered once and stored with
  the key;
  certainly not sent: the operation ``failed`` (``acquirer_unavailable``), the payment back to
  ``requires_capture``, the key released, a ``503``; unknown: ``202``, the operation
  ``pending``, reconciliation scheduled (the sweep's time in the database, the task on commit).

A merchant's retry of a ``202`` re-sends with the same acquirer idempotency key.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gateway_client import AcquirerClient
from merchants.models import Merchant
from payments.acquirer.client import client_for
from payments.acquirer.operations import operation_send
from payments.authorization.key_claim import key_claim, key_replayable
from payments.core.answers import Answered, CreateResult, Replayed, Unavailable
from payments.core.attempts import AcquirerAttempt
from payments.core.crashpoints import crash_point
from payments.core.operation_states import operation_attempt_record, operation_check, operation_open
from payments.core.payment_states import payment_event_record, payment_lock
from payments.core.selectors import PaymentNotFound
from payments.models import (
    OperationKind,
    OperationStatus,
    Payment,
    PaymentEventType,
    PaymentOperation,
)
from payments.monitoring.metrics import record_idempotency_replay
from payments.reconciliation.tasks import operation_reconcile_task

__all__ = [
    "operation_attempt_finish",
    "operation_route",
    "payment_capture",
    "payment_void",
    "refund_create",
]

#: The route of each operation's POST (part of the idempotency fingerprint).
_ROUTES = {
    OperationKind.CAPTURE: "/payments/{id}/capture",
    OperationKind.VOID: "/payments/{id}/void",
    OperationKind.REFUND: "/payments/{id}/refunds",
}


def operation_route(kind: str, payment_id: str) -> str:
    """The route of ``kind``'s POST for ``payment_id``, as the idempotency key stores it."""
    return _ROUTES[kind].format(id=payment_id)


@dataclass(frozen=True)
class _Claimed:
    payment: Payment
    operation: PaymentOperation
    first_attempt: bool


def payment_capture(
    *,
    merchant: Merchant,
    payment_id: str,
    idempotency_key: str,
    amount: int | None = None,
    client: AcquirerClient | None = None,
    clock: Callable[[], datetime] = timezone.now,
) -> CreateResult:
    """Capture the merchant's ``requires_capture`` payment, idempotently under
    ``idempotency_key``: ``amount`` minor units (default the authorized amount; at most it; a
    partial capture releases the rest).

    Returns :class:`Replayed`, :class:`Answered` (200 succeeded, 202 capture_pending, 502) or
    :class:`Unavailable` (503, nothing changed). Raises ``PaymentNotFound`` (404),
    ``OperationConflict`` (409 ``invalid_payment_state`` / ``amount_exceeds_capturable``),
    ``IdempotencyKeyReused`` (422) and ``IdempotencyKeyInUse`` (409).
    """
    body = {} if amount is None else {"amount": amount}
    return _operate(
        OperationKind.CAPTURE, merchant, payment_id, idempotency_key, body, client, clock
    )


def payment_void(
    *,
    merchant: Merchant,
    payment_id: str,
    idempotency_key: str,
    client: AcquirerClient | None = None,
    clock: Callable[[], datetime] = timezone.now,
) -> CreateResult:
    """Release the authorization of the merchant's ``requires_capture`` payment, idempotently.

    Returns as :func:`payment_capture` (200 canceled, 202 void_pending, 502, 503); raises the
    same errors (409 ``invalid_payment_state``).
    """
    return _operate(OperationKind.VOID, merchant, payment_id, idempotency_key, {}, client, clock)


def refund_create(
    *,
    merchant: Merchant,
    payment_id: str,
    idempotency_key: str,
    amount: int | None = None,
    reason: str | None = None,
    client: AcquirerClient | None = None,
    clock: Callable[[], datetime] = timezone.now,
    audit: dict | None = None,
) -> CreateResult:
    """Refund ``amount`` minor units (default all that remains refundable) of the merchant's
    ``succeeded`` payment, idempotently; ``reason`` one of ``RefundReason``.

    ``audit`` (an operator's refund from the admin's "Refund", ``payments.admin``):
    JSON data (operator, note) recorded as an ``operator_refund_requested`` event, with the
    refund's id, amount and ``idempotency_key``, in the phase-1 transaction that creates the
    refund: once per refund, never for a replay.

    Returns as :func:`payment_capture` (201 the refund, 202 pending, 502, 503); raises the same
    errors (409 ``invalid_payment_state`` / ``amount_exceeds_refundable``).
    """
    body = {name: value for name, value in (("amount", amount), ("reason", reason)) if value}
    return _operate(
        OperationKind.REFUND, merchant, payment_id, idempotency_key, body, client, clock, audit
    )


def _operate(
    kind: str,
    merchant: Merchant,
    payment_id: str,
    idempotency_key: str,
    body: dict,
    given: AcquirerClient | None,
    clock: Callable[[], datetime],
    audit: dict | None = None,
) -> CreateResult:
    """The flow of every operation: at the acquirer that holds the payment
    (``Payment.acquirer``; ``given`` when it is that acquirer's client), never another."""
    now = clock()
    acquirer = (
        Payment.objects.filter(merchant=merchant, pk=payment_id)
        .values_list("acquirer", flat=True)
        .first()
    )
    if acquirer is None:
        raise PaymentNotFound(payment_id)
    client = client_for(acquirer, given)
    admitted, retry_after = client.admits(kind)
    if not admitted and not key_replayable(merchant, idempotency_key, now):
        # The breaker is open: answer at once, before anything is written; the key stays free.
        return Unavailable(retry_after=max(1, math.ceil(retry_after)))
    claimed = _claim(kind, merchant, payment_id, idempotency_key, body, now, audit)
    if isinstance(claimed, Replayed):
        record_idempotency_replay()
        return claimed
    crash_point(f"{kind}_after_phase1_commit")
    attempt = operation_send(client, claimed.payment, claimed.operation)
    crash_point(f"{kind}_after_acquirer_answer")
    return operation_attempt_finish(
        claimed.operation.pk, attempt, first_attempt=claimed.first_attempt, now=clock()
    )


def _claim(
    kind: str,
    merchant: Merchant,
    payment_id: str,
    idempotency_key: str,
    body: dict,
    now: datetime,
    audit: dict | None = None,
) -> Replayed | _Claimed:
    """Phase 1: lock the payment, claim the key, check, create the operation (or resume it)."""
    with transaction.atomic():
        payment = payment_lock(payment_id)
        claimed = key_claim(
            merchant=merchant,
            idempotency_key=idempotency_key,
            route=operation_route(kind, payment_id),
            body=body,
            now=now,
            rows=PaymentOperation.objects.all(),
            pending_status=OperationStatus.PENDING,
        )
        if isinstance(claimed, Replayed):
            return claimed
        operation = claimed.row
        if operation is None:
            amount = operation_check(payment, kind, body.get("amount"))
            operation = operation_open(
                payment=payment,
                kind=kind,
                amount=amount,
                reason=body.get("reason"),
                key=claimed.record,
                now=now,
                check_at=claimed.check_at,
            )
            if audit is not None:  # an operator's refund: who asked, and why, in phase 1
                payment_event_record(
                    payment=payment,
                    event_type=PaymentEventType.OPERATOR_REFUND_REQUESTED,
                    now=now,
                    data=audit
                    | {
                        "operation": operation.id,
                        "amount": amount,
                        "idempotency_key": idempotency_key,
                    },
                )
            return _Claimed(payment, operation, first_attempt=True)
        payment_event_record(
            payment=payment,
            event_type=claimed.resumed,
            now=now,
            data={"resumed": True, "operation": operation.id, "kind": kind},
        )
        return _Claimed(payment, operation, first_attempt=claimed.first_attempt)


def _enqueue_reconciliation(operation: PaymentOperation) -> None:
    """After an unknown outcome, inside phase 2: the task enqueued when the transaction
    commits (a lost task only delays the operation until the next sweep)."""
    transaction.on_commit(
        lambda: operation_reconcile_task.apply_async(
            args=[operation.id], countdown=settings.RECONCILIATION_FIRST_CHECK_SECONDS
        ),
        robust=True,
    )


def operation_attempt_finish(
    operation_id: str, attempt: AcquirerAttempt, *, first_attempt: bool, now: datetime
) -> Answered | Unavailable:
    """Phase 2 of an operation in one transaction
    (:func:`~payments.core.operation_states.operation_attempt_record`): :class:`Answered` with the
    stored
    answer, or :class:`Unavailable` when it was certainly not sent (the key released)."""
    with transaction.atomic():
        recorded = operation_attempt_record(
            operation_id,
            attempt,
            first_attempt=first_attempt,
            now=now,
            check_at=now + timedelta(seconds=settings.RECONCILIATION_BACKOFF_BASE_SECONDS),
            on_unknown=_enqueue_reconciliation,
        )
        crash_point(f"{recorded.operation.kind}_before_phase2_commit")
    if recorded.response is None:
        return Unavailable(retry_after=recorded.retry_after, payment=recorded.payment)
    return Answered(payment=recorded.payment, response=recorded.response)
