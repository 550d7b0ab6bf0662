"""``payments_process_heartbeat_age_seconds{kind,name}``: seconds since each Celery worker's and
beat's last heartbeat, computed at scrape time from PostgreSQL (``heartbeats.models``).

A live worker or beat stays below ``HEARTBEAT_INTERVAL_SECONDS`` (15 s) plus a scrape's lag;
one that died, or cannot consume (its broker lost), grows without bound. A cleanly stopped
process has no series. ``payments_process_heartbeats_up`` is 0 when the query failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from heartbeats.services import heartbeat_ages

__all__ = ["HEARTBEAT_AGE_METRIC", "HeartbeatCollector"]

logger = logging.getLogger(__name__)

#: The gauge operators alert on (docs/operations.md, "Supervision and heartbeats").
HEARTBEAT_AGE_METRIC = "payments_process_heartbeat_age_seconds"


class HeartbeatCollector:
    """Scrape-time gauges of the heartbeats table (one small table, read whole)."""

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                HEARTBEAT_AGE_METRIC,
                "Seconds since the last heartbeat of a Celery worker or beat.",
                labels=["kind", "name"],
            ),
            GaugeMetricFamily(
                "payments_process_heartbeats_up", "1 when the heartbeats could be read."
            ),
        )

    def collect(self) -> Iterable[Metric]:
        ages, up = self._families()
        try:
            rows = heartbeat_ages()
        except Exception:  # a scrape answers even when the database does not
            logger.warning("heartbeats collector failed", exc_info=True)
            up.add_metric([], 0)
            return [up]
        for kind, name, age in rows:
            ages.add_metric([kind, name], age)
        up.add_metric([], 1)
        return [ages, up]
