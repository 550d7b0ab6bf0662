"""
Adaptive concurrency against the sandbox acquirer in secondary-rate-limit mode (403
`secondary_rate_limit`, no quota headers): each refusal lowers the scope's concurrency limit
by AIMD, and once the limit is lifted, concurrent successes raise it back to the maximum.

The decrease is exact (one refusal per call, sequential calls); the recovery runs rounds of
`limit` simultaneous calls, each held 200 ms by the sandbox (`tok_slow_200`), so that the later
ones are sent with at least half the limit in flight, until the maximum is reached.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AimdConfig,
    AuthorizationRequest,
    RateLimitedError,
    RetryPolicy,
)
from tests.support.sandbox import SandboxProcess

MAX_LIMIT = 10


@pytest.fixture(scope="module")
def sandbox_process() -> Iterator[SandboxProcess]:
    with SandboxProcess.start() as process:
        yield process


@pytest.fixture
def sandbox(sandbox_process: SandboxProcess) -> Iterator[SandboxProcess]:
    sandbox_process.reset()
    yield sandbox_process
    sandbox_process.clear_conditions()


def authorization(token: str = "tok_visa") -> AuthorizationRequest:
    reference = f"pay_{uuid.uuid4().hex[:24]}"
    return AuthorizationRequest(
        amount=1050,
        currency="EUR",
        payment_method=token,
        payment_reference=reference,
        idempotency_key=f"authorize-{reference}",
    )


def concurrent_round(client: AcquirerClient, callers: int) -> list[bool]:
    """`callers` authorisations released at once, each held 200 ms by the sandbox."""
    start = threading.Barrier(callers)
    results: list[bool] = []

    def call() -> None:
        start.wait(10)
        results.append(client.authorize(authorization("tok_slow_200")).approved)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_secondary_limit_lowers_concurrency_and_successes_restore_it(
    sandbox: SandboxProcess,
) -> None:
    """Six 403 secondary limits: 10 -> 9 -> 8 -> 7 -> 6 -> 5 -> 4; limit lifted: back to 10."""
    sandbox.set_condition("rate_limit", limit=3, window_seconds=86400, mode="secondary")
    policy = RetryPolicy(max_attempts=1, concurrency_wait=5.0)  # a background sender's wait
    client = AcquirerClient(
        AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, name="sandbox"),
        policy=policy,
        limiter=AimdConfig(initial_limit=MAX_LIMIT, max_limit=MAX_LIMIT),
    )
    with client:
        for _ in range(3):
            assert client.authorize(authorization()).approved is True
        assert client.limiter.snapshot(client.scope).limit == MAX_LIMIT

        limits = []
        for _ in range(6):
            with pytest.raises(RateLimitedError) as refused:
                client.authorize(authorization())
            assert refused.value.status_code == 403
            limits.append(client.limiter.snapshot(client.scope).limit)
        assert limits == [9, 8, 7, 6, 5, 4]
        assert sandbox.stats()["requests_by_status"].get("403") == 6

        sandbox.clear_conditions()
        seen = [limits[-1]]
        for _ in range(20):
            limit = seen[-1]
            assert concurrent_round(client, limit) == [True] * limit
            seen.append(client.limiter.snapshot(client.scope).limit)
            if seen[-1] == MAX_LIMIT:
                break
        assert seen[-1] == MAX_LIMIT
        assert seen == sorted(seen)  # additive increase only: never down without a refusal
        snapshot = client.limiter.snapshot(client.scope)
        assert (snapshot.in_flight, snapshot.decreases) == (0, 6)
