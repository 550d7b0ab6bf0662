"""
The circuit breaker against the sandbox acquirer over real HTTP: an acquirer-wide outage
(set through the sandbox's control API) opens it, later calls are refused in-process without
a single acquirer request, and when the outage ends the breaker closes through probes and
calls succeed again, in the same client (no restart).

The open period is on the client's ManualClock (the test moves it 30 s instead of sleeping);
the sandbox's own stats count what reached the acquirer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AcquirerUnavailableError,
    AuthorizationRequest,
    CircuitOpenError,
    ConnectionLostError,
    ManualClock,
    RetryPolicy,
)
from resilience.metrics import CounterMetrics
from tests.lib.test_gateway_breaker_vectors import CONFIG_C
from tests.support.sandbox import SandboxProcess


@pytest.fixture(scope="module")
def sandbox_process() -> Iterator[SandboxProcess]:
    with SandboxProcess.start() as process:
        yield process


@pytest.fixture
def sandbox(sandbox_process: SandboxProcess) -> Iterator[SandboxProcess]:
    sandbox_process.reset()
    yield sandbox_process
    sandbox_process.clear_conditions()


def make_client(
    sandbox: SandboxProcess, clock: ManualClock, policy: RetryPolicy | None = None
) -> AcquirerClient:
    """Config C on both groups, the test's clock; the default policy (3 attempts)."""
    return AcquirerClient(
        AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, name="sandbox"),
        policy=policy,
        clock=clock,
        sleep=clock.sleep,
        breakers={"authorize": CONFIG_C, "lookup": CONFIG_C},
        metrics=CounterMetrics(),
    )


def authorization(token: str = "tok_visa") -> AuthorizationRequest:
    reference = f"pay_{uuid.uuid4().hex[:24]}"
    return AuthorizationRequest(
        amount=1050,
        currency="EUR",
        payment_method=token,
        payment_reference=reference,
        idempotency_key=f"authorize-{reference}",
    )


def arrivals(sandbox: SandboxProcess) -> int:
    """Requests that reached the acquirer API (counted on arrival, before the answer)."""
    return sum(sandbox.stats()["arrivals_per_100ms"].values())


def charges_requests(sandbox: SandboxProcess) -> int:
    """POST /charges requests that arrived (each carries an idempotency key)."""
    return sum(sandbox.stats()["requests_by_idempotency_key"].values())


def test_outage_opens_the_breaker_then_probes_close_it_without_a_restart(
    sandbox: SandboxProcess,
) -> None:
    """503 outage opens it, refused calls send nothing; outage over: probes close it, calls pass."""
    sandbox.set_condition("outage", duration_seconds=600, failure=503)
    clock = ManualClock()
    with make_client(sandbox, clock) as client:
        with pytest.raises(AcquirerUnavailableError) as first:
            client.authorize(authorization())
        assert first.value.attempts == 3
        with pytest.raises(CircuitOpenError) as second:
            client.authorize(authorization())
        assert second.value.attempts == 2  # the 5th failure opened it: no 3rd attempt
        assert charges_requests(sandbox) == 5

        for _ in range(20):
            with pytest.raises(CircuitOpenError) as refused:
                client.authorize(authorization())
            assert refused.value.attempts == 0
        assert charges_requests(sandbox) == 5
        assert client.breaker_state("authorize").refused_calls == 20

        sandbox.clear_conditions()  # the acquirer is back
        clock.advance(30)
        assert [client.authorize(authorization()).approved for _ in range(3)] == [True] * 3
        assert client.breaker_state("authorize").state == "closed"
        assert [client.authorize(authorization()).approved for _ in range(5)] == [True] * 5
        assert charges_requests(sandbox) == 5 + 3 + 5
        metrics = client.metrics
        assert metrics.get("breaker_transitions", to_state="open") == 1  # type: ignore[attr-defined]
        assert metrics.get("breaker_transitions", to_state="closed") == 1  # type: ignore[attr-defined]


def test_probes_into_a_continuing_outage_open_it_again(sandbox: SandboxProcess) -> None:
    """Still down after 30 s: the three probes fail, the breaker opens for another 30 s."""
    sandbox.set_condition("outage", duration_seconds=600, failure=503)
    clock = ManualClock()
    with make_client(sandbox, clock, RetryPolicy(max_attempts=1)) as client:
        for _ in range(5):
            with pytest.raises(AcquirerUnavailableError):
                client.authorize(authorization())
        clock.advance(30)
        for _ in range(3):
            with pytest.raises(AcquirerUnavailableError):
                client.authorize(authorization())
        with pytest.raises(CircuitOpenError) as refused:
            client.authorize(authorization())
        assert refused.value.retry_after == 30.0
    assert charges_requests(sandbox) == 8


def test_connection_resets_open_the_breaker(sandbox: SandboxProcess) -> None:
    """An outage that resets connections: 5 lost connections open it (ambiguous, but failures)."""
    sandbox.set_condition("outage", duration_seconds=600, failure="reset")
    clock = ManualClock()
    with make_client(sandbox, clock, RetryPolicy(max_attempts=1)) as client:
        for _ in range(5):
            with pytest.raises(ConnectionLostError):
                client.authorize(authorization())
        with pytest.raises(CircuitOpenError):
            client.authorize(authorization())
    assert arrivals(sandbox) == 5


def test_lookups_keep_working_while_authorisations_are_refused(sandbox: SandboxProcess) -> None:
    """An outage of POST /charges only: authorize opens; GET /charges look-ups still answer."""
    sandbox.set_condition("outage", duration_seconds=600, failure=503, endpoints=["POST /charges"])
    clock = ManualClock()
    with make_client(sandbox, clock, RetryPolicy(max_attempts=1)) as client:
        for _ in range(5):
            with pytest.raises(AcquirerUnavailableError):
                client.authorize(authorization())
        with pytest.raises(CircuitOpenError):
            client.authorize(authorization())
        for _ in range(5):
            assert client.lookup(f"pay_{uuid.uuid4().hex[:24]}") == []
        assert client.breaker_state("lookup").state == "closed"
        assert client.admits("authorize")[0] is False
        assert client.admits("lookup") == (True, 0.0)
    assert (charges_requests(sandbox), arrivals(sandbox)) == (5, 5 + 5)
