"""Celery tasks of provider notifications. Tasks never autoretry: a notification that cannot be
applied yet is re-enqueued for its ``next_attempt_at``, and the beat's sweep takes any whose
message was lost.
"""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from payments.notifications.apply import RETRY_LATER, notification_apply, notifications_due

__all__ = ["apply_due_notifications", "apply_notification", "notification_enqueue"]


def notification_enqueue(notification_id: int) -> None:
    """Enqueue the apply task of a stored notification now (after its row committed)."""
    apply_notification.delay(notification_id)


@shared_task(name="payments.notifications.tasks.apply_notification", ignore_result=True)
def apply_notification(notification_id: int) -> str:
    """Apply one stored notification; not applicable yet: enqueued again for its
    ``next_attempt_at``. A duplicate message finds it applied and does nothing. Returns the
    result (``applied``, ``retry_later``, ``ignored``, ``already_done``)."""
    report = notification_apply(notification_id)
    if report.result == RETRY_LATER and report.retry_at is not None:
        countdown = max((report.retry_at - timezone.now()).total_seconds(), 0.0)
        apply_notification.apply_async(args=[notification_id], countdown=countdown)
    return report.result


@shared_task(name="payments.notifications.tasks.apply_due_notifications", ignore_result=True)
def apply_due_notifications() -> int:
    """The beat's sweep: apply every stored notification due (a lost message, a restart).
    Returns how many it tried."""
    due = notifications_due(now=timezone.now())
    for notification_id in due:
        notification_apply(notification_id)
    return len(due)
