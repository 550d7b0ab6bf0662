"""The gateway client's counters on Prometheus: :class:`GatewayMetrics` is the client's metrics
hook (``increment(name, value=1, **labels)``), handed to ``AcquirerClient`` and ``RedisStore``
by :mod:`payments.acquirer.client`.

An increment only adds to an in-memory value (or to the ``PROMETHEUS_MULTIPROC_DIR`` files when
several processes share one exposition): no network call, no database write, and an exception
inside it is logged, never raised, so it can never change the outcome of a payment. The
scrape-time gauges of the client's shared state are :mod:`payments.acquirer.collectors`; the
``/metrics`` view is :mod:`payments.monitoring.views`.

Counters (labels in braces), by the gateway client's counter name (:data:`GATEWAY_COUNTERS`);
every one but the state store's also carries ``acquirer``, the configured acquirer's name
(``ACQUIRERS``), so each acquirer's attempts, retries and breakers are told apart:

* ``payments_acquirer_attempts_total{operation,outcome}``: HTTP requests sent to the acquirer
  (outcome ``ok`` or the error class).
* ``payments_acquirer_retries_total{operation,reason}``: retries the gateway client started.
* ``payments_gateway_client_events_total{name,operation}``: any other gateway client counter.
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
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from prometheus_client import Counter

__all__ = ["GATEWAY_COUNTERS", "GatewayMetrics"]

logger = logging.getLogger(__name__)

# --- The gateway client's calls ----------------------------------------------------------------

ACQUIRER_ATTEMPTS = Counter(
    "payments_acquirer_attempts",
    "HTTP requests sent to the acquirer, by operation and outcome (ok or the error class).",
    ["acquirer", "operation", "outcome"],
)
ACQUIRER_RETRIES = Counter(
    "payments_acquirer_retries",
    "Retries started by the gateway client, by operation and the error that caused them.",
    ["acquirer", "operation", "reason"],
)
GATEWAY_CLIENT_EVENTS = Counter(
    "payments_gateway_client_events",
    "Other counters of the gateway client (gate waits, deadline stops, invalid headers ...).",
    ["acquirer", "name", "operation"],
)

# --- The gateway client's resilience counters (breaker, limiter, budget, gate) -----------------

BREAKER_TRANSITIONS = Counter(
    "payments_acquirer_breaker_transitions",
    "Circuit breaker transitions by endpoint group, counted once fleet-wide.",
    ["acquirer", "group", "from_state", "to_state"],
)
BREAKER_REFUSED = Counter(
    "payments_acquirer_breaker_refused",
    "Calls refused by the circuit breaker without being sent, by endpoint group.",
    ["acquirer", "group"],
)
BREAKER_LATE_RESULTS = Counter(
    "payments_acquirer_breaker_late_results",
    "Results of calls admitted in an older breaker generation (statistics only).",
    ["acquirer", "group"],
)
BREAKER_STORE_FALLBACK = Counter(
    "payments_acquirer_breaker_store_fallback",
    "Breaker operations decided by the local fallback because Redis was unreachable.",
    ["acquirer", "group"],
)
BREAKER_OPERATOR_ACTIONS = Counter(
    "payments_acquirer_breaker_operator_actions",
    "Operator overrides of a circuit breaker, by endpoint group and action.",
    ["acquirer", "group", "action"],
)
CIRCUIT_OPEN_CALLS = Counter(
    "payments_acquirer_circuit_open_calls",
    "Calls ended by the circuit breaker (refused before sending, or stopped when it opened).",
    ["acquirer", "operation"],
)
CONCURRENCY_LIMIT_CHANGES = Counter(
    "payments_acquirer_concurrency_limit_changes",
    "AIMD concurrency limit changes by quota scope and direction (down: rate limited).",
    ["acquirer", "scope", "direction"],
)
CONCURRENCY_WAITS = Counter(
    "payments_acquirer_concurrency_waits",
    "Concurrency slot requests that had to wait for a free slot, by quota scope.",
    ["acquirer", "scope"],
)
CONCURRENCY_REFUSED = Counter(
    "payments_acquirer_concurrency_refused",
    "Concurrency slot requests that found no free slot in time, by quota scope.",
    ["acquirer", "scope"],
)
CONCURRENCY_REFUSED_CALLS = Counter(
    "payments_acquirer_concurrency_refused_calls",
    "Calls that failed without sending for want of a concurrency slot, by operation.",
    ["acquirer", "operation"],
)
RETRY_BUDGET_EXHAUSTED = Counter(
    "payments_acquirer_retry_budget_exhausted",
    "Retries refused by the shared retry budget (the call failed at once), by operation.",
    ["acquirer", "operation"],
)
RATE_GATE_HITS = Counter(
    "payments_acquirer_rate_gate_hits",
    "Calls that found the quota scope's rate gate closed, by operation and result "
    "(waited, or refused without sending).",
    ["acquirer", "operation", "result"],
)
INVALID_HEADERS = Counter(
    "payments_acquirer_invalid_headers",
    "Retry-After or quota headers present but invalid (ignored: the backoff applied), by header.",
    ["acquirer", "header"],
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


# The gateway client's counter names (its retry loop; resilience/breaker.py, aimd.py) -> where
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


class GatewayMetrics:
    """The gateway client's metrics hook (``increment(name, value=1, **labels)``) on Prometheus,
    labelled with the ``acquirer``'s name (a configured acquirer's; "" for the state store's
    own counters, which no acquirer owns).

    Hand it to ``AcquirerClient(config, metrics=GatewayMetrics(config.name))``. Never raises.
    """

    def __init__(self, acquirer: str = "") -> None:
        self.acquirer = acquirer

    def increment(self, name: str, value: int = 1, **labels: str) -> None:
        """Add ``value`` to the Prometheus counter mapped from the client's counter ``name``."""
        try:
            self._increment(name, value, labels)
        except Exception:  # metrics must never break a payment
            logger.exception("gateway metrics increment failed")

    def _increment(self, name: str, value: int, labels: dict[str, str]) -> None:
        mapped = GATEWAY_COUNTERS.get(name)
        if mapped is None:
            GATEWAY_CLIENT_EVENTS.labels(
                acquirer=self.acquirer, name=name, operation=str(labels.get("operation", ""))
            ).inc(value)
            return
        values = {label: str(labels.get(label, "")) for label in mapped.labels}
        if mapped.counter is not STATE_STORE_FALLBACK:
            values["acquirer"] = self.acquirer
        mapped.counter.labels(**values, **dict(mapped.fixed)).inc(value)
