"""Reconciliation of pending operations (captures, voids, refunds), and the expiry of
authorization holds.

An operation stays ``pending`` when the acquirer may have applied it but we do not know (a
read timeout, a 5xx, a reset after sending), or when the request died between its phases. The
protocol is the payments' (``payments.reconciliation.payments``), with the same policy, backoff,
leases
and escalation, run by the schedule they share (``payments.reconciliation.schedule``); this
module says what is the operations' (:class:`OperationReconciliation`):

1. **Claim** (:func:`operation_claim_due`, :func:`operation_claim`): ``SELECT ... FOR UPDATE
   SKIP LOCKED`` the due pending operations, lease them, count the attempt; commit.
2. **Ask the acquirer** outside any transaction: look the operation up by our reference (a
   capture or void: the charge's capture state, ``GET /charges?reference=<payment id>``; a
   refund: ``GET /refunds?reference=<refund id>``). Found: record it. No trace after the grace
   period: re-send with the operation's own acquirer idempotency key (the acquirer answers from
   its record if it has one, so a re-send never applies twice). A provider with no look-up
   (Adyen) is re-sent after the grace period; an operation it answered ``received`` (pending,
   its modification's id kept) is awaited until its notification, never re-sent, and escalated
   at the maximum age (docs/adr/0041).
3. **Record** in one short transaction under the payment's, the operation's and the key's locks
   (``payments.core.operation_states.operation_settle``), and refresh the answer a replay returns.

After the maximum age or attempts the operation goes to ``needs_review``: never re-sent that
late (the acquirer may have forgotten the key), never marked failed on a guess.

:func:`authorization_holds_expire` voids ``requires_capture`` payments older than
``AUTHORIZATION_HOLD_SECONDS`` through the same void operation and outcome table as the API.
"""

from __future__ import annotations

import logging
import random as random_module
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from gateway_client import AcquirerClient, RetryPolicy
from payments.acquirer.client import client_for
from payments.acquirer.operations import Found, operation_lookup, operation_send
from payments.core.attempts import AuthorizationOutcome
from payments.core.operation_states import (
    OperationConflict,
    operation_answer_store,
    operation_attempt_record,
    operation_check,
    operation_escalate,
    operation_lock_with_key,
    operation_open,
    operation_settle,
)
from payments.core.payment_states import InvalidTransition, payment_event_record, payment_lock
from payments.models import (
    OperationKind,
    OperationStatus,
    Payment,
    PaymentEventType,
    PaymentOperation,
    PaymentStatus,
)
from payments.reconciliation.schedule import (
    AlreadyResolved,
    Check,
    Reconciliation,
    ReconciliationPolicy,
    ReconciliationReport,
    ReconciliationResult,
)

__all__ = [
    "OperationReconciliation",
    "authorization_holds_expire",
    "operation_claim",
    "operation_claim_due",
    "operation_reconcile",
    "operation_reconciliation_run",
    "operation_reconciliation_sweep",
]

logger = logging.getLogger(__name__)

#: A re-send with one of these outcomes leaves the operation as unknown as before.
_RESEND_INCONCLUSIVE = (
    AuthorizationOutcome.UNKNOWN,
    AuthorizationOutcome.NOT_SENT,
    AuthorizationOutcome.CIRCUIT_OPEN,
)


class OperationReconciliation(Reconciliation[PaymentOperation]):
    """The reconciliation of ``pending`` captures, voids and refunds: looked up by our
    reference (``payments.acquirer.operations.operation_lookup``), re-sent with the
    operation's acquirer idempotency key, and settled by the outcome table under the payment's,
    the operation's and the key's locks. The schedule is :class:`Reconciliation`'s; its events
    go on the operation's payment, naming the operation."""

    model = PaymentOperation
    pending_status = OperationStatus.PENDING
    attempt_event = PaymentEventType.OPERATION_RECONCILIATION_ATTEMPT
    noun = "operation"
    logger = logger

    def load(self, pk: str) -> PaymentOperation:
        return PaymentOperation.objects.select_related("payment", "idempotency_key").get(pk=pk)

    def before_check(self, row: PaymentOperation, check: Check) -> ReconciliationReport | None:
        if row.status != OperationStatus.PENDING:
            return ReconciliationReport(row.pk, ReconciliationResult.ALREADY_RESOLVED)
        return None

    def awaited(self, row: PaymentOperation, check: Check) -> str | None:
        """A pending operation that carries the acquirer's id of its modification was
        received without its outcome (Adyen's ``received``): its notification settles it."""
        if row.acquirer_reference:
            return "received by the acquirer; its outcome comes by notification"
        return None

    def look_up(self, row: PaymentOperation, check: Check) -> ReconciliationReport | None:
        if not check.client.dialect.supports_lookup:
            return None  # no look-up by our reference (Adyen): a same-key re-send instead
        found = operation_lookup(check.client, row.payment, row, policy=check.acquirer_policy)
        if found.applied is None:
            return None
        return _record_found(row.pk, found, how="lookup", now=check.clock())

    def resend(self, row: PaymentOperation, check: Check) -> ReconciliationReport:
        attempt = operation_send(check.client, row.payment, row, policy=check.acquirer_policy)
        if attempt.outcome in _RESEND_INCONCLUSIVE:
            return self.reschedule(
                row, check, result=ReconciliationResult.RETRY_LATER, detail="re-send failed"
            )
        with transaction.atomic():
            recorded = operation_attempt_record(
                row.pk, attempt, first_attempt=False, now=check.clock(), check_at=check.now
            )
        if attempt.outcome is AuthorizationOutcome.PENDING and recorded.unknown:
            return self.reschedule(
                recorded.operation,
                check,
                result=ReconciliationResult.WAITING,
                detail="received by the acquirer; its outcome comes by notification",
            )
        return ReconciliationReport(
            row.pk, ReconciliationResult.RESOLVED, recorded.operation.status
        )

    def lock_pending(self, pk: str) -> tuple[Payment, PaymentOperation]:
        payment, operation, _key = operation_lock_with_key(pk)
        if operation.status != OperationStatus.PENDING:
            raise AlreadyResolved()
        return payment, operation

    def escalate_locked(self, pk: str, *, now: datetime, reason: str) -> None:
        payment, operation, key = operation_lock_with_key(pk)
        if operation.status != OperationStatus.PENDING:
            raise AlreadyResolved()
        operation_escalate(payment=payment, operation=operation, now=now, reason=reason)
        operation_answer_store(payment, operation, key=key, now=now)

    def attempt_data(self, row: PaymentOperation) -> dict:
        return {"operation": row.id, "kind": row.kind}


OPERATIONS = OperationReconciliation()


def operation_claim_due(*, now: datetime, policy: ReconciliationPolicy) -> list[str]:
    """Claim up to ``policy.batch_size`` due pending operations (``next_check_at <= now``),
    oldest due first, skipping rows other workers hold; lease them, count the attempt. Returns
    their ids. (The operation row only: the payment is locked when an outcome is recorded.)"""
    return OPERATIONS.claim_due(now=now, policy=policy)


def operation_claim(*, operation_id: str, now: datetime, policy: ReconciliationPolicy) -> bool:
    """Claim one pending operation whatever its ``next_check_at`` (the task enqueued after a
    202). False when it is resolved, unknown, or held by another worker."""
    return OPERATIONS.claim(operation_id, now=now, policy=policy)


def _record_found(
    operation_id: str, found: Found, *, how: str, now: datetime
) -> ReconciliationReport:
    try:
        with transaction.atomic():
            payment, operation, key = operation_lock_with_key(operation_id)
            operation_settle(
                payment=payment,
                operation=operation,
                succeeded=bool(found.applied),
                now=now,
                data={
                    "how": how,
                    "records_found": found.records,
                    "attempt": operation.reconciliation_attempts,
                },
                failure_code=found.failure_code,
                amount=found.amount,
                acquirer_reference=found.acquirer_reference,
            )
            operation_answer_store(payment, operation, key=key, now=now)
    except InvalidTransition:
        return ReconciliationReport(operation_id, ReconciliationResult.ALREADY_RESOLVED)
    logger.info("operation %s reconciled to %s by %s", operation_id, operation.status, how)
    return ReconciliationReport(operation_id, ReconciliationResult.RESOLVED, operation.status)


def operation_reconcile(
    *,
    operation_id: str,
    client: AcquirerClient,
    policy: ReconciliationPolicy,
    acquirer_policy: RetryPolicy | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> ReconciliationReport:
    """Resolve one claimed pending operation (the caller holds its lease). Outside any
    transaction. Never raises for an acquirer failure: those schedule the next check. Re-sends
    only with the operation's own acquirer idempotency key, under ``acquirer_policy``. An
    unexpected error frees the operation's lease and propagates."""
    return OPERATIONS.reconcile(
        operation_id,
        client=client,
        policy=policy,
        acquirer_policy=acquirer_policy,
        clock=clock,
        random=random,
    )


def operation_reconciliation_run(
    operation_id: str,
    *,
    client: AcquirerClient,
    policy: ReconciliationPolicy | None = None,
    acquirer_policy: RetryPolicy | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> ReconciliationReport:
    """Claim one operation whatever its ``next_check_at`` and reconcile it (the task enqueued
    after a 202). :attr:`ReconciliationResult.NOT_CLAIMED` when it is resolved, unknown or held
    by another worker, so a duplicate or redelivered message does nothing."""
    return OPERATIONS.run(
        operation_id,
        client=client,
        policy=policy or ReconciliationPolicy.from_settings(),
        acquirer_policy=acquirer_policy,
        clock=clock,
        random=random,
    )


def operation_reconciliation_sweep(
    *,
    client: AcquirerClient,
    policy: ReconciliationPolicy,
    acquirer_policy: RetryPolicy | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> list[ReconciliationReport]:
    """Claim one batch of due pending operations and reconcile each."""
    return OPERATIONS.sweep(
        client=client, policy=policy, acquirer_policy=acquirer_policy, clock=clock, random=random
    )


def authorization_holds_expire(
    *,
    client: AcquirerClient,
    hold_seconds: float,
    batch_size: int = 50,
    clock: Callable[[], datetime] = timezone.now,
) -> list[str]:
    """Void ``requires_capture`` payments authorized more than ``hold_seconds`` ago (the card
    networks' hold, ``AUTHORIZATION_HOLD_SECONDS``), up to ``batch_size`` per run; returns the
    void operations' ids.

    Each: in one transaction under the payment's lock, an ``authorization_hold_expired`` event
    (why) and a void operation (``reason: hold_expired``, no merchant key) moving the payment to
    ``void_pending``; then the void at the acquirer, outside any transaction, and the outcome
    recorded by the API's table. An unknown outcome is left to the sweep of due operations.
    """
    now = clock()
    cutoff = now - timedelta(seconds=hold_seconds)
    candidates = list(
        Payment.objects.filter(status=PaymentStatus.REQUIRES_CAPTURE, created_at__lte=cutoff)
        .order_by("created_at")
        .values_list("id", flat=True)[:batch_size]
    )
    voids = []
    for payment_id in candidates:
        with transaction.atomic():
            payment = payment_lock(payment_id)
            try:
                amount = operation_check(payment, OperationKind.VOID, None)
            except OperationConflict:
                continue  # captured or voided meanwhile
            payment_event_record(
                payment=payment,
                event_type=PaymentEventType.AUTHORIZATION_HOLD_EXPIRED,
                now=now,
                data={"hold_seconds": hold_seconds},
            )
            operation = operation_open(
                payment=payment, kind=OperationKind.VOID, amount=amount, reason="hold_expired",
                key=None, now=now,
                check_at=now + timedelta(seconds=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS),
                data={"reason": "hold_expired"},
            )  # fmt: skip
        attempt = operation_send(client_for(payment.acquirer, client), payment, operation)
        with transaction.atomic():
            operation_attempt_record(
                operation.pk, attempt, first_attempt=True, now=clock(),
                check_at=clock() + timedelta(seconds=settings.RECONCILIATION_BACKOFF_BASE_SECONDS),
            )  # fmt: skip
        voids.append(operation.pk)
        logger.info("payment %s: authorization hold expired, void %s", payment_id, operation.pk)
    return voids
