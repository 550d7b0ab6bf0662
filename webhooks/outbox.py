"""The outbox: :func:`event_record`, called in the transaction of the state change.

The caller (``payments.core.payment_states``) holds the row lock of what changed and passes the
object as
its API shows it now; the event and one :class:`~webhooks.models.Delivery` per endpoint of the
merchant subscribed to the type are inserted in the caller's transaction, so a change without
its event, or an event without its change, cannot exist. When the transaction commits, the
event's delivery task is enqueued (a lost message only waits for the beat sweep).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from idempotency.prepared_cursor import prepared_cursor
from observability.trace_context import current_traceparent
from webhooks.events import ALL_EVENTS, EVENT_TYPES
from webhooks.models import Delivery, Event, WebhookEndpoint
from webhooks.tasks import deliver_event_task

__all__ = ["event_record", "subscribed"]


def subscribed(enabled_events: list[str], event_type: str) -> bool:
    """Whether an endpoint with ``enabled_events`` receives ``event_type``."""
    return ALL_EVENTS in enabled_events or event_type in enabled_events


def event_record(
    *,
    merchant_id: int,
    event_type: str,
    object_id: str,
    obj: Mapping[str, Any],
    now: datetime,
) -> Event:
    """Insert the event ``event_type`` (a key of :data:`~webhooks.events.EVENT_TYPES`) of the
    merchant's object ``object_id`` with ``obj`` (its API representation, JSON-ready) as
    ``data.object`` and the running span's ``traceparent`` (its deliveries join that trace;
    ADR 0044), and its deliveries, due at once. Inside the caller's transaction
    (``RuntimeError`` otherwise); raises ``ValueError`` for an unknown type."""
    if not connection.in_atomic_block:
        raise RuntimeError("An event is written in the transaction of its state change.")
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    event = Event(
        merchant_id=merchant_id,
        type=event_type,
        object_id=object_id,
        data=json.dumps({"object": obj}, ensure_ascii=False),
        created_at=now,
        trace_context=current_traceparent(),
    )
    # One round trip on the payments' hot path (ADR 0026): the event's INSERT and the look-up
    # of the merchant's endpoints in one statement.
    db = connections[DEFAULT_DB_ALIAS]  # once: each ``connection.x`` is a thread-local look-up
    qn = db.ops.quote_name
    fields = Event._meta.concrete_fields
    with prepared_cursor() as cursor:
        cursor.execute(
            f"WITH new_event AS (INSERT INTO {qn(Event._meta.db_table)} "  # noqa: S608
            f"({', '.join(qn(f.column) for f in fields)}) "
            f"VALUES ({', '.join(['%s'] * len(fields))})) "
            f"SELECT id, enabled_events FROM {qn(WebhookEndpoint._meta.db_table)} "
            "WHERE merchant_id = %s AND deleted_at IS NULL",
            [f.get_db_prep_save(getattr(event, f.attname), db) for f in fields] + [merchant_id],
        )
        endpoints = [
            (endpoint_id, json.loads(events) if isinstance(events, str) else events)
            for endpoint_id, events in cursor.fetchall()
        ]
    event._state.adding = False
    event._state.db = db.alias
    deliveries = [
        Delivery(
            event=event,
            endpoint_id=endpoint_id,
            next_attempt_at=now,
            window_started_at=now,
            created_at=now,
        )
        for endpoint_id, enabled_events in endpoints
        if subscribed(enabled_events, event_type)
    ]
    if deliveries:
        Delivery.objects.bulk_create(deliveries)
        event_id = event.id
        transaction.on_commit(lambda: deliver_event_task.delay(event_id), robust=True)
    return event
