"""The outbox: :func:`event_record`, called in the transaction of the state change.

The caller (``payments.core.payment_states``) holds the row lock of what changed and passes the
object as its API shows it now. The event, ONE row, is inserted in the caller's transaction, so a
change without its event, or an event without its change, cannot exist; its deliveries (one per
endpoint) are not: a worker expands the event into them after the commit (``webhooks.fanout``,
ADR 0042), so a payment's transaction costs the same with 0 endpoints or 16. When the
transaction commits and some endpoint is subscribed, the event's task is enqueued (fan out, then
deliver); a lost message only waits for the beat sweep, which fans out what is left too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from idempotency.prepared_cursor import prepared_cursor
from observability.trace_context import current_traceparent
from webhooks.events import EVENT_TYPES, subscribed_sql
from webhooks.models import Event, WebhookEndpoint
from webhooks.tasks import deliver_event_task

__all__ = ["event_record"]


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
    ``data.object``, created at ``now``. Inside the caller's transaction (``RuntimeError``
    otherwise); raises ``ValueError`` for an unknown type.

    One statement, one row: the same ``INSERT`` asks whether any live endpoint of the merchant
    created at or before ``now`` is subscribed to the type. If none is, the event is born
    fanned out (``fanned_out_at = now``: nobody is to receive it, and an endpoint created later
    never will); otherwise ``fanned_out_at`` stays null and the fan-out task is enqueued when
    the transaction commits. The event keeps the running span's ``traceparent``: its
    deliveries join that trace (ADR 0044)."""
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
    # One round trip on the payments' hot path (ADR 0026): the event's INSERT, with the look-up
    # of a subscribed endpoint as the value of its fanned_out_at.
    db = connections[DEFAULT_DB_ALIAS]  # once: each ``connection.x`` is a thread-local look-up
    qn = db.ops.quote_name
    fields = [f for f in Event._meta.concrete_fields if f.attname != "fanned_out_at"]
    with prepared_cursor() as cursor:
        cursor.execute(
            f"WITH new_event AS (INSERT INTO {qn(Event._meta.db_table)} "  # noqa: S608
            f"({', '.join(qn(f.column) for f in fields)}, {qn('fanned_out_at')}) "
            f"VALUES ({', '.join(['%s'] * len(fields))}, "
            f"CASE WHEN EXISTS (SELECT 1 FROM {qn(WebhookEndpoint._meta.db_table)} "
            "WHERE merchant_id = %s AND deleted_at IS NULL AND created_at <= %s "
            f"AND {subscribed_sql()}) THEN NULL ELSE %s::timestamptz END) "
            "RETURNING fanned_out_at) "
            "SELECT fanned_out_at FROM new_event",
            [f.get_db_prep_save(getattr(event, f.attname), db) for f in fields]
            + [merchant_id, now, event_type, now],
        )
        (event.fanned_out_at,) = cursor.fetchone()
    event._state.adding = False
    event._state.db = db.alias
    if event.fanned_out_at is None:
        event_id = event.id
        transaction.on_commit(lambda: deliver_event_task.delay(event_id), robust=True)
    return event
