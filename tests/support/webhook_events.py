"""An outbox event as a state change writes it, then fanned out as the worker's task does on
commit (``webhooks.fanout``, ADR 0042): for tests that need the event's deliveries."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from webhooks.fanout import event_fan_out
from webhooks.models import Event
from webhooks.outbox import event_record


def event_written(
    merchant_id: int,
    object_id: str = "pay_1",
    *,
    event_type: str = "payment.succeeded",
    obj: dict | None = None,
    now: datetime | None = None,
) -> Event:
    """Record the event in its own transaction at ``now`` (default: the time now), then fan it
    out at the same instant. ``obj`` defaults to a succeeded payment's stub."""
    now = now or timezone.now()
    obj = obj if obj is not None else {"id": object_id, "object": "payment", "status": "succeeded"}
    with transaction.atomic():
        event = event_record(
            merchant_id=merchant_id, event_type=event_type, object_id=object_id, obj=obj, now=now
        )
    event_fan_out(event.id, now=now)
    return event
