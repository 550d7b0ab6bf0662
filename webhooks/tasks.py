"""Celery tasks of the webhooks app: the event's task enqueued on commit, and the beat sweep.

Each has its own queue (``CELERY_TASK_ROUTES``, ADR 0042): a backlog of sweeps never stands in
front of a fresh event's task. Neither retries: a failed attempt is rescheduled in PostgreSQL
(``webhooks.delivery``), and a message lost or a worker killed mid-attempt (or mid-fan-out) only
waits for the lease to run out and the sweep.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from webhooks.dispatch import deliver_due
from webhooks.fanout import event_fan_out, events_fan_out_pending

__all__ = ["deliver_due_task", "deliver_event_task"]


@shared_task(name="webhooks.tasks.deliver_event", ignore_result=True)
def deliver_event_task(event_id: str) -> int:
    """Fan the event out into its deliveries if no worker has yet (``webhooks.fanout``), then
    deliver its due deliveries now, batch after batch (each within the merchant's and the
    endpoints' caps) until none is left that may be sent, for at most
    ``WEBHOOK_SWEEP_BUDGET_SECONDS`` (enqueued when its transaction commits, or by an
    operator's re-delivery). A duplicate or redelivered message finds them expanded and leased
    or delivered, and does nothing. Returns how many attempts it made."""
    event_fan_out(event_id, now=timezone.now())
    return len(deliver_due(event_id=event_id, budget_seconds=settings.WEBHOOK_SWEEP_BUDGET_SECONDS))


@shared_task(name="webhooks.tasks.deliver_due", ignore_result=True)
def deliver_due_task() -> int:
    """The beat sweep: fan out the events left unexpanded, then claim and send due deliveries
    (round robin across merchants), batch after batch, for at most
    ``WEBHOOK_SWEEP_BUDGET_SECONDS``. Returns how many attempts it made."""
    events_fan_out_pending(now=timezone.now())
    return len(deliver_due(budget_seconds=settings.WEBHOOK_SWEEP_BUDGET_SECONDS))
