"""The fan-out: a worker expands an outbox event into one delivery per endpoint (ADR 0042).

The payment's transaction writes the event alone (``webhooks.outbox``); here, after its commit,
:func:`event_fan_out` inserts the deliveries in one statement of one short transaction:

* **Who receives it**: the merchant's endpoints not deleted, subscribed to the type *now*, and
  created at or before the event (``endpoint.created_at <= event.created_at``, both stamped by
  the service's clock): an endpoint created after an event never receives it, however late the
  fan-out runs. A disabled endpoint gets its delivery, which waits for it (as before).
* **Exactly once per endpoint**, whoever expands and however often: the event row is locked
  (``FOR NO KEY UPDATE``) and must still be unexpanded (``fanned_out_at IS NULL``), and the
  ``INSERT`` is ``ON CONFLICT (event_id, endpoint_id) DO NOTHING`` on the unique
  ``delivery_once``. A second expander waits for the first's lock: if the first committed, the
  event is expanded and the second inserts nothing; if the first died (its connection gone, its
  transaction rolled back), the second finds the event unexpanded and inserts every delivery.
  The deliveries and ``fanned_out_at`` commit together or not at all.

:func:`events_fan_out_pending` is the beat sweep's share: the events a lost message or a killed
worker left unexpanded, oldest first.
"""

from __future__ import annotations

from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from webhooks.events import subscribed_sql
from webhooks.models import Delivery, DeliveryStatus, Event, WebhookEndpoint

__all__ = ["event_fan_out", "events_fan_out_pending"]


def _fan_out_sql() -> str:
    qn = connections[DEFAULT_DB_ALIAS].ops.quote_name
    events, endpoints = qn(Event._meta.db_table), qn(WebhookEndpoint._meta.db_table)
    deliveries = qn(Delivery._meta.db_table)
    return (
        "WITH event AS ("  # noqa: S608 (table names only; every value is a parameter)
        f"SELECT id, merchant_id, type, created_at FROM {events} "
        "WHERE id = %(event_id)s AND fanned_out_at IS NULL FOR NO KEY UPDATE), "
        f"inserted AS (INSERT INTO {deliveries} "
        "(event_id, endpoint_id, status, attempts, next_attempt_at, window_started_at, created_at) "
        "SELECT event.id, endpoint.id, %(pending)s, 0, %(now)s, %(now)s, %(now)s "
        f"FROM event JOIN {endpoints} endpoint ON endpoint.merchant_id = event.merchant_id "
        "WHERE endpoint.deleted_at IS NULL AND endpoint.created_at <= event.created_at "
        f"AND {subscribed_sql('event.type')} "
        "ON CONFLICT (event_id, endpoint_id) DO NOTHING RETURNING 1), "
        f"marked AS (UPDATE {events} SET fanned_out_at = %(now)s "
        "WHERE id IN (SELECT id FROM event) RETURNING 1) "
        "SELECT (SELECT count(*) FROM marked), (SELECT count(*) FROM inserted)"
    )


def event_fan_out(event_id: str, *, now: datetime) -> int | None:
    """Expand the event ``event_id`` into its deliveries, due at ``now`` (an aware datetime;
    their retry windows start then). Returns how many deliveries were inserted, or None when
    there was nothing to do (already expanded, or no such event). Its own transaction; safe to
    call any number of times, from any number of workers at once (see the module)."""
    with transaction.atomic(), connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(
            _fan_out_sql(),
            {"event_id": event_id, "now": now, "pending": DeliveryStatus.PENDING.value},
        )
        marked, inserted = cursor.fetchone()
    return inserted if marked else None


def events_fan_out_pending(*, now: datetime, limit: int = 100) -> int:
    """Expand up to ``limit`` events still unexpanded, oldest first (each in its own
    transaction, as :func:`event_fan_out`). Returns how many deliveries were inserted."""
    pending = Event.objects.filter(fanned_out_at__isnull=True).order_by("created_at")
    return sum(
        event_fan_out(event_id, now=now) or 0
        for event_id in pending.values_list("id", flat=True)[:limit]
    )
