"""Celery tasks of the payments app. Each takes plain arguments and calls one service.

Tasks never retry around the gateway client: the client is the only retry layer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from idempotency.services import idempotency_keys_purge_expired
from payments.acquirer.client import acquirer_client, reconciliation_retry_policy
from payments.models import OperationStatus, PaymentStatus
from payments.monitoring.metrics import record_reconciliation
from payments.reconciliation.actions import action_expiry_sweep
from payments.reconciliation.operations import (
    authorization_holds_expire,
    operation_reconciliation_run,
    operation_reconciliation_sweep,
)
from payments.reconciliation.payments import reconciliation_run, reconciliation_sweep
from payments.reconciliation.schedule import (
    ReconciliationPolicy,
    ReconciliationReport,
    ReconciliationResult,
)

logger = logging.getLogger(__name__)

#: Keys whose payment or operation is unresolved are kept: reconciliation (or the deferred
#: sweep) still refreshes their answer.
UNRESOLVED_PAYMENT = Q(
    payment__status__in=[
        PaymentStatus.PROCESSING,
        PaymentStatus.DEFERRED,
        PaymentStatus.NEEDS_REVIEW,
        PaymentStatus.REQUIRES_ACTION,
    ]
) | Q(payment_operation__status__in=[OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW])


@shared_task(name="payments.tasks.purge_expired_idempotency_keys", ignore_result=True)
def purge_expired_idempotency_keys() -> int:
    """Delete expired idempotency keys in batches, keeping those of unresolved payments.

    Returns the number of keys deleted. Safe to run twice at once (deletes are idempotent).
    """
    deleted = idempotency_keys_purge_expired(
        now=timezone.now(),
        batch_size=settings.IDEMPOTENCY_KEY_PURGE_BATCH_SIZE,
        keep=UNRESOLVED_PAYMENT,
    )
    logger.info("purged %d expired idempotency keys", deleted)
    return deleted


def _reported(report: ReconciliationReport) -> str:
    """Count and log what one reconciliation did (a claim another worker won is only
    counted); return its result's value."""
    record_reconciliation(report.result.value)
    if report.result is not ReconciliationResult.NOT_CLAIMED:
        logger.info("reconcile %s: %s %s", report.payment_id, report.result.value, report.detail)
    return report.result.value


def _swept(sweep: Callable[..., list[ReconciliationReport]]) -> int:
    """Run one beat ``sweep`` with the settings' client and policies; count and log each
    report; return how many rows it reconciled."""
    reports = sweep(
        client=acquirer_client(),
        policy=ReconciliationPolicy.from_settings(),
        acquirer_policy=reconciliation_retry_policy(),
    )
    for report in reports:
        _reported(report)
    return len(reports)


@shared_task(name="payments.tasks.reconcile_payment", ignore_result=True)
def payment_reconcile_task(payment_id: str, operator_requested: bool = False) -> str:
    """Reconcile one payment now (enqueued on commit after a 202, or by an operator, who may
    also ask for a ``needs_review`` payment: a look-up only), through
    :func:`~payments.reconciliation.payments.reconciliation_run`. A duplicate or redelivered message
    finds the payment claimed or resolved and does nothing. Never autoretries. Returns the
    :class:`~payments.reconciliation.payments.ReconciliationResult` value.

    The Celery name stays ``payments.tasks.reconcile_payment`` (the function's name before),
    so messages already queued still route.
    """
    return _reported(reconciliation_run(payment_id, include_review=operator_requested))


@shared_task(name="payments.tasks.reconcile_due_payments", ignore_result=True)
def reconcile_due_payments() -> int:
    """The beat sweep: claim one batch of due payments and reconcile each. Returns how many."""
    return _swept(reconciliation_sweep)


@shared_task(name="payments.tasks.reconcile_operation", ignore_result=True)
def operation_reconcile_task(operation_id: str) -> str:
    """Reconcile one pending capture, void or refund now (enqueued on commit after a 202),
    through :func:`~payments.reconciliation.operations.operation_reconciliation_run`. A
    duplicate or redelivered message does nothing. Never autoretries. Returns the
    :class:`~payments.reconciliation.payments.ReconciliationResult` value."""
    report = operation_reconciliation_run(
        operation_id, client=acquirer_client(), acquirer_policy=reconciliation_retry_policy()
    )
    return _reported(report)


@shared_task(name="payments.tasks.reconcile_due_operations", ignore_result=True)
def reconcile_due_operations() -> int:
    """The beat sweep of pending captures, voids and refunds: one batch. Returns how many."""
    return _swept(operation_reconciliation_sweep)


@shared_task(name="payments.tasks.void_expired_authorizations", ignore_result=True)
def void_expired_authorizations() -> int:
    """The beat task voiding ``requires_capture`` payments older than
    ``AUTHORIZATION_HOLD_SECONDS``. Returns how many voids it started."""
    voids = authorization_holds_expire(
        client=acquirer_client(), hold_seconds=settings.AUTHORIZATION_HOLD_SECONDS
    )
    return len(voids)


@shared_task(name="payments.tasks.expire_customer_actions", ignore_result=True)
def expire_customer_actions() -> int:
    """The beat sweep of customer actions past ``action_expires_at`` (ADR 0049): each looked
    up, else voided and ``canceled`` (:func:`~payments.reconciliation.actions.action_expiry_sweep`).
    Returns how many it took. Never autoretries: the next sweep takes what this one left."""
    return len(action_expiry_sweep())
