"""Django system checks for settings that could make the service unsafe."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register


@register()
def reconciliation_stops_before_the_acquirer_forgets(app_configs=None, **kwargs) -> list[Error]:
    """The maximum reconciliation age must stay well below (at most half of) the acquirer's
    idempotency key retention: a re-send after the acquirer forgot the key could charge twice."""
    max_age = settings.RECONCILIATION_MAX_AGE_SECONDS
    retention = settings.ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS
    if max_age > retention / 2:
        return [
            Error(
                f"RECONCILIATION_MAX_AGE_SECONDS ({max_age:g}) must be at most half of "
                f"ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS ({retention:g}).",
                hint="A re-send after the acquirer forgot the key could charge the card twice.",
                id="payments.E001",
            )
        ]
    return []


@register()
def task_time_limit_below_reconciliation_lease(app_configs=None, **kwargs) -> list[Error]:
    """A sweep must be killed before its lease ends, or two workers could hold one payment."""
    limit = settings.CELERY_TASK_TIME_LIMIT
    lease = settings.RECONCILIATION_LEASE_SECONDS
    if limit is None or limit >= lease:
        return [
            Error(
                f"CELERY_TASK_TIME_LIMIT_SECONDS ({limit}) must be below "
                f"RECONCILIATION_LEASE_SECONDS ({lease:g}).",
                id="payments.E002",
            )
        ]
    return []
