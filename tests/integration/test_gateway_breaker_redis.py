"""
The circuit breaker and the AIMD limiter on a real Redis (REDIS_URL or the embedded server).

- docs/reference/circuit-breaker.md vectors: the tests of tests/lib/test_gateway_breaker_vectors.py
  with the `make_store` fixture overridden to a RedisStore (injected ManualClock), and the AIMD
  vectors of tests/lib/test_gateway_aimd.py the same way;
- the Lua scripts mean what their Python twins mean: the same random operation sequences give
  the same answers on both backends;
- without an injected clock the breaker runs on the Redis server's TIME;
- Redis unreachable (a closed port): a local breaker with the same config takes over, logged
  and counted, and the store outage is never recorded as an acquirer failure.

Every test uses its own key namespace, deleted afterwards.
"""

from __future__ import annotations

import logging
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
import redis

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AimdConfig,
    AuthorizationRequest,
    BreakerConfig,
    CircuitOpenError,
    ManualClock,
    MemoryStore,
    RedisStore,
    RetryPolicy,
    StateStore,
)
from resilience.aimd import DROP, IGNORE, AimdLimiter
from resilience.aimd import SUCCESS as SLOT_SUCCESS
from resilience.breaker import FAILURE, IGNORED, SUCCESS, CircuitBreaker
from resilience.metrics import CounterMetrics
from tests.lib.test_gateway_aimd import (  # noqa: F401 - collected here, on Redis
    test_aimd_slot_of_a_killed_caller_expires_with_its_lease,
    test_aimd_vector_decrease_1_stays_1,
    test_aimd_vector_decrease_2_to_1,
    test_aimd_vector_decrease_10_to_9,
    test_aimd_vector_increase_9_stays_9_with_4_in_flight,
    test_aimd_vector_increase_9_to_10_with_5_in_flight,
)
from tests.lib.test_gateway_breaker_vectors import (  # noqa: F401 - collected here, on Redis
    CONFIG_C,
    harness,
    test_vector_1_four_failures_stay_closed,
    test_vector_2_five_failures_open_and_the_sixth_is_refused,
    test_vector_3_forty_percent_stays_closed_fifty_percent_opens,
    test_vector_4_as_written_opens_at_the_fifth_call_under_config_c,
    test_vector_4_the_window_slides_over_the_last_ten,
    test_vector_5_probes_are_admitted_at_exactly_the_open_duration,
    test_vector_6_half_open_admits_three_of_four_concurrent_callers,
    test_vector_7_failed_probes_reopen_with_a_new_wait,
    test_vector_7_passing_probes_close_with_an_empty_window,
    test_vector_8_declines_are_successes,
    test_vector_9_lookups_keep_working_while_authorize_is_open,
    test_vector_10_a_refused_call_sends_nothing_and_says_when,
)
from tests.support.redis import suite_redis_url


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh key namespace, deleted afterwards."""
    name = f"test_breaker_{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(suite_redis_url())
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)


@pytest.fixture
def make_store(namespace: str) -> Callable[[ManualClock], StateStore]:
    """The backend under test for the imported vectors: Redis, on the test's clock."""
    return lambda clock: RedisStore.from_url(
        suite_redis_url(), namespace=namespace, clock=clock.monotonic
    )


# -- Lua and Python twins agree ---------------------------------------------------------------

TWIN_CONFIGS = [
    CONFIG_C,
    BreakerConfig(
        window_type="time",
        window_size=5,
        minimum_calls=3,
        failure_rate_threshold=60.0,
        slow_call_duration=1.0,
        slow_call_rate_threshold=50.0,
        open_duration=4.0,
        half_open_permits=2,
        max_half_open_duration=3.0,
    ),
]


def _random_operations(seed: int, count: int) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    kinds = ["acquire"] * 5 + ["success"] * 3 + ["failure"] * 4 + ["slow", "ignored", "peek"]
    kinds += ["advance"] * 3 + ["force_open", "reset", "metrics_only", "disable"]
    return [(rng.choice(kinds), rng.choice([0.0, 0.4, 1.0, 2.5, 7.0])) for _ in range(count)]


@pytest.mark.parametrize("config", TWIN_CONFIGS, ids=["count", "time"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lua_and_python_breaker_give_the_same_answers(
    namespace: str, config: BreakerConfig, seed: int
) -> None:
    """400 random operations (calls, results, time, overrides): identical answers on both."""
    clock = ManualClock(start=5000.0)
    memory = CircuitBreaker(MemoryStore(clock.monotonic), "authorize", config)
    shared = CircuitBreaker(
        RedisStore.from_url(suite_redis_url(), namespace=namespace, clock=clock.monotonic),
        "authorize",
        config,
    )
    held: list[tuple[object, object]] = []
    rng = random.Random(seed)
    for step, (kind, amount) in enumerate(_random_operations(seed, 400)):
        if kind == "advance":
            clock.advance(amount)
            continue
        if kind == "acquire":
            pair = (memory.acquire(lease=3.0), shared.acquire(lease=3.0))
            a, b = pair
            assert (a.admitted, a.state, a.generation, a.retry_after, a.probe) == (
                b.admitted,
                b.state,
                b.generation,
                b.retry_after,
                b.probe,
            ), step
            if a.admitted:
                held.append(pair)
        elif kind == "peek":
            assert memory.admits() == shared.admits(), step
        elif kind in ("force_open", "reset", "metrics_only", "disable"):
            assert getattr(memory, kind)().state == getattr(shared, kind)().state, step
        elif held:
            a, b = held.pop(rng.randrange(len(held)))
            outcome = {"success": SUCCESS, "failure": FAILURE, "slow": SUCCESS}.get(kind, IGNORED)
            duration = 2.0 if kind == "slow" else 0.1
            assert memory.record(a, outcome, duration=duration) == shared.record(
                b, outcome, duration=duration
            ), step
        left, right = memory.snapshot().as_dict(), shared.snapshot().as_dict()
        left.pop("store"), right.pop("store")
        assert left == right, step


def test_lua_and_python_limiter_give_the_same_answers(namespace: str) -> None:
    """300 random slot operations: the same limits and slots in flight on both backends."""
    clock = ManualClock(start=5000.0)
    config = AimdConfig(initial_limit=6, max_limit=8)
    memory = AimdLimiter(MemoryStore(clock.monotonic), config)
    shared = AimdLimiter(
        RedisStore.from_url(suite_redis_url(), namespace=namespace, clock=clock.monotonic), config
    )
    rng = random.Random(7)
    held = []
    for step in range(300):
        choice = rng.random()
        if choice < 0.45:
            a, b = memory.try_acquire("s", lease=5.0), shared.try_acquire("s", lease=5.0)
            assert (a is None) == (b is None), step
            if a is not None and b is not None:
                assert (a.limit, a.in_flight) == (b.limit, b.in_flight), step
                held.append((a, b))
        elif choice < 0.9 and held:
            a, b = held.pop(rng.randrange(len(held)))
            outcome = rng.choice([DROP, SLOT_SUCCESS, SLOT_SUCCESS, IGNORE])
            assert memory.release(a, outcome) == shared.release(b, outcome), step
        else:
            clock.advance(rng.choice([0.5, 2.0, 6.0]))
        assert memory.snapshot("s") == shared.snapshot("s"), step


# -- the Redis server's clock -----------------------------------------------------------------


def test_breaker_runs_on_the_redis_clock_by_default(namespace: str) -> None:
    """No injected clock: the open period is measured on Redis TIME (0.3 s, then a probe)."""
    config = BreakerConfig(window_size=10, minimum_calls=5, open_duration=0.3, half_open_permits=1)
    breaker = CircuitBreaker(
        RedisStore.from_url(suite_redis_url(), namespace=namespace), "g", config
    )
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    refused = breaker.acquire()
    assert refused.admitted is False
    assert 0.0 < refused.retry_after <= 0.3
    time.sleep(0.35)
    assert breaker.acquire().probe is True


def test_breaker_state_is_one_hash_per_group(namespace: str) -> None:
    """The state lives in `<namespace>:breaker:<name>:<group>`, one key per group."""
    breaker = CircuitBreaker(
        RedisStore.from_url(suite_redis_url(), namespace=namespace),
        "authorize",
        CONFIG_C,
        name="acq",
    )
    breaker.record(breaker.acquire(), FAILURE)
    keys = {
        key.decode() for key in redis.Redis.from_url(suite_redis_url()).scan_iter(f"{namespace}:*")
    }
    assert keys == {f"{namespace}:breaker:acq:authorize"}


# -- Redis unreachable ------------------------------------------------------------------------


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: nothing listens


def _client_on(store: StateStore, clock: ManualClock, upstream: httpx.MockTransport, **kw):
    return AcquirerClient(
        AcquirerConfig(base_url="https://acquirer.test", api_key="sk_fallback", name="acq"),
        transport=upstream,
        policy=RetryPolicy(max_attempts=1),
        clock=clock,
        sleep=clock.sleep,
        store=store,
        breakers={"authorize": CONFIG_C},
        **kw,
    )


def _request(number: int) -> AuthorizationRequest:
    return AuthorizationRequest(
        amount=1000,
        currency="EUR",
        payment_method="tok_visa",
        payment_reference=f"pay_{number}",
        idempotency_key=f"authorize-pay_{number}",
    )


def _charge(request: httpx.Request) -> httpx.Response:
    import json

    body = json.loads(request.read())
    return httpx.Response(
        201,
        json={
            "id": "ch_1",
            "status": "approved",
            "decline_code": None,
            "amount": body["amount"],
            "currency": body["currency"],
            "reference": body["reference"],
            "created_at": "2019-06-03T11:00:00Z",
        },
    )


def test_unreachable_redis_is_not_an_acquirer_outage() -> None:
    """Redis on a closed port: calls still succeed, the breaker stays closed, the store counts."""
    clock = ManualClock()
    store_metrics, metrics = CounterMetrics(), CounterMetrics()
    store = RedisStore.from_url(
        f"redis://127.0.0.1:{_dead_port()}/0",
        metrics=store_metrics,
        fallback=MemoryStore(clock.monotonic),
    )
    sent = []
    upstream = httpx.MockTransport(lambda request: sent.append(1) or _charge(request))
    with _client_on(store, clock, upstream, metrics=metrics) as client:
        for number in range(20):
            assert client.authorize(_request(number)).approved is True
        snapshot = client.breaker_state("authorize")
    assert (snapshot.state, snapshot.failed_calls, snapshot.store) == ("closed", 0, "fallback")
    assert len(sent) == 20
    assert store_metrics.get("store_fallback", store="redis") > 0
    assert metrics.get("breaker_store_fallback", group="authorize") > 0


def test_unreachable_redis_hands_over_to_a_local_breaker(caplog: pytest.LogCaptureFixture) -> None:
    """Redis down and the acquirer failing: the local breaker (config C) opens after 5 results."""
    clock = ManualClock()
    metrics = CounterMetrics()
    store = RedisStore.from_url(
        f"redis://127.0.0.1:{_dead_port()}/0", fallback=MemoryStore(clock.monotonic)
    )
    sent = []
    upstream = httpx.MockTransport(lambda request: sent.append(1) or httpx.Response(503))
    caplog.set_level(logging.WARNING, logger="gateway_client")
    with _client_on(store, clock, upstream, metrics=metrics) as client:
        for number in range(5):
            with pytest.raises(Exception, match="503"):
                client.authorize(_request(number))
        with pytest.raises(CircuitOpenError):
            client.authorize(_request(99))
    assert len(sent) == 5
    assert metrics.get("breaker_transitions", group="authorize", to_state="open") == 1
    assert metrics.get("breaker_store_fallback", group="authorize") >= 6
    handover = [r for r in caplog.records if "a local breaker with the same config" in r.message]
    assert len(handover) == 1
