"""Scrape-time gauges of the acquirer client's shared state (:class:`ResilienceCollector`), served
at ``/metrics`` by :mod:`payments.monitoring.views`. Shared state: three reads of the Redis store,
or of memory; nothing is acquired, refused or counted.

Gauges (labels in braces):

* ``payments_acquirer_breaker_state{group,state}``: 1 for the breaker's current state (closed,
  open, half_open, forced_open, disabled, metrics_only), 0 for the others.
* ``payments_acquirer_breaker_failure_rate_percent{group}`` (absent with no buffered call) and
  ``payments_acquirer_breaker_buffered_calls{group}``.
* ``payments_acquirer_concurrency_limit{scope}`` and
  ``payments_acquirer_concurrency_in_flight{scope}``: the AIMD limit and the slots in use.
* ``payments_acquirer_state_store{store}``: 1 for where that state came from: ``redis`` (shared
  by the fleet), ``fallback`` (Redis unreachable: this process's local copy) or ``memory``
  (no ``ACQUIRER_STATE_REDIS_URL``: this process only).
* ``payments_acquirer_resilience_collector_up``: 1 when the state could be read, else 0.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from payments.acquirer.client import acquirer_client, acquirer_specs

__all__ = ["BREAKER_STATES", "STATE_STORES", "ResilienceCollector"]

logger = logging.getLogger(__name__)

#: Every state a breaker reports (gateway_client.breaker), exported one-hot per group.
BREAKER_STATES = ("closed", "open", "half_open", "forced_open", "disabled", "metrics_only")
#: Where the breaker state came from (``BreakerSnapshot.store``), exported one-hot.
STATE_STORES = ("redis", "fallback", "memory")


class ResilienceCollector:
    """Scrape-time gauges of the process's acquirer clients, one per configured acquirer: breaker
    state per acquirer and endpoint group and the AIMD limit of each quota scope.

    Cost: two breaker reads and one limiter read, each one atomic read-only script on the shared
    store (a Redis round trip each, or a dict look-up for the in-memory store); no permit taken,
    no refusal counted. When Redis is unreachable the store answers from its in-memory fallback
    after one short connect timeout (0.25 s, then Redis is skipped for 5 s), and the gauges say
    so (``payments_acquirer_state_store{store="fallback"}``). Any other error exports only
    ``payments_acquirer_resilience_collector_up 0``: a scrape never fails because of it.
    """

    def describe(self) -> Iterable[Metric]:
        """The metric families (without samples); reads nothing."""
        return list(self._families())

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "payments_acquirer_breaker_state",
            "Circuit breaker state per acquirer and endpoint group: 1 for the current state, 0 "
            "for the others.",
            labels=["acquirer", "group", "state"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_breaker_failure_rate_percent",
            "Failure rate over the breaker's buffered calls, percent (absent with none).",
            labels=["acquirer", "group"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_breaker_buffered_calls",
            "Results in the breaker's window (in half-open: the probe results).",
            labels=["acquirer", "group"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_concurrency_limit",
            "AIMD concurrency limit of the quota scope (calls in flight allowed).",
            labels=["scope"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_concurrency_in_flight",
            "Calls holding a concurrency slot of the quota scope now.",
            labels=["scope"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_state_store",
            "Where the breaker state was read: redis (shared), fallback (Redis unreachable: "
            "this process only) or memory (no ACQUIRER_STATE_REDIS_URL: this process only).",
            labels=["store"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_resilience_collector_up",
            "1 when the acquirer client's resilience state could be read at this scrape.",
        )

    def collect(self) -> Iterable[Metric]:
        """Read the state; on an error only ``..._resilience_collector_up 0`` is exported."""
        state, rate, buffered, limit, in_flight, store, up = self._families()
        try:
            readings = self._read()
        except Exception:  # a scrape answers whatever the state store does
            logger.exception("resilience metrics collector failed")
            up.add_metric([], 0)
            return [up]
        stores: set[str] = set()
        scopes: set[str] = set()
        for acquirer, snapshots, limiter in readings:
            for group, snapshot in snapshots.items():
                for name in BREAKER_STATES:
                    state.add_metric([acquirer, group, name], 1 if snapshot.state == name else 0)
                if snapshot.failure_rate is not None:
                    rate.add_metric([acquirer, group], snapshot.failure_rate)
                buffered.add_metric([acquirer, group], snapshot.buffered_calls)
                stores.add(snapshot.store)
            if limiter.scope not in scopes:  # acquirers may share a quota scope
                scopes.add(limiter.scope)
                limit.add_metric([limiter.scope], limiter.limit)
                in_flight.add_metric([limiter.scope], limiter.in_flight)
        # "fallback" wins: one group read from the fallback means the shared state is not seen.
        current = next((name for name in ("fallback", "memory", "redis") if name in stores), "")
        for name in STATE_STORES:
            store.add_metric([name], 1 if current == name else 0)
        up.add_metric([], 1)
        return [state, rate, buffered, limit, in_flight, store, up]

    @staticmethod
    def _read():
        """(acquirer name, breaker snapshots, limiter snapshot) of every configured acquirer."""
        readings = []
        for spec in acquirer_specs():
            client = acquirer_client(spec.name)
            readings.append(
                (spec.name, client.breakers.snapshot(), client.limiter.snapshot(client.scope))
            )
        return readings
