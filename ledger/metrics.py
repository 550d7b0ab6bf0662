"""The ledger audit's scrape-time gauges (:class:`LedgerAuditCollector`), served at the web's
``/metrics`` (registered by :class:`ledger.apps.LedgerConfig` through
``payments.monitoring.views.scrape_collector_register``).

Gauges, from the newest :class:`~ledger.models.AuditRun` (one index probe on ``ran_at``):

* ``payments_ledger_audit_discrepancies``: discrepancies the last audit found (0: clean).
* ``payments_ledger_audit_last_run_timestamp_seconds``: when it ran (Unix time; absent before
  the first audit), so an alert sees an audit that stopped running.
* ``payments_ledger_audit_collector_up``: 1 when the query succeeded, else 0.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from ledger.models import AuditRun

__all__ = ["LedgerAuditCollector"]

logger = logging.getLogger(__name__)


class LedgerAuditCollector:
    """The last ledger audit's result; ``describe()`` runs no query."""

    def describe(self) -> Iterable[Metric]:
        """The metric families (without samples)."""
        return list(self._families())

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "payments_ledger_audit_discrepancies",
            "Discrepancies found by the last ledger audit (0: clean).",
        )
        yield GaugeMetricFamily(
            "payments_ledger_audit_last_run_timestamp_seconds",
            "When the last ledger audit ran (Unix time).",
        )
        yield GaugeMetricFamily(
            "payments_ledger_audit_collector_up", "1 when the ledger audit query succeeded."
        )

    def collect(self) -> Iterable[Metric]:
        """Read the newest audit run; on a database error only ``..._collector_up 0``."""
        discrepancies, last_run, up = self._families()
        try:
            run = (
                AuditRun.objects.order_by("-ran_at", "-id")
                .only("ran_at", "discrepancies_total")
                .first()
            )
        except Exception:  # a scrape answers even when the database does not
            logger.exception("ledger audit metrics collector failed")
            up.add_metric([], 0)
            return [up]
        discrepancies.add_metric([], run.discrepancies_total if run else 0)
        if run is not None:
            last_run.add_metric([], run.ran_at.timestamp())
        up.add_metric([], 1)
        return [discrepancies, last_run, up]
