"""
The Redis state store on a real Redis (REDIS_URL or the embedded server): the Lua scripts mean
what the Python ones mean, the gate is shared by two OS processes, and an unreachable Redis
falls back to memory.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway_client import ManualClock, RedisStore
from resilience.budget import RetryBudget
from resilience.gate import RateGate
from resilience.metrics import CounterMetrics
from tests.support.redis import suite_redis_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh key namespace, deleted afterwards."""
    name = f"test_gateway_{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(suite_redis_url())
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)


def store(namespace: str, clock: ManualClock | None = None, **kwargs: object) -> RedisStore:
    return RedisStore.from_url(
        suite_redis_url(),
        namespace=namespace,
        clock=clock.monotonic if clock is not None else None,
        **kwargs,  # type: ignore[arg-type]
    )


def test_gate_script_counts_down_and_never_moves_earlier(namespace: str) -> None:
    """On Redis, the gate closes, counts down on the given clock and never reopens early."""
    clock = ManualClock(start=1000.0)
    gate = RateGate(store(namespace, clock))
    assert gate.remaining("acme:abc") == 0.0
    assert gate.close("acme:abc", 30) == 30.0
    assert gate.close("acme:abc", 5) == 30.0
    clock.advance(10)
    assert gate.remaining("acme:abc") == pytest.approx(20.0)
    clock.advance(20)
    assert gate.remaining("acme:abc") == 0.0


def test_gate_uses_the_redis_clock_by_default(namespace: str) -> None:
    """Without an injected clock, the gate's instant is on the Redis server's TIME."""
    gate = RateGate(store(namespace))
    gate.close("s", 2.0)
    assert 1.0 < gate.remaining("s") <= 2.0


def test_gate_key_expires_after_the_wait(namespace: str) -> None:
    """The gate's key carries a TTL, so closed gates do not accumulate in Redis."""
    RateGate(store(namespace)).close("s", 3.0)
    ttl = redis.Redis.from_url(suite_redis_url()).pttl(f"{namespace}:gate:s")
    assert 3000 < ttl <= 4000


def test_budget_script_reserve_is_100_retries(namespace: str) -> None:
    """Finagle defaults on Redis: after 10 s without traffic, exactly 100 retries are granted."""
    clock = ManualClock(start=5000.0)
    budget = RetryBudget(store(namespace, clock), "acquirer")
    clock.advance(10)
    assert sum(budget.try_withdraw()[0] for _ in range(130)) == 100


def test_budget_script_deposits_ten_percent(namespace: str) -> None:
    """On Redis, 50 first attempts earn 5 retries on top of the reserve."""
    clock = ManualClock(start=5000.0)
    budget = RetryBudget(store(namespace, clock), "acquirer", min_retries_per_second=1)
    for _ in range(50):
        budget.record_request()
    assert sum(budget.try_withdraw()[0] for _ in range(30)) == 15


def test_budget_script_window_slides(namespace: str) -> None:
    """On Redis, withdrawals expire after ttl and the reserve comes back."""
    clock = ManualClock(start=5000.0)
    budget = RetryBudget(store(namespace, clock), "acquirer", min_retries_per_second=1)
    assert sum(budget.try_withdraw()[0] for _ in range(20)) == 10
    clock.advance(10)
    assert budget.state().retries_available == 10


def test_budget_is_shared_by_two_connections(namespace: str) -> None:
    """Two stores (two connection pools) on one namespace share one budget."""
    clock = ManualClock(start=5000.0)
    first = RetryBudget(store(namespace, clock), "acq", min_retries_per_second=0.2)
    second = RetryBudget(store(namespace, clock), "acq", min_retries_per_second=0.2)
    assert first.try_withdraw()[0] and second.try_withdraw()[0]
    assert first.try_withdraw()[0] is False


PROCESS = textwrap.dedent(
    """
    import json, sys
    import httpx
    from gateway_client import (AcquirerClient, AcquirerConfig, AuthorizationRequest,
                                GatewayError, RedisStore)

    url, namespace, status, retry_after = sys.argv[1:5]
    sent = []

    def handler(request):
        sent.append(request.url.path)
        headers = {"Retry-After": retry_after} if retry_after != "-" else {}
        body = {"id": "ch_1", "status": "approved", "decline_code": None, "amount": 1000,
                "currency": "EUR", "reference": "pay_1", "created_at": "2026-11-29T17:00:00Z"}
        return httpx.Response(int(status), json=body, headers=headers)

    client = AcquirerClient(
        AcquirerConfig(base_url="https://acquirer.test", api_key="sk_shared_key", name="acme"),
        transport=httpx.MockTransport(handler),
        store=RedisStore.from_url(url, namespace=namespace),
    )
    request = AuthorizationRequest(amount=1000, currency="EUR", payment_method="tok_visa",
                                   payment_reference="pay_1", idempotency_key="authorize-pay_1")
    try:
        client.authorize(request)
        result = {"error": None}
    except GatewayError as error:
        result = {"error": type(error).__name__, "retry_after": getattr(error, "retry_after", None),
                  "attempts": error.attempts, "source": getattr(error, "wait_source", None)}
    result["sent"] = len(sent)
    print(json.dumps(result))
    """
)


def run_process(namespace: str, status: int, retry_after: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROCESS, suite_redis_url(), namespace, str(status), retry_after],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_gate_is_shared_by_two_os_processes(namespace: str) -> None:
    """Process 1 gets 429 Retry-After: 30; process 2 then fails fast without sending."""
    first = run_process(namespace, 429, "30")
    assert first == {
        "error": "RateLimitedError",
        "retry_after": 30.0,
        "attempts": 1,
        "source": "retry-after",
        "sent": 1,
    }
    second = run_process(namespace, 201, "-")
    assert second["error"] == "RateLimitedError"
    assert second["source"] == "gate"
    assert (second["attempts"], second["sent"]) == (0, 0)
    assert 25.0 < float(second["retry_after"]) <= 30.0  # type: ignore[arg-type]


def test_unreachable_redis_falls_back_to_memory() -> None:
    """Redis on a dead port: the gate still works in memory, the metric counts, calls stay fast."""
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        metrics = CounterMetrics()
        fallback_store = RedisStore.from_url(
            f"redis://127.0.0.1:{dead.getsockname()[1]}/0", metrics=metrics
        )
        gate = RateGate(fallback_store)
        gate.close("s", 10)
        assert 9.0 < gate.remaining("s") <= 10.0
    assert fallback_store.using_fallback is True
    assert metrics.get("store_fallback", store="redis") == 2
