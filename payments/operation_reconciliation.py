"""Reconciliation of pending operations (captures, voids, refunds), and the expiry of
authorization holds.

An operation stays ``pending`` when the acquirer may have applied it but we do not know (a
read timeout, a 5xx, a reset after sending), or when the request died between its phases. The
protocol is the payments' (``payments.reconciliation``), with the same policy, backoff, leases
and escalation:

1. **Claim** (:func:`operation_claim_due`, :func:`operation_claim`): ``SELECT ... FOR UPDATE
   SKIP LOCKED`` the due pending operations, lease them, count the attempt; commit.
2. **Ask the acquirer** outside any transaction: look the operation up by our reference (a
   capture or void: the charge's capture state, ``GET /charges?reference=<payment id>``; a
   refund: ``GET /refunds?reference=<refund id>``). Found: record it. No trace after the grace
   period: re-send with the operation's own acquirer idempotency key (the acquirer answers from
   its record if it has one, so a re-send never applies twice).
3. **Record** in one short transaction under the payment's, the operation's and the key's locks
   (``payments.lifecycle.operation_settle``), and refresh the answer a replay returns.

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
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from gateway_client import AcquirerClient, GatewayError, RetryPolicy
from idempotency.models import IdempotencyKey
from payments.acquirer.authorize import AuthorizationOutcome
from payments.acquirer.operations import Found, operation_lookup, operation_send
from payments.lifecycle import (
    InvalidTransition,
    OperationConflict,
    operation_answer_store,
    operation_attempt_record,
    operation_check,
    operation_escalate,
    operation_lock_with_key,
    operation_open,
    operation_settle,
    payment_event_record,
    payment_lock,
)
from payments.models import (
    OperationKind,
    OperationStatus,
    Payment,
    PaymentEventType,
    PaymentOperation,
    PaymentStatus,
)
from payments.reconciliation import (
    ReconciliationPolicy,
    ReconciliationReport,
    ReconciliationResult,
    acquirer_not_before,
    reconciliation_backoff,
)

__all__ = [
    "authorization_holds_expire",
    "operation_claim",
    "operation_claim_due",
    "operation_reconcile",
    "operation_reconciliation_run",
    "operation_reconciliation_sweep",
]

logger = logging.getLogger(__name__)


def _claimable(now: datetime) -> Q:
    return Q(status=OperationStatus.PENDING) & (
        Q(reconciliation_lease_until__isnull=True) | Q(reconciliation_lease_until__lte=now)
    )


def _lease(ids: list[str], now: datetime, policy: ReconciliationPolicy) -> None:
    PaymentOperation.objects.filter(id__in=ids).update(
        reconciliation_lease_until=now + timedelta(seconds=policy.lease),
        reconciliation_attempts=F("reconciliation_attempts") + 1,
    )


def operation_claim_due(*, now: datetime, policy: ReconciliationPolicy) -> list[str]:
    """Claim up to ``policy.batch_size`` due pending operations (``next_check_at <= now``),
    oldest due first, skipping rows other workers hold; lease them, count the attempt. Returns
    their ids. (The operation row only: the payment is locked when an outcome is recorded.)"""
    with transaction.atomic():
        ids = list(
            PaymentOperation.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(_claimable(now), next_check_at__lte=now)
            .order_by("next_check_at")
            .values_list("id", flat=True)[: policy.batch_size]
        )
        _lease(ids, now, policy)
    return ids


def operation_claim(*, operation_id: str, now: datetime, policy: ReconciliationPolicy) -> bool:
    """Claim one pending operation whatever its ``next_check_at`` (the task enqueued after a
    202). False when it is resolved, unknown, or held by another worker."""
    with transaction.atomic():
        claimed = (
            PaymentOperation.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(_claimable(now), id=operation_id)
            .exists()
        )
        if claimed:
            _lease([operation_id], now, policy)
    return claimed


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
                data={"how": how, "records_found": found.records,
                      "attempt": operation.reconciliation_attempts},
                failure_code=found.failure_code,
                amount=found.amount,
                acquirer_reference=found.acquirer_reference,
            )  # fmt: skip
            operation_answer_store(payment, operation, key=key, now=now)
    except InvalidTransition:
        return ReconciliationReport(operation_id, ReconciliationResult.ALREADY_RESOLVED)
    logger.info("operation %s reconciled to %s by %s", operation_id, operation.status, how)
    return ReconciliationReport(operation_id, ReconciliationResult.RESOLVED, operation.status)


def _reschedule(
    operation: PaymentOperation,
    *,
    now: datetime,
    policy: ReconciliationPolicy,
    random: Callable[[], float],
    result: ReconciliationResult,
    detail: str,
    not_before: datetime | None = None,
    error: GatewayError | None = None,
) -> ReconciliationReport:
    wait = reconciliation_backoff(
        max(operation.reconciliation_attempts - 1, 0),
        base=policy.backoff_base,
        cap=policy.backoff_cap,
        random=random,
    )
    next_check_at = now + timedelta(seconds=wait)
    if not_before is not None and not_before > next_check_at:
        next_check_at = not_before
    with transaction.atomic():
        payment, locked, _key = operation_lock_with_key(operation.pk)
        if locked.status != OperationStatus.PENDING:
            return ReconciliationReport(operation.pk, ReconciliationResult.ALREADY_RESOLVED)
        locked.next_check_at = next_check_at
        locked.reconciliation_lease_until = None
        locked.save(update_fields=["next_check_at", "reconciliation_lease_until"])
        data = {
            "operation": locked.id,
            "kind": locked.kind,
            "result": result.value,
            "detail": detail,
            "attempt": locked.reconciliation_attempts,
            "next_check_in_seconds": round((next_check_at - now).total_seconds(), 3),
        }
        if error is not None:
            data |= {"error": type(error).__name__, "status_code": error.status_code}
        payment_event_record(
            payment=payment,
            event_type=PaymentEventType.OPERATION_RECONCILIATION_ATTEMPT,
            now=now,
            data=data,
        )
    return ReconciliationReport(operation.pk, result, detail, next_check_at)


def _escalate(operation: PaymentOperation, *, now: datetime, reason: str) -> ReconciliationReport:
    with transaction.atomic():
        payment, locked, key = operation_lock_with_key(operation.pk)
        if locked.status != OperationStatus.PENDING:
            return ReconciliationReport(operation.pk, ReconciliationResult.ALREADY_RESOLVED)
        operation_escalate(payment=payment, operation=locked, now=now, reason=reason)
        operation_answer_store(payment, locked, key=key, now=now)
    logger.warning("operation %s needs review: %s", operation.pk, reason)
    return ReconciliationReport(operation.pk, ReconciliationResult.NEEDS_REVIEW, reason)


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
    only with the operation's own acquirer idempotency key, under ``acquirer_policy``."""
    if connection.in_atomic_block:
        raise RuntimeError("Reconciliation calls the acquirer: never inside a transaction.")
    try:
        return _reconcile(operation_id, client, policy, acquirer_policy, clock, random)
    except Exception:
        PaymentOperation.objects.filter(pk=operation_id).update(reconciliation_lease_until=None)
        raise


def _reconcile(
    operation_id: str,
    client: AcquirerClient,
    policy: ReconciliationPolicy,
    acquirer_policy: RetryPolicy | None,
    clock: Callable[[], datetime],
    random: Callable[[], float],
) -> ReconciliationReport:
    now = clock()
    operation = PaymentOperation.objects.select_related("payment", "idempotency_key").get(
        pk=operation_id
    )
    payment = operation.payment
    if operation.status != OperationStatus.PENDING:
        return ReconciliationReport(operation_id, ReconciliationResult.ALREADY_RESOLVED)
    key = operation.idempotency_key
    if (
        key is not None
        and key.status == IdempotencyKey.Status.IN_PROGRESS
        and key.locked_at is not None
        and key.locked_at > now - timedelta(seconds=policy.lock_timeout)
    ):
        return _reschedule(
            operation, now=now, policy=policy, random=random,
            result=ReconciliationResult.IN_FLIGHT, detail="a request holds the idempotency key",
            not_before=key.locked_at + timedelta(seconds=policy.lock_timeout),
        )  # fmt: skip
    age = (now - operation.created_at).total_seconds()
    if age >= policy.max_age:
        give_up = f"unresolved after {age:.0f} s (the maximum age)"
    elif operation.reconciliation_attempts > policy.max_attempts:
        give_up = f"unresolved after {policy.max_attempts} reconciliation attempts"
    else:
        give_up = ""
    try:
        found = operation_lookup(client, payment, operation, policy=acquirer_policy)
    except GatewayError as exc:
        if give_up:
            return _escalate(operation, now=now, reason=f"{give_up}; the last look-up failed")
        return _reschedule(
            operation, now=now, policy=policy, random=random,
            result=ReconciliationResult.RETRY_LATER, detail="look-up failed",
            not_before=acquirer_not_before(exc, now), error=exc,
        )  # fmt: skip
    if found.applied is not None:
        return _record_found(operation_id, found, how="lookup", now=clock())
    if give_up:  # never re-send this late: the acquirer may have forgotten the key
        return _escalate(operation, now=now, reason=f"{give_up}; the acquirer has no record of it")
    if age < policy.grace:
        return _reschedule(
            operation, now=now, policy=policy, random=random,
            result=ReconciliationResult.WAITING, detail="not found yet; within the grace period",
            not_before=operation.created_at + timedelta(seconds=policy.grace),
        )  # fmt: skip
    attempt = operation_send(client, payment, operation, policy=acquirer_policy)
    if attempt.outcome in (AuthorizationOutcome.UNKNOWN, AuthorizationOutcome.NOT_SENT,
                           AuthorizationOutcome.CIRCUIT_OPEN):  # fmt: skip
        return _reschedule(
            operation, now=now, policy=policy, random=random,
            result=ReconciliationResult.RETRY_LATER, detail="re-send failed",
        )  # fmt: skip
    with transaction.atomic():
        recorded = operation_attempt_record(
            operation_id, attempt, first_attempt=False, now=clock(), check_at=now
        )
    return ReconciliationReport(
        operation_id, ReconciliationResult.RESOLVED, recorded.operation.status
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
    policy = policy or ReconciliationPolicy.from_settings()
    if not operation_claim(operation_id=operation_id, now=clock(), policy=policy):
        return ReconciliationReport(operation_id, ReconciliationResult.NOT_CLAIMED)
    return operation_reconcile(
        operation_id=operation_id, client=client, policy=policy,
        acquirer_policy=acquirer_policy, clock=clock, random=random,
    )  # fmt: skip


def operation_reconciliation_sweep(
    *,
    client: AcquirerClient,
    policy: ReconciliationPolicy,
    acquirer_policy: RetryPolicy | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> list[ReconciliationReport]:
    """Claim one batch of due pending operations and reconcile each."""
    ids = operation_claim_due(now=clock(), policy=policy)
    return [
        operation_reconcile(
            operation_id=oid,
            client=client,
            policy=policy,
            acquirer_policy=acquirer_policy,
            clock=clock,
            random=random,
        )
        for oid in ids
    ]


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
        attempt = operation_send(client, payment, operation)
        with transaction.atomic():
            operation_attempt_record(
                operation.pk, attempt, first_attempt=True, now=clock(),
                check_at=clock() + timedelta(seconds=settings.RECONCILIATION_BACKOFF_BASE_SECONDS),
            )  # fmt: skip
        voids.append(operation.pk)
        logger.info("payment %s: authorization hold expired, void %s", payment_id, operation.pk)
    return voids
