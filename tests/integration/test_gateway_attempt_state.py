"""
One attempt's shared state in two Redis round trips (ADR 0025): lua/admit.lua and
lua/settle.lua mean what their Python twins mean on random sequences against a real Redis,
and a client on a real Redis sends exactly one script before each attempt and one after it
(counted at the Redis client, not timed), against the sandbox acquirer over real HTTP.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AcquirerUnavailableError,
    AuthorizationRequest,
    ManualClock,
    RedisStore,
)
from resilience import ADMIT_SCRIPT, SETTLE_SCRIPT
from resilience.aimd import AimdConfig, AimdLimiter
from resilience.breaker import CircuitBreaker
from resilience.budget import RetryBudget
from resilience.gate import GATE_CLOSE
from resilience.store import MemoryStore
from tests.lib.test_gateway_breaker_vectors import CONFIG_C
from tests.support.redis import suite_redis_url
from tests.support.sandbox import SandboxProcess


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh key namespace, deleted afterwards."""
    name = f"test_attempt_{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(suite_redis_url())
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)


def _script_args(with_breaker: bool) -> tuple[list[str], list[Any], list[Any]]:
    """Keys and the fixed arguments (budget, limiter, breaker config) of one random setup."""
    budget = RetryBudget(MemoryStore(), "acq", min_retries_per_second=0.2, ttl=10.0)
    limiter = AimdLimiter(MemoryStore(), AimdConfig(initial_limit=2, max_limit=3))
    keys = ["gate:s", budget.key, "aimd:s"]
    breaker_args: list[Any] = []
    if with_breaker:
        breaker = CircuitBreaker(MemoryStore(), "authorize", CONFIG_C, name="acq")
        keys.append(breaker._key)
        breaker_args = breaker._args
    budget_args = budget._args("read", 0)[2:]
    return keys, [*budget_args, *limiter._config_args()], breaker_args


@pytest.mark.parametrize("with_breaker", [True, False], ids=["breaker", "no_breaker"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lua_and_python_attempt_scripts_give_the_same_answers(
    namespace: str, seed: int, with_breaker: bool
) -> None:
    """300 random admissions, outcomes, gate closes and clock steps: identical answers."""
    clock = ManualClock(start=5000.0)
    memory = MemoryStore(clock.monotonic)
    shared = RedisStore.from_url(suite_redis_url(), namespace=namespace, clock=clock.monotonic)
    rng = random.Random(seed)
    keys, fixed, breaker_args = _script_args(with_breaker)
    budget_args, limiter_args = fixed[:3], fixed[3:]
    held: list[tuple[str, str, int]] = []  # (slot id, permit id, generation)
    verdicts: set[int] = set()
    for step in range(300):
        choice = rng.random()
        if choice < 0.45:
            first = rng.random() < 0.5
            op, amount = ("deposit", 100) if first else ("withdraw", 1000)
            slot_id, permit_id = f"slot{step}", f"permit{step}"
            lease = rng.choice([0.5, 3.0, 9.0, 40.0])
            args = [op, amount, *budget_args, *limiter_args, slot_id, lease]
            if with_breaker:
                args += [*breaker_args, permit_id]
            left = memory.run(ADMIT_SCRIPT, keys, args)
            assert left == shared.run(ADMIT_SCRIPT, keys, args), step
            verdicts.add(int(left[0]))
            if left[0] == 0:
                generation = int(left[12]) if with_breaker else 0
                probe = with_breaker and left[10] == 2
                held.append((slot_id, permit_id if probe else "-", generation))
        elif choice < 0.8 and held:
            slot_id, permit_id, generation = held.pop(rng.randrange(len(held)))
            gate = rng.choice(["", "", "", "0.5", "4.0"])
            limiter_outcome = rng.choice(["success", "success", "drop", "ignore"])
            args = [gate, rng.choice(["0", "1"]), *budget_args, *limiter_args, slot_id,
                    limiter_outcome]  # fmt: skip
            if with_breaker:
                code = rng.choice(["0", "1", "1", "2", "3", "i"])
                args += [*breaker_args, permit_id, code, generation]
            settled = memory.run(SETTLE_SCRIPT, keys, args)
            assert settled == shared.run(SETTLE_SCRIPT, keys, args), step
        elif choice < 0.85:
            wait = [rng.choice([0.2, 1.0, 3.0])]
            assert memory.run(GATE_CLOSE, ["gate:s"], wait) == shared.run(
                GATE_CLOSE, ["gate:s"], wait
            ), step
        else:
            clock.advance(rng.choice([0.1, 0.6, 2.0, 5.0, 31.0]))
    # The sequences reach admissions and refusals by the gate, the limiter and the budget
    # (and by the breaker, when there is one).
    assert {0, 2, 3, 4} | ({1} if with_breaker else set()) <= verdicts


class CountingRedis(redis.Redis):
    """A redis-py client that counts the commands it sends (each one round trip: the
    client sends no pipelines), by command name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]).upper())
        return super().execute_command(*args, **options)


@pytest.fixture(scope="module")
def sandbox_process() -> Iterator[SandboxProcess]:
    with SandboxProcess.start() as process:
        yield process


def _client(sandbox: SandboxProcess, namespace: str) -> tuple[AcquirerClient, CountingRedis]:
    counting = CountingRedis.from_url(suite_redis_url(), socket_timeout=2.0)
    assert isinstance(counting, CountingRedis)
    clock = ManualClock(start=1000.0)
    client = AcquirerClient(
        AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, name="sandbox"),
        store=RedisStore(counting, namespace=namespace),
        clock=clock,
        sleep=clock.sleep,
    )
    return client, counting


def _authorization() -> AuthorizationRequest:
    reference = f"pay_{uuid.uuid4().hex[:20]}"
    return AuthorizationRequest(
        amount=1050,
        currency="EUR",
        payment_method="tok_visa",
        payment_reference=reference,
        idempotency_key=f"authorize-{reference}",
    )


def test_an_attempt_makes_two_redis_round_trips(
    sandbox_process: SandboxProcess, namespace: str
) -> None:
    """Healthy calls: 2 commands each (admit, settle); a call retried twice: 6 for 3
    attempts. Counted at the Redis client (EVALSHA; the scripts' first load excluded)."""
    sandbox_process.reset()
    client, counting = _client(sandbox_process, namespace)
    with client:
        assert client.authorize(_authorization()).approved  # loads the scripts once
        counting.sent.clear()
        for _ in range(5):
            assert client.authorize(_authorization()).approved
        assert counting.sent == ["EVALSHA"] * 10

        counting.sent.clear()
        sandbox_process.set_condition("outage", duration_seconds=30, failure=503)
        try:
            with pytest.raises(AcquirerUnavailableError) as raised:
                client.authorize(_authorization())
        finally:
            sandbox_process.clear_conditions()
        assert raised.value.attempts == 3
        assert counting.sent == ["EVALSHA"] * 6
