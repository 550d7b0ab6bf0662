"""The webhooks' metrics, served at ``/metrics`` with the payments' ones.

Counter (in process, the delivering worker's):

* ``webhooks_deliveries_total{outcome}``: attempts by outcome (``delivered``, ``http_error``,
  ``redirect``, ``gone``, ``timeout``, ``connection_error``, ``url_refused``), plus the
  deliveries the breaker held back (``breaker_open``) and those whose window ended
  (``expired``).

Gauges computed at scrape time from PostgreSQL (:class:`WebhooksCollector`, index-backed):

* ``webhooks_backlog``: pending deliveries (due or waiting for a retry or a disabled endpoint).
* ``webhooks_backlog_oldest_age_seconds``: age of the oldest pending delivery (0 if none).
* ``webhooks_endpoints{status}``: endpoints by status (deleted ones excluded).
* ``webhooks_events_not_fanned_out``: events a worker has not yet expanded into their
  deliveries (ADR 0042): near 0; growing, the event tasks and the sweep are not running.
* ``webhooks_collector_up``: 1 when the queries succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import datetime

from django.db import connection
from django.utils import timezone
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric

from webhooks.models import Delivery, DeliveryStatus, EndpointStatus, Event, WebhookEndpoint

__all__ = ["WebhooksCollector", "record_delivery_outcome"]

logger = logging.getLogger(__name__)

DELIVERIES = Counter(
    "webhooks_deliveries", "Webhook delivery attempts (and held-back deliveries), by outcome.",
    ["outcome"],
)  # fmt: skip


def record_delivery_outcome(outcome: str) -> None:
    """Count one attempt's outcome; a metrics failure is logged, never raised."""
    try:
        DELIVERIES.labels(outcome=str(outcome)).inc()
    except Exception:  # metrics must never break a delivery
        logger.exception("metrics increment failed")


class WebhooksCollector:
    """Scrape-time gauges of the outbox (see the module's docstring): one query, served by the
    partial indexes of pending deliveries."""

    @staticmethod
    def _query() -> tuple[int, datetime | None, int, int, int]:
        deliveries = Delivery._meta.db_table
        endpoints = WebhookEndpoint._meta.db_table
        events = Event._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT (SELECT count(*) FROM {deliveries} WHERE status = %s), "  # noqa: S608
                f"(SELECT min(created_at) FROM {deliveries} WHERE status = %s), "
                f"(SELECT count(*) FROM {endpoints} WHERE deleted_at IS NULL AND status = %s), "
                f"(SELECT count(*) FROM {endpoints} WHERE deleted_at IS NULL AND status = %s), "
                f"(SELECT count(*) FROM {events} WHERE fanned_out_at IS NULL)",
                [DeliveryStatus.PENDING, DeliveryStatus.PENDING, EndpointStatus.ENABLED,
                 EndpointStatus.DISABLED],
            )  # fmt: skip
            return cursor.fetchone()

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("webhooks_backlog", "Pending webhook deliveries.")
        yield GaugeMetricFamily(
            "webhooks_backlog_oldest_age_seconds",
            "Age of the oldest pending webhook delivery (0 when there is none).",
        )
        yield GaugeMetricFamily(
            "webhooks_endpoints", "Webhook endpoints by status.", labels=["status"]
        )
        yield GaugeMetricFamily(
            "webhooks_events_not_fanned_out",
            "Events not yet expanded into their deliveries (ADR 0042; a moment each).",
        )
        yield GaugeMetricFamily(
            "webhooks_collector_up", "1 when the webhooks' scrape-time queries succeeded."
        )

    def collect(self) -> Iterable[Metric]:
        backlog, oldest, endpoints, unexpanded, up = self._families()
        try:
            pending, oldest_at, enabled, disabled, not_fanned_out = self._query()
        except Exception:  # a scrape answers even when the database does not
            logger.exception("webhooks metrics collector failed")
            up.add_metric([], 0)
            return [up]
        backlog.add_metric([], pending)
        age = 0.0
        if oldest_at is not None:
            age = max(0.0, (timezone.now() - oldest_at).total_seconds())
        oldest.add_metric([], age)
        endpoints.add_metric([EndpointStatus.ENABLED], enabled)
        endpoints.add_metric([EndpointStatus.DISABLED], disabled)
        unexpanded.add_metric([], not_fanned_out)
        up.add_metric([], 1)
        return [backlog, oldest, endpoints, unexpanded, up]
