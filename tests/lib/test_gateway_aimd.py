"""
Adaptive (AIMD) concurrency per quota scope: docs/reference/retries.md's vectors, slots as
leases, the short wait, and the client's use of it (a rate limit drops the limit, a success at
high concurrency raises it, no free slot refuses without sending).

The store-backed tests take the `make_store` fixture; the vector tests are imported by
tests/integration/test_gateway_breaker_redis.py and run on Redis too. ManualClock everywhere:
no real time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AimdConfig,
    AuthorizationRequest,
    CircuitOpenError,
    ConcurrencyLimitedError,
    GatewayError,
    ManualClock,
    MemoryStore,
    RateLimitedError,
    RetryPolicy,
    StateStore,
)
from resilience.aimd import DROP, IGNORE, SUCCESS, AimdLimiter, aimd_next_limit
from resilience.gate import scope_for
from resilience.metrics import CounterMetrics

StoreFactory = Callable[[ManualClock], StateStore]
API_KEY = "sk_aimd_test"
SCOPE = scope_for("acq")


@pytest.fixture
def make_store() -> StoreFactory:
    """The backend under test: here the in-memory store on the test's clock."""
    return lambda clock: MemoryStore(clock.monotonic)


def limiter_on(make_store: StoreFactory, limit: int, max_limit: int = 10) -> AimdLimiter:
    clock = ManualClock(start=1000.0)
    store = make_store(clock)
    config = AimdConfig(initial_limit=limit, max_limit=max_limit)
    limiter = AimdLimiter(store, config, sleep=clock.sleep, monotonic=clock.monotonic)
    limiter.clock = clock  # type: ignore[attr-defined]
    return limiter


# -- the rule (docs/reference/retries.md) ------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "in_flight", "dropped", "expected"),
    [(10, 1, True, 9), (2, 1, True, 1), (1, 1, True, 1), (9, 5, False, 10), (9, 4, False, 9)],
    ids=["10->9 drop", "2->1 drop", "1 stays 1", "9->10 with 5", "9 stays with 4"],
)
def test_aimd_rule_vectors(limit: int, in_flight: int, dropped: bool, expected: int) -> None:
    """new = max(1, min(limit - 1, int(limit * 0.9))) on a drop; +1 if in_flight * 2 >= limit."""
    assert aimd_next_limit(limit, in_flight=in_flight, dropped=dropped, max_limit=10) == expected


def test_aimd_rule_never_exceeds_the_maximum() -> None:
    """A success at the maximum leaves it there."""
    assert aimd_next_limit(10, in_flight=10, dropped=False, max_limit=10) == 10


def test_aimd_vector_decrease_10_to_9(make_store: StoreFactory) -> None:
    """In the store: a rate-limited call at limit 10 leaves 9."""
    limiter = limiter_on(make_store, 10)
    slot = limiter.try_acquire("s")
    assert slot is not None
    assert limiter.release(slot, DROP) == 9
    assert limiter.snapshot("s").limit == 9


def test_aimd_vector_decrease_2_to_1(make_store: StoreFactory) -> None:
    """In the store: limit 2, a drop: 1."""
    limiter = limiter_on(make_store, 2)
    assert limiter.release(limiter.try_acquire("s"), DROP) == 1  # type: ignore[arg-type]


def test_aimd_vector_decrease_1_stays_1(make_store: StoreFactory) -> None:
    """In the store: limit 1, a drop: still 1 (never 0)."""
    limiter = limiter_on(make_store, 1)
    assert limiter.release(limiter.try_acquire("s"), DROP) == 1  # type: ignore[arg-type]
    assert limiter.try_acquire("s") is not None


def test_aimd_vector_increase_9_to_10_with_5_in_flight(make_store: StoreFactory) -> None:
    """In the store: limit 9, a success of the call sent as the 5th in flight: 10."""
    limiter = limiter_on(make_store, 9)
    slots = [limiter.try_acquire("s") for _ in range(5)]
    assert [slot.in_flight for slot in slots] == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
    assert limiter.release(slots[4], SUCCESS) == 10  # type: ignore[arg-type]


def test_aimd_vector_increase_9_stays_9_with_4_in_flight(make_store: StoreFactory) -> None:
    """In the store: limit 9, a success of the call sent as the 4th in flight: still 9."""
    limiter = limiter_on(make_store, 9)
    slots = [limiter.try_acquire("s") for _ in range(4)]
    assert limiter.release(slots[3], SUCCESS) == 9  # type: ignore[arg-type]


def test_aimd_slot_of_a_killed_caller_expires_with_its_lease(make_store: StoreFactory) -> None:
    """A slot never released (its caller died) is free again when its lease ends."""
    limiter = limiter_on(make_store, 1)
    assert limiter.try_acquire("s", lease=5.0) is not None  # never released
    assert limiter.try_acquire("s") is None
    limiter.clock.advance(4.999)  # type: ignore[attr-defined]
    assert limiter.try_acquire("s") is None
    limiter.clock.advance(0.001)  # type: ignore[attr-defined]
    assert limiter.try_acquire("s") is not None


# -- the limiter -------------------------------------------------------------------------------


def test_limiter_refuses_beyond_the_limit() -> None:
    """Limit 3: three slots, the fourth is refused; a release frees one."""
    limiter = limiter_on(lambda clock: MemoryStore(clock.monotonic), 3)
    slots = [limiter.try_acquire("s") for _ in range(3)]
    assert limiter.try_acquire("s") is None
    limiter.release(slots[0], IGNORE)  # type: ignore[arg-type]
    assert limiter.try_acquire("s") is not None


def test_limiter_ignore_leaves_the_limit() -> None:
    """A failure or a 4xx (IGNORE) changes nothing."""
    limiter = limiter_on(lambda clock: MemoryStore(clock.monotonic), 9)
    slots = [limiter.try_acquire("s") for _ in range(9)]
    assert limiter.release(slots[8], IGNORE) == 9  # type: ignore[arg-type]


def test_limiter_scopes_are_separate() -> None:
    """A drop in one scope leaves another scope's limit alone."""
    limiter = limiter_on(lambda clock: MemoryStore(clock.monotonic), 10)
    limiter.release(limiter.try_acquire("a"), DROP)  # type: ignore[arg-type]
    assert (limiter.snapshot("a").limit, limiter.snapshot("b").limit) == (9, 10)


def test_limiter_waits_at_most_the_given_time() -> None:
    """No free slot: polls for `wait` seconds (the injected sleep), then gives up."""
    limiter = limiter_on(lambda clock: MemoryStore(clock.monotonic), 1)
    limiter.try_acquire("s")
    assert limiter.acquire("s", wait=0.05) is None
    assert sum(limiter.clock.sleeps) == pytest.approx(0.05)  # type: ignore[attr-defined]


def test_limiter_takes_a_slot_freed_while_waiting() -> None:
    """A slot released during the wait is taken at the next poll."""
    clock = ManualClock()
    store = MemoryStore(clock.monotonic)
    held: list[Any] = []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if held:
            limiter.release(held.pop(), IGNORE)

    limiter = AimdLimiter(store, AimdConfig(initial_limit=1, max_limit=1), sleep=sleep,
                          monotonic=clock.monotonic)  # fmt: skip
    held.append(limiter.try_acquire("s"))
    assert limiter.acquire("s", wait=1.0) is not None
    assert clock.sleeps == [0.01]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"initial_limit": 0}, "initial_limit must be an integer >= 1"),
        (
            {"initial_limit": 20, "max_limit": 10},
            "min_limit <= initial_limit <= max_limit is required",
        ),
        ({"backoff_ratio": 1.0}, "backoff_ratio must be between 0 and 1 (exclusive)"),
        ({"slot_lease": 0}, "slot_lease must be > 0 seconds"),
        (
            {"min_limit": 2, "initial_limit": 1},
            "min_limit <= initial_limit <= max_limit is required",
        ),
    ],
)
def test_limiter_config_rejects_bad_values(changes: dict[str, Any], message: str) -> None:
    """An AimdConfig with impossible numbers raises ValueError."""
    with pytest.raises(ValueError, match=re.escape(message)):
        AimdConfig(**changes)


def test_limiter_defaults_change_nothing_until_a_rate_limit() -> None:
    """AimdConfig(): initial = max = 100 per scope, ratio 0.9, minimum 1."""
    config = AimdConfig()
    assert (config.initial_limit, config.max_limit, config.min_limit) == (100, 100, 1)
    assert config.backoff_ratio == 0.9


# -- in the client -----------------------------------------------------------------------------


def charge_for(request: httpx.Request) -> httpx.Response:
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


def build(
    answer: Callable[[httpx.Request], httpx.Response],
    limit: int = 10,
    policy: RetryPolicy | None = None,
) -> tuple[AcquirerClient, list[httpx.Request], ManualClock]:
    clock = ManualClock()
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answer(request)

    client = AcquirerClient(
        AcquirerConfig(base_url="https://acquirer.test", api_key=API_KEY, name="acq"),
        transport=httpx.MockTransport(handle),
        policy=policy or RetryPolicy(max_attempts=1),
        clock=clock,
        sleep=clock.sleep,
        random=lambda: 0.5,
        limiter=AimdConfig(initial_limit=limit, max_limit=10),
        metrics=CounterMetrics(),
    )
    return client, sent, clock


def request(number: int = 1) -> AuthorizationRequest:
    return AuthorizationRequest(
        amount=1000,
        currency="EUR",
        payment_method="tok_visa",
        payment_reference=f"pay_{number}",
        idempotency_key=f"authorize-pay_{number}",
    )


def test_client_429_lowers_the_scope_limit() -> None:
    """A 429 answer: the scope's limit goes 10 -> 9."""
    client, _, _ = build(lambda _: httpx.Response(429))
    with pytest.raises(RateLimitedError):
        client.authorize(request())
    assert client.limiter.snapshot(SCOPE).limit == 9


def test_client_confirmed_secondary_403_lowers_the_limit() -> None:
    """A 403 whose code names a secondary rate limit lowers it too; a plain 403 does not."""
    client, _, _ = build(lambda _: httpx.Response(403, json={"code": "secondary_rate_limit"}))
    with pytest.raises(RateLimitedError):
        client.authorize(request())
    assert client.limiter.snapshot(SCOPE).limit == 9
    plain, _, _ = build(lambda _: httpx.Response(403, json={"code": "permission_denied"}))
    with pytest.raises(Exception, match="403"):
        plain.authorize(request())
    assert plain.limiter.snapshot(SCOPE).limit == 10


def test_client_success_at_high_concurrency_raises_the_limit() -> None:
    """Limit 9 with 4 other calls in flight: this call is the 5th, its success makes 10."""
    client, _, _ = build(charge_for, limit=9)
    others = [client.limiter.try_acquire(SCOPE) for _ in range(4)]
    assert client.authorize(request()).approved is True
    assert client.limiter.snapshot(SCOPE).limit == 10
    assert all(other is not None for other in others)


def test_client_success_at_low_concurrency_keeps_the_limit() -> None:
    """Limit 9, the call alone in flight: its success leaves 9."""
    client, _, _ = build(charge_for, limit=9)
    client.authorize(request())
    assert client.limiter.snapshot(SCOPE).limit == 9


def test_client_without_a_free_slot_sends_nothing() -> None:
    """Every slot taken: after the short wait, ConcurrencyLimitedError, 0 attempts, 0 sent."""
    client, sent, clock = build(charge_for, limit=1)
    client.limiter.try_acquire(SCOPE)
    with pytest.raises(ConcurrencyLimitedError) as info:
        client.authorize(request())
    error = info.value
    assert isinstance(error, RateLimitedError)
    assert (error.attempts, error.scope, error.limit) == (0, SCOPE, 1)
    assert (error.retry_after, error.wait_source) == (1.0, "concurrency")
    assert sent == []
    assert sum(clock.sleeps) == pytest.approx(0.1)  # RetryPolicy().concurrency_wait


def test_client_slot_wait_is_cut_to_the_deadline() -> None:
    """A background wait of 5 s with 1 s of deadline waits only until min_attempt_time is left."""
    policy = RetryPolicy(max_attempts=1, deadline=1.0, concurrency_wait=5.0)
    client, _, clock = build(charge_for, limit=1, policy=policy)
    client.limiter.try_acquire(SCOPE)
    with pytest.raises(ConcurrencyLimitedError):
        client.authorize(request())
    assert sum(clock.sleeps) == pytest.approx(0.5)


def test_client_releases_its_slot_after_each_attempt() -> None:
    """Results, errors and 429s all give the slot back: nothing stays in flight."""
    answers = iter([httpx.Response(503), httpx.Response(429), httpx.Response(400)])
    client, _, _ = build(lambda _: next(answers), limit=3)
    for number in range(3):
        with pytest.raises(GatewayError):  # three different errors: 503, 429, 400
            client.authorize(request(number))
    assert client.limiter.snapshot(SCOPE).in_flight == 0


def test_client_cancelled_call_gives_its_slot_back() -> None:
    """An exception that is no acquirer outcome (a cancellation) frees the slot unjudged."""

    def cancel(_: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    client, _, _ = build(cancel, limit=2)
    with pytest.raises(KeyboardInterrupt):
        client.authorize(request())
    snapshot = client.limiter.snapshot(SCOPE)
    assert (snapshot.in_flight, snapshot.limit) == (0, 2)


def test_client_refused_by_the_breaker_takes_no_slot() -> None:
    """A call the breaker refuses never reaches the limiter."""
    client, _, _ = build(charge_for, limit=2)
    client.breakers.force_open("authorize", actor="test")
    with pytest.raises(CircuitOpenError):
        client.authorize(request())
    assert client.metrics.get("concurrency_refused") == 0  # type: ignore[attr-defined]
    assert client.limiter.snapshot(SCOPE).in_flight == 0
