"""Celery tasks of the ledger app. ``audit_acquirer_daily`` runs from beat once a day."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from ledger.services import audit_acquirer_run

logger = logging.getLogger(__name__)

#: The daily audit's window: a day plus an hour, so consecutive runs overlap.
DEFAULT_WINDOW_HOURS = 25.0


@shared_task(name="ledger.tasks.audit_acquirer_daily", ignore_result=True)
def audit_acquirer_daily() -> int:
    """Audit the last ``LEDGER_AUDIT_WINDOW_HOURS`` (25 h), write the CSV, store the run (the
    admin shows it) and log an error when there are discrepancies. Returns their number.
    Never retries: the next day's run covers the same ground again."""
    hours = getattr(settings, "LEDGER_AUDIT_WINDOW_HOURS", None) or DEFAULT_WINDOW_HOURS
    report, _run = audit_acquirer_run(
        since=timezone.now() - timedelta(hours=hours), triggered_by="task"
    )
    return len(report.discrepancies)
