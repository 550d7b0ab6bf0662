"""The Celery task of deferred submission (``payments.authorization.deferred_sweep``), run by beat.

Its own module, not ``payments.reconciliation.tasks``: the sweep records outcomes through the
create flow
(``payments.authorization.create``), which imports ``payments.reconciliation.tasks`` to enqueue
reconciliation, so the
task cannot live there without an import circle. Celery imports it through
``CELERY_IMPORTS``. Never autoretries: the gateway client is the only retry layer.
"""

from __future__ import annotations

from celery import shared_task

from payments.authorization.deferral import DeferralPolicy
from payments.authorization.deferred_sweep import deferred_sweep

__all__ = ["submit_due_deferred_payments"]


@shared_task(name="payments.deferred_tasks.submit_due_deferred_payments", ignore_result=True)
def submit_due_deferred_payments() -> int:
    """The beat sweep of deferred payments: expire the overdue, submit up to
    ``DEFERRED_BATCH_SIZE`` due ones at the acquirer's pace. Returns how many it handled. Two
    at once (a slow sweep overlapping the next) take disjoint payments."""
    report = deferred_sweep(policy=DeferralPolicy.from_settings())
    return len(report.submitted) + len(report.deferred_again) + len(report.expired)
