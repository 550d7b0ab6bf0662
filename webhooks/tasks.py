"""Celery tasks of the webhooks app: the delivery enqueued on commit, and the beat sweep.

Neither retries: a failed attempt is rescheduled in PostgreSQL (``webhooks.delivery``), and a
message lost or a worker killed mid-attempt only waits for the lease to run out and the sweep.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from webhooks.delivery import deliver_due

__all__ = ["deliver_due_task", "deliver_event_task"]


@shared_task(name="webhooks.tasks.deliver_event", ignore_result=True)
def deliver_event_task(event_id: str) -> int:
    """Deliver the due deliveries of one event now (enqueued when its transaction commits).
    A duplicate or redelivered message finds them leased or delivered and does nothing.
    Returns how many attempts it made."""
    return len(deliver_due(event_id=event_id))


@shared_task(name="webhooks.tasks.deliver_due", ignore_result=True)
def deliver_due_task() -> int:
    """The beat sweep: claim and send due deliveries, batch after batch, for at most
    ``WEBHOOK_SWEEP_BUDGET_SECONDS``. Returns how many attempts it made."""
    return len(deliver_due(budget_seconds=settings.WEBHOOK_SWEEP_BUDGET_SECONDS))
