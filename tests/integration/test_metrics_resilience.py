"""Resilience metrics on /metrics: the gateway client's breaker, limiter, budget and gate counters
with their labels (driven against the sandbox acquirer), and the scrape-time breaker state and
AIMD limit read from the process's acquirer client."""

from __future__ import annotations

import socket
import uuid

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AuthorizationRequest,
    GatewayError,
    RetryPolicy,
)
from payments.acquirer.client import acquirer_client
from payments.acquirer.collectors import BREAKER_STATES, STATE_STORES, ResilienceCollector
from payments.acquirer.metrics import GatewayMetrics

pytestmark = pytest.mark.django_db

GROUPS = ("authorize", "capture", "void", "refund", "lookup")


def scrape(client) -> dict[tuple[str, tuple], float]:
    """GET /metrics and return {(sample name, sorted labels): value}."""
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


#: Metrics without the ``acquirer`` label: the state store's, and the gauges per quota scope.
NOT_PER_ACQUIRER = {
    "payments_acquirer_state_store",
    "payments_acquirer_resilience_collector_up",
    "payments_acquirer_concurrency_limit",
    "payments_acquirer_concurrency_in_flight",
    "payments_acquirer_state_store_fallback_total",
    "payments_collector_up",
}


def _labelled(name: str, labels: dict[str, str]) -> dict[str, str]:
    """``labels`` with the suite's one acquirer (``ACQUIRER_NAME``) on a per-acquirer metric."""
    if name.startswith(("payments_acquirer_", "payments_gateway_")) and name not in (
        NOT_PER_ACQUIRER
    ):
        return {"acquirer": acquirer_client().config.name, **labels}
    return labels


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(_labelled(name, labels).items()))))


def counter(name: str, **labels: str) -> float:
    """A counter sample of this process's default registry (0 when not yet created)."""
    return REGISTRY.get_sample_value(name, _labelled(name, labels)) or 0.0


def authorize(token: str = "tok_visa") -> GatewayError | None:
    """One authorisation through the service's client; the error it raised, if any."""
    payment_id = f"pay_{uuid.uuid4().hex[:24]}"
    request = AuthorizationRequest(
        amount=1999,
        currency="EUR",
        payment_method=token,
        payment_reference=payment_id,
        idempotency_key=f"authorize-{payment_id}",
    )
    try:
        acquirer_client().authorize(request)
    except GatewayError as error:
        return error
    return None


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def single_attempt(settings) -> None:
    settings.ACQUIRER_RETRY_MAX_ATTEMPTS = 1


@pytest.fixture
def small_breaker(settings, single_attempt) -> None:
    """Config C (docs/reference/circuit-breaker.md: window 10, minimum 5, 50 %), kept open."""
    settings.ACQUIRER_BREAKER_WINDOW_SIZE = 10
    settings.ACQUIRER_BREAKER_MINIMUM_CALLS = 5
    settings.ACQUIRER_BREAKER_FAILURE_RATE_THRESHOLD = 50.0
    settings.ACQUIRER_BREAKER_OPEN_SECONDS = 60.0
    settings.ACQUIRER_BREAKER_HALF_OPEN_PERMITS = 3


@pytest.fixture
def open_breaker(sandbox, small_breaker) -> None:
    """An acquirer outage (503) has opened the authorize breaker."""
    sandbox.set_condition("outage", duration_seconds=3600, failure=503)
    for _ in range(5):
        authorize()
    assert acquirer_client().breaker_state("authorize").state == "open"


# --- counters driven against the sandbox ---------------------------------------------------


def test_breaker_transition_is_counted_with_group_and_states(client, sandbox, small_breaker):
    """An outage opening the breaker adds 1 to transitions{authorize, closed -> open}."""
    labels = {"group": "authorize", "from_state": "closed", "to_state": "open"}
    name = "payments_acquirer_breaker_transitions_total"
    before = sample(scrape(client), name, **labels) or 0
    sandbox.set_condition("outage", duration_seconds=3600, failure=503)
    for _ in range(5):
        authorize()
    assert sample(scrape(client), name, **labels) == before + 1


def test_refused_call_is_counted_by_the_breaker_per_group(client, open_breaker):
    """A call refused by the open breaker: breaker_refused{group="authorize"} + 1."""
    name = "payments_acquirer_breaker_refused_total"
    before = sample(scrape(client), name, group="authorize") or 0
    authorize()
    assert sample(scrape(client), name, group="authorize") == before + 1


def test_call_ended_by_the_breaker_is_counted_per_operation(client, open_breaker):
    """The same refusal counts one call in circuit_open_calls{operation="authorize"}."""
    name = "payments_acquirer_circuit_open_calls_total"
    before = sample(scrape(client), name, operation="authorize") or 0
    authorize()
    assert sample(scrape(client), name, operation="authorize") == before + 1


def test_breaker_state_is_exported_per_group(client, open_breaker):
    """payments_acquirer_breaker_state is 1 for open on authorize and closed on the other groups."""
    samples = scrape(client)
    states = {
        (group, state): sample(samples, "payments_acquirer_breaker_state", group=group, state=state)
        for group in GROUPS
        for state in BREAKER_STATES
    }
    assert {key for key, value in states.items() if value == 1} == {
        ("authorize", "open"),
        ("capture", "closed"),
        ("void", "closed"),
        ("refund", "closed"),
        ("lookup", "closed"),
    }
    assert all(value == 0 for key, value in states.items() if key[1] not in ("open", "closed"))


def test_failure_rate_is_exported_while_closed(client, sandbox, single_attempt):
    """Two failed and two approved calls in a closed breaker: 50 % over 4 buffered calls."""
    for token in ("tok_fail_503_5", "tok_fail_503_5", "tok_visa", "tok_visa"):
        authorize(token)
    samples = scrape(client)
    assert sample(samples, "payments_acquirer_breaker_buffered_calls", group="authorize") == 4
    rate = sample(samples, "payments_acquirer_breaker_failure_rate_percent", group="authorize")
    assert rate == 50.0


def test_operator_action_is_counted_with_group_and_action(client, sandbox):
    """A forced open by an operator: breaker_operator_actions{lookup, force_open} + 1."""
    name = "payments_acquirer_breaker_operator_actions_total"
    labels = {"group": "lookup", "action": "force_open"}
    before = sample(scrape(client), name, **labels) or 0
    acquirer_client().breakers.force_open("lookup", actor="test", reason="drill")
    assert sample(scrape(client), name, **labels) == before + 1


def test_rate_gate_refusal_is_counted(client, sandbox, single_attempt):
    """A 503 with Retry-After 120 closes the gate; the next call is refused without sending:
    rate_gate_hits{authorize, refused} + 1."""
    name = "payments_acquirer_rate_gate_hits_total"
    labels = {"operation": "authorize", "result": "refused"}
    before = sample(scrape(client), name, **labels) or 0
    sandbox.set_condition("outage", duration_seconds=3600, failure=503, retry_after=120)
    authorize()
    sent = sandbox.stats()["requests_total"]
    authorize()
    assert sandbox.stats()["requests_total"] == sent
    assert sample(scrape(client), name, **labels) == before + 1


def test_rate_gate_wait_is_counted(client, sandbox, single_attempt):
    """A 503 with Retry-After 1 closes the gate; the next call waits for it:
    rate_gate_hits{authorize, waited} + 1."""
    name = "payments_acquirer_rate_gate_hits_total"
    labels = {"operation": "authorize", "result": "waited"}
    before = sample(scrape(client), name, **labels) or 0
    sandbox.set_condition("outage", duration_seconds=3600, failure=503, retry_after=1)
    authorize()
    authorize()
    assert sample(scrape(client), name, **labels) == before + 1


def test_retry_budget_exhaustion_is_counted(client, sandbox, settings):
    """With an empty budget (no reserve, no deposits) a 503 is not retried:
    retry_budget_exhausted{authorize} + 1."""
    settings.ACQUIRER_RETRY_BUDGET_MIN_PER_SECOND = 0.0
    settings.ACQUIRER_RETRY_BUDGET_PERCENT = 0.0
    name = "payments_acquirer_retry_budget_exhausted_total"
    before = sample(scrape(client), name, operation="authorize") or 0
    sandbox.set_condition("outage", duration_seconds=3600, failure=503)
    authorize()
    assert sample(scrape(client), name, operation="authorize") == before + 1


def test_rate_limit_lowers_the_concurrency_limit_counted_by_scope(client, sandbox):
    """A 429 drops the scope's AIMD limit: concurrency_limit_changes{scope, down} + 1."""
    labels = {"scope": acquirer_client().scope, "direction": "down"}
    name = "payments_acquirer_concurrency_limit_changes_total"
    before = sample(scrape(client), name, **labels) or 0
    assert authorize("tok_ratelimit_0") is None  # the retry is approved
    assert sample(scrape(client), name, **labels) == before + 1


def test_concurrency_limit_is_exported_per_scope(client, sandbox):
    """After a 429 the limit gauge of the scope reads 90 (100 * 0.9), nothing in flight."""
    assert authorize("tok_ratelimit_0") is None
    samples = scrape(client)
    scope = acquirer_client().scope
    assert sample(samples, "payments_acquirer_concurrency_limit", scope=scope) == 90
    assert sample(samples, "payments_acquirer_concurrency_in_flight", scope=scope) == 0


def test_no_free_slot_is_counted_by_scope_and_operation(client, sandbox, settings):
    """Limit 1 and the slot held: the call waits, is refused and fails without sending."""
    settings.ACQUIRER_CONCURRENCY_INITIAL_LIMIT = 1
    settings.ACQUIRER_CONCURRENCY_MAX_LIMIT = 1
    service = acquirer_client()
    scope = service.scope
    names = {
        ("payments_acquirer_concurrency_waits_total", ("scope", scope)),
        ("payments_acquirer_concurrency_refused_total", ("scope", scope)),
        ("payments_acquirer_concurrency_refused_calls_total", ("operation", "authorize")),
    }
    before = {name: counter(name, **dict([label])) for name, label in names}
    assert service.limiter.try_acquire(scope) is not None
    assert authorize() is not None
    assert sandbox.stats()["requests_total"] == 0
    assert {name: counter(name, **dict([label])) for name, label in names} == {
        name: value + 1 for name, value in before.items()
    }


def test_invalid_retry_after_is_counted_with_its_header(client):
    """A 503 whose Retry-After is not a number or an HTTP-date: invalid_headers{retry-after}."""

    def unavailable(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "soon"}, json={"code": "down"})

    gateway = AcquirerClient(
        AcquirerConfig(base_url="http://acquirer.test", api_key="k", name="mock"),
        transport=httpx.MockTransport(unavailable),
        policy=RetryPolicy(max_attempts=1),
        metrics=GatewayMetrics("mock"),
    )
    name = "payments_acquirer_invalid_headers_total"
    before = sample(scrape(client), name, acquirer="mock", header="retry-after") or 0
    with pytest.raises(GatewayError):
        gateway.lookup("pay_1")
    assert sample(scrape(client), name, acquirer="mock", header="retry-after") == before + 1


# --- the mapping of every client counter ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "labels", "metric", "exported"),
    [
        (
            "breaker_transitions",
            {"group": "lookup", "from_state": "half_open", "to_state": "closed"},
            "payments_acquirer_breaker_transitions_total",
            {"group": "lookup", "from_state": "half_open", "to_state": "closed"},
        ),
        (
            "breaker_refused",
            {"group": "lookup"},
            "payments_acquirer_breaker_refused_total",
            {"group": "lookup"},
        ),
        (
            "breaker_late_results",
            {"group": "authorize"},
            "payments_acquirer_breaker_late_results_total",
            {"group": "authorize"},
        ),
        (
            "breaker_store_fallback",
            {"group": "authorize"},
            "payments_acquirer_breaker_store_fallback_total",
            {"group": "authorize"},
        ),
        (
            "breaker_operator_actions",
            {"group": "authorize", "action": "reset"},
            "payments_acquirer_breaker_operator_actions_total",
            {"group": "authorize", "action": "reset"},
        ),
        (
            "circuit_open",
            {"operation": "lookup"},
            "payments_acquirer_circuit_open_calls_total",
            {"operation": "lookup"},
        ),
        (
            "concurrency_limit_changes",
            {"scope": "s:1", "direction": "up"},
            "payments_acquirer_concurrency_limit_changes_total",
            {"scope": "s:1", "direction": "up"},
        ),
        (
            "concurrency_waits",
            {"scope": "s:1"},
            "payments_acquirer_concurrency_waits_total",
            {"scope": "s:1"},
        ),
        (
            "concurrency_refused",
            {"scope": "s:1"},
            "payments_acquirer_concurrency_refused_total",
            {"scope": "s:1"},
        ),
        (
            "concurrency_refused_calls",
            {"operation": "lookup"},
            "payments_acquirer_concurrency_refused_calls_total",
            {"operation": "lookup"},
        ),
        (
            "budget_exhausted",
            {"operation": "lookup"},
            "payments_acquirer_retry_budget_exhausted_total",
            {"operation": "lookup"},
        ),
        (
            "gate_waits",
            {"operation": "lookup"},
            "payments_acquirer_rate_gate_hits_total",
            {"operation": "lookup", "result": "waited"},
        ),
        (
            "gate_refused",
            {"operation": "lookup"},
            "payments_acquirer_rate_gate_hits_total",
            {"operation": "lookup", "result": "refused"},
        ),
        (
            "invalid_header",
            {"header": "ratelimit"},
            "payments_acquirer_invalid_headers_total",
            {"header": "ratelimit"},
        ),
        (
            "store_fallback",
            {"store": "redis"},
            "payments_acquirer_state_store_fallback_total",
            {"store": "redis"},
        ),
    ],
)
def test_each_client_counter_has_its_metric_and_labels(name, labels, metric, exported):
    """Every resilience counter of the gateway client lands in its own labelled metric."""
    before = counter(metric, **exported)
    GatewayMetrics(acquirer_client().config.name).increment(name, **labels)
    assert counter(metric, **exported) == before + 1


# --- the scrape-time collector -------------------------------------------------------------


def test_state_store_gauge_says_memory_without_redis(client):
    """No ACQUIRER_STATE_REDIS_URL: payments_acquirer_state_store{store="memory"} is 1."""
    samples = scrape(client)
    stores = {s: sample(samples, "payments_acquirer_state_store", store=s) for s in STATE_STORES}
    assert stores == {"redis": 0, "fallback": 0, "memory": 1}


def test_scrape_answers_when_redis_is_unreachable(client, settings):
    """Redis down: 200, the breaker state from this process's fallback, and it says so."""
    settings.ACQUIRER_STATE_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    samples = scrape(client)
    assert sample(samples, "payments_acquirer_state_store", store="fallback") == 1
    assert sample(samples, "payments_acquirer_resilience_collector_up") == 1
    assert sample(samples, "payments_acquirer_breaker_state", group="authorize", state="closed")


def test_collector_error_exports_up_zero_and_keeps_the_scrape(client, monkeypatch):
    """A failing read: resilience_collector_up 0, the database gauges still served."""

    def broken():
        raise RuntimeError("state store exploded")

    monkeypatch.setattr(ResilienceCollector, "_read", staticmethod(broken))
    samples = scrape(client)
    assert sample(samples, "payments_acquirer_resilience_collector_up") == 0
    assert sample(samples, "payments_collector_up") == 1
    assert not any(name == "payments_acquirer_breaker_state" for name, _ in samples)


def test_scrape_reads_each_breaker_and_the_limiter_once_and_counts_nothing(client, monkeypatch):
    """One read per breaker group and one limiter read per scrape; nothing recorded."""
    service = acquirer_client()
    service.breakers.force_open("authorize", actor="test", reason="drill")
    calls = []
    run = service.store.run

    def counting(script, keys, args):
        calls.append((script.name, args[0]))
        return run(script, keys, args)

    monkeypatch.setattr(service.store, "run", counting)
    scrape(client)
    assert sorted(calls) == [("aimd_limiter", "read")] + [("circuit_breaker", "read")] * len(GROUPS)
    assert service.breaker_state("authorize").refused_calls == 0
