"""System checks of the retention settings (retention.E001, E002)."""

from __future__ import annotations

import math

from django.conf import settings
from django.core.checks import Error, register

from retention.policy import FLOORS_DAYS


def _floors() -> dict[str, int]:
    """Each setting's floor; the webhook events outlive their retry window by a day."""
    retry_days = math.ceil(settings.WEBHOOK_RETRY_WINDOW_SECONDS / 86400) + 1
    return {**FLOORS_DAYS, "RETENTION_WEBHOOK_EVENT_DAYS": retry_days}


@register()
def retention_periods_not_below_their_floors(app_configs=None, **kwargs) -> list[Error]:
    """Every ``RETENTION_*_DAYS`` is a whole number of days at or above its floor (a dispute
    window, a year of audit trail, the webhook retry window); the batch size is positive."""
    errors = []
    for name, floor in _floors().items():
        value = getattr(settings, name)
        if not isinstance(value, int) or value < floor:
            errors.append(
                Error(
                    f"{name} ({value!r}) must be a whole number of days, at least {floor}.",
                    hint="docs/data.md gives each period's reason.",
                    id="retention.E001",
                )
            )
    batch = settings.RETENTION_PURGE_BATCH_SIZE
    if not isinstance(batch, int) or not 1 <= batch <= 100_000:
        errors.append(
            Error(
                f"RETENTION_PURGE_BATCH_SIZE ({batch!r}) must be between 1 and 100000.",
                id="retention.E002",
            )
        )
    return errors
