"""One purge per growing table, each deleting in batches of short transactions.

A purge is a function ``(now, policy) -> QuerySet`` of the rows past their period that nothing
still needs; :func:`purge_in_batches` deletes them ``policy.batch_size`` at a time, each batch
its own transaction that locks only the rows it deletes (``FOR UPDATE SKIP LOCKED``: a row
another transaction holds is left for the next run, so a purge never waits on the hot path).
The condition is applied again inside the transaction, so a row that became needed after it was
first seen (a re-delivery's new pending delivery) is not deleted. ``now`` is the caller's clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models import Max, Q, QuerySet

from heartbeats.models import Heartbeat
from ledger.models import AuditRun
from merchants.models import ApiKey
from payments.models import (
    AcquirerNotification,
    NotificationStatus,
    OperationStatus,
    PaymentEvent,
    PaymentStatus,
)
from retention.policy import RetentionPolicy
from webhooks.models import DeliveryStatus, Event, OperatorAction, WebhookEndpoint

logger = logging.getLogger(__name__)

#: A payment in one of these changes no more on its own: its history may age out. Succeeded
#: payments can still be refunded: their history ages from their last change.
FINAL_PAYMENT_STATUSES = (
    PaymentStatus.SUCCEEDED,
    PaymentStatus.DECLINED,
    PaymentStatus.FAILED,
    PaymentStatus.CANCELED,
)
UNRESOLVED_OPERATION_STATUSES = (OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW)

Selector = Callable[[datetime, RetentionPolicy], QuerySet]


def payment_events(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Events of final payments unchanged for the period, with no capture, void or refund
    unresolved; the events themselves older than the period."""
    cutoff = now - policy.payment_event
    return PaymentEvent.objects.filter(
        created_at__lt=cutoff,
        payment__status__in=FINAL_PAYMENT_STATUSES,
        payment__updated_at__lt=cutoff,
    ).exclude(payment__operations__status__in=UNRESOLVED_OPERATION_STATUSES)


def _acted_on_recently(now: datetime, policy: RetentionPolicy, column: str) -> QuerySet:
    """Ids (``event_id`` or ``endpoint_id``) an operator acted on within the audit period."""
    return OperatorAction.objects.filter(
        created_at__gte=now - policy.audit_trail, **{f"{column}__isnull": False}
    ).values(column)


def webhook_events(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Events older than the period with no pending delivery and no operator action within
    the audit period (their deliveries and attempts go with them)."""
    return (
        Event.objects.filter(created_at__lt=now - policy.webhook_event)
        .exclude(deliveries__status=DeliveryStatus.PENDING)
        .exclude(pk__in=_acted_on_recently(now, policy, "event_id"))
    )


def deleted_webhook_endpoints(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Endpoints deleted longer ago than the period (their deliveries and attempts go with
    them), unless an operator acted on one within the audit period."""
    return WebhookEndpoint.objects.filter(
        deleted_at__lt=now - policy.deleted_webhook_endpoint
    ).exclude(pk__in=_acted_on_recently(now, policy, "endpoint_id"))


def operator_actions(now: datetime, policy: RetentionPolicy) -> QuerySet:
    return OperatorAction.objects.filter(created_at__lt=now - policy.audit_trail)


def admin_log_entries(now: datetime, policy: RetentionPolicy) -> QuerySet:
    return LogEntry.objects.filter(action_time__lt=now - policy.audit_trail)


def access_logs(now: datetime, policy: RetentionPolicy) -> QuerySet:
    return AccessLog.objects.filter(attempt_time__lt=now - policy.audit_trail)


def access_failure_logs(now: datetime, policy: RetentionPolicy) -> QuerySet:
    return AccessFailureLog.objects.filter(attempt_time__lt=now - policy.audit_trail)


def access_attempts(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Failed-login counters past the cool-off: they lock nobody any more."""
    return AccessAttempt.objects.filter(attempt_time__lt=now - policy.login_cooloff)


def sessions(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Expired sessions (what ``manage.py clearsessions`` deletes)."""
    return Session.objects.filter(expire_date__lt=now)


def ended_api_keys(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Keys revoked, or expired, longer ago than the period."""
    cutoff = now - policy.ended_api_key
    return ApiKey.objects.filter(Q(revoked_at__lt=cutoff) | Q(expires_at__lt=cutoff))


def audit_runs(now: datetime, policy: RetentionPolicy) -> QuerySet:
    return AuditRun.objects.filter(ran_at__lt=now - policy.audit_trail)


def heartbeats(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Processes unseen for the period, except each kind's most recently seen one (so an
    alert on a dead beat keeps its row)."""
    newest = Heartbeat.objects.values("kind").annotate(last=Max("seen_at")).values("last")
    return Heartbeat.objects.filter(seen_at__lt=now - policy.heartbeat).exclude(seen_at__in=newest)


def acquirer_notifications(now: datetime, policy: RetentionPolicy) -> QuerySet:
    """Notifications received longer ago than the period and applied or ignored (one still
    ``received`` waits for its payment and is kept)."""
    return AcquirerNotification.objects.filter(
        received_at__lt=now - policy.acquirer_notification,
        status__in=(NotificationStatus.APPLIED, NotificationStatus.IGNORED),
    )


#: Model label -> its purge: every ``purged`` entry of retention.policy.INVENTORY but the
#: idempotency keys (payments.tasks.purge_expired_idempotency_keys) has one.
PURGES: dict[str, Selector] = {
    "payments.PaymentEvent": payment_events,
    "webhooks.Event": webhook_events,
    "webhooks.WebhookEndpoint": deleted_webhook_endpoints,
    "webhooks.OperatorAction": operator_actions,
    "admin.LogEntry": admin_log_entries,
    "axes.AccessLog": access_logs,
    "axes.AccessFailureLog": access_failure_logs,
    "axes.AccessAttempt": access_attempts,
    "sessions.Session": sessions,
    "merchants.ApiKey": ended_api_keys,
    "ledger.AuditRun": audit_runs,
    "heartbeats.Heartbeat": heartbeats,
    "payments.AcquirerNotification": acquirer_notifications,
}


def purge_in_batches(
    select: Selector,
    *,
    now: datetime,
    policy: RetentionPolicy,
    deleted: Callable[[list[Any]], None] | None = None,
) -> int:
    """Delete the rows ``select(now, policy)`` gives, ``policy.batch_size`` per transaction;
    return how many rows of the selector's model were deleted (cascaded rows not counted).
    ``deleted`` (optional) is called after each batch commits with that batch's primary keys,
    so what is named by them elsewhere (a Redis key) can follow."""
    total = 0
    while True:
        with transaction.atomic():
            queryset = select(now, policy)
            batch = list(
                queryset.order_by("pk")
                .select_for_update(skip_locked=True, of=("self",))
                .values_list("pk", flat=True)[: policy.batch_size]
            )
            if batch:
                queryset.model._default_manager.filter(pk__in=batch).delete()
        if batch and deleted is not None:
            deleted(batch)
        total += len(batch)
        if len(batch) < policy.batch_size:
            return total


@dataclass(frozen=True)
class PurgeReport:
    """Rows deleted per model label (cascades not counted), and files and Redis keys."""

    rows: dict[str, int]
    files: int = 0
    redis_keys: int = 0


def audit_csv_files_remove(now: datetime, policy: RetentionPolicy) -> int:
    """Delete the ledger audit's CSV files (``audit-YYYYmmddTHHMMSSZ.csv`` in
    ``LEDGER_AUDIT_CSV_DIR``) older than the audit period, by the time in their name; return
    how many. Files named otherwise are left alone."""
    directory = Path(settings.LEDGER_AUDIT_CSV_DIR)
    if not directory.is_dir():
        return 0
    cutoff = now - policy.audit_trail
    removed = 0
    for path in directory.glob("audit-*.csv"):
        try:
            made = datetime.strptime(path.stem, "audit-%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            continue
        if made < cutoff:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
