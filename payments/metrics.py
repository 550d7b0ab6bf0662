"""Prometheus metrics of the payment service, served at ``/metrics`` by :func:`metrics_view`.

Two kinds, never mixed:

* **Counters incremented in process** (``record_*`` functions and :class:`GatewayMetrics`, the
  gateway client's metrics hook). They only add to in-memory values (or to the
  ``PROMETHEUS_MULTIPROC_DIR`` files when several processes share one exposition): no network
  call, no database write, and an exception inside them is swallowed and logged, so they can
  never change the outcome of a payment.
* **Gauges computed at scrape time from PostgreSQL** (:class:`PaymentsCollector`): cheap,
  index-backed queries only. The unresolved statuses (``processing``, ``needs_review``) are
  counted exactly; the whole table by status is the planner's estimate (``pg_class`` and
  ``pg_stats``, refreshed by autovacuum's ANALYZE), which costs nothing at any table size.

Metric names (labels in braces):

Gauges, computed at scrape time:

* ``payments_unresolved{status}``: exact count of ``processing`` and ``needs_review`` payments.
* ``payments_oldest_unresolved_age_seconds{status}``: age of the oldest one (0 if none).
* ``payments_by_status_estimated{status}``: payments per status, planner estimate.
* ``payments_collector_up``: 1 when the scrape-time queries succeeded, else 0.

Counters:

* ``payments_acquirer_attempts_total{operation,outcome}``: HTTP requests sent to the acquirer
  (outcome ``ok`` or the error class), from the gateway client's hook.
* ``payments_acquirer_retries_total{operation,reason}``: retries the gateway client started.
* ``payments_gateway_client_events_total{name,operation}``: any other gateway client counter.
* ``payments_reconciliation_outcomes_total{result}``: reconciliations of one payment by
  result (``resolved``, ``retry_later``, ``needs_review``, ``waiting`` ...).
* ``payments_idempotency_replays_total``: answers replayed from a stored idempotency key.
* ``payments_idempotency_key_in_use_total``: ``409 idempotency_key_in_use`` answers.
* ``payments_idempotency_key_reused_total``: ``422 idempotency_key_reused`` answers.

The gateway client's resilience counters (:data:`GATEWAY_COUNTERS` maps its names):

* ``payments_acquirer_breaker_transitions_total{group,from_state,to_state}``: circuit breaker
  transitions (counted once fleet-wide, by the process whose call made the transition).
* ``payments_acquirer_breaker_refused_total{group}``: calls the breaker refused (nothing sent).
* ``payments_acquirer_breaker_late_results_total{group}``: results of calls admitted in an
  older breaker generation (statistics only, never a transition).
* ``payments_acquirer_breaker_store_fallback_total{group}``: breaker operations decided by the
  local in-memory fallback (Redis unreachable).
* ``payments_acquirer_breaker_operator_actions_total{group,action}``: force_open, disable,
  metrics_only, reset.
* ``payments_acquirer_circuit_open_calls_total{operation}``: calls the breaker ended (refused
  before the first attempt, or stopped when it opened mid-call).
* ``payments_acquirer_concurrency_limit_changes_total{scope,direction}``: AIMD limit moves
  (``down`` after a rate limit, ``up`` after a success at high concurrency).
* ``payments_acquirer_concurrency_waits_total{scope}``, ``..._concurrency_refused_total{scope}``:
  slot requests that had to wait, and that found no slot in time;
  ``..._concurrency_refused_calls_total{operation}``: calls that failed for it.
* ``payments_acquirer_retry_budget_exhausted_total{operation}``: retries the budget refused.
* ``payments_acquirer_rate_gate_hits_total{operation,result}``: calls that found their quota
  scope's rate gate closed (``result``: ``waited`` or ``refused`` without sending).
* ``payments_acquirer_invalid_headers_total{header}``: Retry-After / quota headers ignored as
  invalid (``header`` names it, e.g. ``retry-after``).
* ``payments_acquirer_state_store_fallback_total{store}``: shared-state operations served in
  memory because Redis was unreachable (when the store is handed this hook).

Gauges computed at scrape time from the process's acquirer client (:class:`ResilienceCollector`;
shared state: three reads of the Redis store, or of memory):

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

django-prometheus adds the request, response and latency metrics (``django_http_*``).

Processes: counters live in the process that increments them. With several gunicorn workers,
set ``PROMETHEUS_MULTIPROC_DIR`` (an empty directory per deployment) so that ``/metrics``
aggregates all workers; the Celery worker, which counts reconciliations, serves its own
exposition with :func:`worker_metrics_server_start`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from payments.models import Payment, PaymentStatus

__all__ = [
    "GatewayMetrics",
    "PaymentsCollector",
    "ResilienceCollector",
    "metrics_view",
    "record_idempotency_key_in_use",
    "record_idempotency_key_reused",
    "record_idempotency_replay",
    "record_reconciliation",
    "worker_metrics_server_start",
]

logger = logging.getLogger(__name__)

UNRESOLVED_STATUSES = (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW)

# --- Counters (in process) -------------------------------------------------------------------

ACQUIRER_ATTEMPTS = Counter(
    "payments_acquirer_attempts",
    "HTTP requests sent to the acquirer, by operation and outcome (ok or the error class).",
    ["operation", "outcome"],
)
ACQUIRER_RETRIES = Counter(
    "payments_acquirer_retries",
    "Retries started by the gateway client, by operation and the error that caused them.",
    ["operation", "reason"],
)
GATEWAY_CLIENT_EVENTS = Counter(
    "payments_gateway_client_events",
    "Other counters of the gateway client (gate waits, deadline stops, invalid headers ...).",
    ["name", "operation"],
)
RECONCILIATION_OUTCOMES = Counter(
    "payments_reconciliation_outcomes",
    "Reconciliations of one payment, by result.",
    ["result"],
)
IDEMPOTENCY_REPLAYS = Counter(
    "payments_idempotency_replays", "Answers replayed from a completed idempotency key."
)
IDEMPOTENCY_KEY_IN_USE = Counter(
    "payments_idempotency_key_in_use", "409 idempotency_key_in_use answers (a request is running)."
)
IDEMPOTENCY_KEY_REUSED = Counter(
    "payments_idempotency_key_reused", "422 idempotency_key_reused answers (another request)."
)

# --- The gateway client's resilience counters (breaker, limiter, budget, gate) -----------------

BREAKER_TRANSITIONS = Counter(
    "payments_acquirer_breaker_transitions",
    "Circuit breaker transitions by endpoint group, counted once fleet-wide.",
    ["group", "from_state", "to_state"],
)
BREAKER_REFUSED = Counter(
    "payments_acquirer_breaker_refused",
    "Calls refused by the circuit breaker without being sent, by endpoint group.",
    ["group"],
)
BREAKER_LATE_RESULTS = Counter(
    "payments_acquirer_breaker_late_results",
    "Results of calls admitted in an older breaker generation (statistics only).",
    ["group"],
)
BREAKER_STORE_FALLBACK = Counter(
    "payments_acquirer_breaker_store_fallback",
    "Breaker operations decided by the local fallback because Redis was unreachable.",
    ["group"],
)
BREAKER_OPERATOR_ACTIONS = Counter(
    "payments_acquirer_breaker_operator_actions",
    "Operator overrides of a circuit breaker, by endpoint group and action.",
    ["group", "action"],
)
CIRCUIT_OPEN_CALLS = Counter(
    "payments_acquirer_circuit_open_calls",
    "Calls ended by the circuit breaker (refused before sending, or stopped when it opened).",
    ["operation"],
)
CONCURRENCY_LIMIT_CHANGES = Counter(
    "payments_acquirer_concurrency_limit_changes",
    "AIMD concurrency limit changes by quota scope and direction (down: rate limited).",
    ["scope", "direction"],
)
CONCURRENCY_WAITS = Counter(
    "payments_acquirer_concurrency_waits",
    "Concurrency slot requests that had to wait for a free slot, by quota scope.",
    ["scope"],
)
CONCURRENCY_REFUSED = Counter(
    "payments_acquirer_concurrency_refused",
    "Concurrency slot requests that found no free slot in time, by quota scope.",
    ["scope"],
)
CONCURRENCY_REFUSED_CALLS = Counter(
    "payments_acquirer_concurrency_refused_calls",
    "Calls that failed without sending for want of a concurrency slot, by operation.",
    ["operation"],
)
RETRY_BUDGET_EXHAUSTED = Counter(
    "payments_acquirer_retry_budget_exhausted",
    "Retries refused by the shared retry budget (the call failed at once), by operation.",
    ["operation"],
)
RATE_GATE_HITS = Counter(
    "payments_acquirer_rate_gate_hits",
    "Calls that found the quota scope's rate gate closed, by operation and result "
    "(waited, or refused without sending).",
    ["operation", "result"],
)
INVALID_HEADERS = Counter(
    "payments_acquirer_invalid_headers",
    "Retry-After or quota headers present but invalid (ignored: the backoff applied), by header.",
    ["header"],
)
STATE_STORE_FALLBACK = Counter(
    "payments_acquirer_state_store_fallback",
    "Shared-state operations served in memory because Redis was unreachable, by store.",
    ["store"],
)


class _Mapped(NamedTuple):
    """Where one of the gateway client's counters goes: the Prometheus counter, the client's
    labels it keeps (in order), and fixed labels added to them."""

    counter: Counter
    labels: tuple[str, ...]
    fixed: tuple[tuple[str, str], ...] = ()


# The gateway client's counter names (gateway_client/metrics.py, breaker.py, aimd.py) -> where
# they go. Names not listed here (deadline_stops, server_wait_too_long, ...) go to
# GATEWAY_CLIENT_EVENTS, so nothing the client counts is lost.
GATEWAY_COUNTERS: dict[str, _Mapped] = {
    "attempts": _Mapped(ACQUIRER_ATTEMPTS, ("operation", "outcome")),
    "retries": _Mapped(ACQUIRER_RETRIES, ("operation", "reason")),
    "breaker_transitions": _Mapped(BREAKER_TRANSITIONS, ("group", "from_state", "to_state")),
    "breaker_refused": _Mapped(BREAKER_REFUSED, ("group",)),
    "breaker_late_results": _Mapped(BREAKER_LATE_RESULTS, ("group",)),
    "breaker_store_fallback": _Mapped(BREAKER_STORE_FALLBACK, ("group",)),
    "breaker_operator_actions": _Mapped(BREAKER_OPERATOR_ACTIONS, ("group", "action")),
    "circuit_open": _Mapped(CIRCUIT_OPEN_CALLS, ("operation",)),
    "concurrency_limit_changes": _Mapped(CONCURRENCY_LIMIT_CHANGES, ("scope", "direction")),
    "concurrency_waits": _Mapped(CONCURRENCY_WAITS, ("scope",)),
    "concurrency_refused": _Mapped(CONCURRENCY_REFUSED, ("scope",)),
    "concurrency_refused_calls": _Mapped(CONCURRENCY_REFUSED_CALLS, ("operation",)),
    "budget_exhausted": _Mapped(RETRY_BUDGET_EXHAUSTED, ("operation",)),
    "gate_waits": _Mapped(RATE_GATE_HITS, ("operation",), (("result", "waited"),)),
    "gate_refused": _Mapped(RATE_GATE_HITS, ("operation",), (("result", "refused"),)),
    "invalid_header": _Mapped(INVALID_HEADERS, ("header",)),
    "store_fallback": _Mapped(STATE_STORE_FALLBACK, ("store",)),
}


def _safely(increment, *args: object) -> None:
    """Run one increment; a metrics failure is logged, never raised into payment code."""
    try:
        increment(*args)
    except Exception:  # metrics must never break a payment
        logger.exception("metrics increment failed")


def record_reconciliation(result: str) -> None:
    """Count one reconciliation of one payment with its ``Result`` value."""
    _safely(lambda: RECONCILIATION_OUTCOMES.labels(result=str(result)).inc())


def record_idempotency_replay() -> None:
    """Count one answer replayed from a stored idempotency key."""
    _safely(IDEMPOTENCY_REPLAYS.inc)


def record_idempotency_key_in_use() -> None:
    """Count one ``409 idempotency_key_in_use``."""
    _safely(IDEMPOTENCY_KEY_IN_USE.inc)


def record_idempotency_key_reused() -> None:
    """Count one ``422 idempotency_key_reused``."""
    _safely(IDEMPOTENCY_KEY_REUSED.inc)


class GatewayMetrics:
    """The gateway client's metrics hook (``increment(name, value=1, **labels)``) on Prometheus.

    Hand it to ``AcquirerClient(config, metrics=GatewayMetrics())``. Never raises.
    """

    def increment(self, name: str, value: int = 1, **labels: str) -> None:
        """Add ``value`` to the Prometheus counter mapped from the client's counter ``name``."""
        _safely(self._increment, name, value, labels)

    @staticmethod
    def _increment(name: str, value: int, labels: dict[str, str]) -> None:
        mapped = GATEWAY_COUNTERS.get(name)
        if mapped is None:
            GATEWAY_CLIENT_EVENTS.labels(name=name, operation=str(labels.get("operation", ""))).inc(
                value
            )
            return
        values = {label: str(labels.get(label, "")) for label in mapped.labels}
        mapped.counter.labels(**values, **dict(mapped.fixed)).inc(value)


# --- Gauges from PostgreSQL, computed at scrape time ----------------------------------------


class PaymentsCollector:
    """Scrape-time gauges from PostgreSQL; every query is an index probe or a catalog read.

    ``describe()`` runs no query, so registering the collector touches no database.
    """

    def describe(self) -> Iterable[Metric]:
        """The metric families (without samples), for the registry's name checks."""
        return list(self._families())

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "payments_unresolved",
            "Payments whose outcome is not final, by status (exact).",
            labels=["status"],
        )
        yield GaugeMetricFamily(
            "payments_oldest_unresolved_age_seconds",
            "Age of the oldest payment in this status (0 when there is none).",
            labels=["status"],
        )
        yield GaugeMetricFamily(
            "payments_by_status_estimated",
            "Payments by status, estimated from planner statistics (ANALYZE).",
            labels=["status"],
        )
        yield GaugeMetricFamily(
            "payments_collector_up", "1 when the scrape-time database queries succeeded."
        )

    def collect(self) -> Iterable[Metric]:
        """Run the queries; on a database error only ``payments_collector_up 0`` is exported."""
        unresolved, oldest, estimated, up = self._families()
        try:
            counts, oldest_at, estimates = self._query()
        except Exception:  # a scrape answers even when the database does not
            logger.exception("payments metrics collector failed")
            up.add_metric([], 0)
            return [up]
        now = timezone.now()
        for status in UNRESOLVED_STATUSES:
            unresolved.add_metric([status], counts.get(status, 0))
            created = oldest_at.get(status)
            oldest.add_metric(
                [status], max((now - created).total_seconds(), 0.0) if created else 0.0
            )
        for status in PaymentStatus.values:
            estimated.add_metric([status], estimates.get(status, 0.0))
        up.add_metric([], 1)
        return [unresolved, oldest, estimated, up]

    @staticmethod
    def _query() -> tuple[dict[str, int], dict[str, object], dict[str, float]]:
        unresolved = Payment.objects.filter(status__in=UNRESOLVED_STATUSES)
        counts = dict(
            unresolved.order_by()
            .values_list("status")
            .annotate(n=Count("pk"))
            .values_list("status", "n")
        )
        oldest_at = {
            status: Payment.objects.filter(status=status)
            .order_by()
            .aggregate(oldest=Min("created_at"))["oldest"]
            for status in UNRESOLVED_STATUSES
        }
        return counts, oldest_at, _estimated_by_status()


def _estimated_by_status() -> dict[str, float]:
    """Rows per status from ``pg_class.reltuples`` times ``pg_stats`` frequencies (no scan)."""
    table = Payment._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.reltuples, s.most_common_vals::text::text[], s.most_common_freqs"
            " FROM pg_class c LEFT JOIN pg_stats s ON s.schemaname = current_schema()"
            " AND s.tablename = c.relname AND s.attname = 'status'"
            " WHERE c.oid = to_regclass(%s)",
            [table],
        )
        row = cursor.fetchone()
    if row is None:
        return {}
    reltuples, values, freqs = row
    if not reltuples or reltuples < 0 or not values:  # never analysed yet
        return {}
    return {value: round(reltuples * freq) for value, freq in zip(values, freqs, strict=False)}


# --- Resilience state of the acquirer client, read at scrape time -------------------------------

#: Every state a breaker reports (gateway_client.breaker), exported one-hot per group.
BREAKER_STATES = ("closed", "open", "half_open", "forced_open", "disabled", "metrics_only")
#: Where the breaker state came from (``BreakerSnapshot.store``), exported one-hot.
STATE_STORES = ("redis", "fallback", "memory")


class ResilienceCollector:
    """Scrape-time gauges of the process's acquirer client: breaker state per endpoint group and
    the AIMD limit of its quota scope.

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
            "Circuit breaker state per endpoint group: 1 for the current state, 0 for the others.",
            labels=["group", "state"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_breaker_failure_rate_percent",
            "Failure rate over the breaker's buffered calls, percent (absent with none).",
            labels=["group"],
        )
        yield GaugeMetricFamily(
            "payments_acquirer_breaker_buffered_calls",
            "Results in the breaker's window (in half-open: the probe results).",
            labels=["group"],
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
            snapshots, limiter = self._read()
        except Exception:  # a scrape answers whatever the state store does
            logger.exception("resilience metrics collector failed")
            up.add_metric([], 0)
            return [up]
        stores = set()
        for group, snapshot in snapshots.items():
            for name in BREAKER_STATES:
                state.add_metric([group, name], 1 if snapshot.state == name else 0)
            if snapshot.failure_rate is not None:
                rate.add_metric([group], snapshot.failure_rate)
            buffered.add_metric([group], snapshot.buffered_calls)
            stores.add(snapshot.store)
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
        from payments.acquirer.client import acquirer_client  # it imports this module

        client = acquirer_client()
        return client.breakers.snapshot(), client.limiter.snapshot(client.scope)


_PAYMENTS_COLLECTOR = PaymentsCollector()
_RESILIENCE_COLLECTOR = ResilienceCollector()


def _scrape_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_PAYMENTS_COLLECTOR)
    registry.register(_RESILIENCE_COLLECTOR)
    return registry


_DATABASE_REGISTRY = _scrape_registry()


def _process_registry() -> CollectorRegistry:
    """The in-process metrics: the default registry, or every process's files (multiprocess)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: Prometheus text format, in-process metrics then the scrape-time gauges
    (database, acquirer resilience state).

    When ``settings.METRICS_BEARER_TOKEN`` is set, the scrape must send
    ``Authorization: Bearer <token>`` (401 otherwise). Keep ``/metrics`` off the public
    network either way: it tells how many payments are stuck.
    """
    token = getattr(settings, "METRICS_BEARER_TOKEN", "")
    if token:
        import hmac

        sent = request.META.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
            return HttpResponse(status=401, headers={"WWW-Authenticate": "Bearer"})
    started = time.monotonic()
    body = generate_latest(_process_registry()) + generate_latest(_DATABASE_REGISTRY)
    logger.debug("metrics rendered in %.3f s", time.monotonic() - started)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def worker_metrics_server_start(port: int, addr: str = "127.0.0.1") -> None:
    """Serve this process's counters (the Celery worker's) on ``http://addr:port/metrics``.

    With ``PROMETHEUS_MULTIPROC_DIR`` set, serves every process sharing that directory (the
    worker's pool children). Without the database gauges: the web's ``/metrics`` has those.
    """
    from prometheus_client import start_http_server

    start_http_server(port, addr=addr, registry=_process_registry())
