"""
The rate gate's and the retry budget's Lua programs mean what their Python twins mean: the
same random operation sequences give the same answers on a real Redis and in memory. (The
breaker's and the limiter's twins: test_gateway_breaker_redis.py; the table of which test
covers which file: tests/integration/test_gateway_lua_files.py.)
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
import redis

from resilience.budget import BUDGET_SCRIPT
from resilience.clock import ManualClock
from resilience.gate import GATE_CLOSE, GATE_READ
from resilience.store import MemoryStore, RedisStore
from tests.support.redis import suite_redis_url


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh key namespace, deleted afterwards."""
    name = f"test_twins_{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(suite_redis_url())
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)


def _stores(namespace: str) -> tuple[ManualClock, MemoryStore, RedisStore]:
    clock = ManualClock(start=5000.0)
    shared = RedisStore.from_url(suite_redis_url(), namespace=namespace, clock=clock.monotonic)
    return clock, MemoryStore(clock.monotonic), shared


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lua_and_python_gate_give_the_same_answers(namespace: str, seed: int) -> None:
    """300 random reads, closes (0 to 40 s) and clock steps: identical answers on both."""
    clock, memory, shared = _stores(namespace)
    rng = random.Random(seed)
    for step in range(300):
        choice, scope = rng.random(), rng.choice(["gate:a", "gate:b"])
        if choice < 0.4:
            assert memory.run(GATE_READ, [scope], []) == shared.run(GATE_READ, [scope], []), step
        elif choice < 0.75:
            args = [rng.choice([0.0, 0.25, 1.0, 3.5, 12.0, 40.0])]
            assert memory.run(GATE_CLOSE, [scope], args) == shared.run(GATE_CLOSE, [scope], args), (
                step
            )
        else:
            clock.advance(rng.choice([0.1, 0.5, 2.0, 7.0, 30.0]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lua_and_python_budget_give_the_same_answers(namespace: str, seed: int) -> None:
    """400 random deposits, withdrawals, reads and clock steps: identical balances on both."""
    clock, memory, shared = _stores(namespace)
    rng = random.Random(seed)
    reserve, slot_seconds, slots = 3000, rng.choice([0.5, 1.0]), rng.choice([4, 10])
    for step in range(400):
        choice = rng.random()
        if choice < 0.8:
            op, amount = rng.choice([("deposit", 100), ("deposit", 250), ("withdraw", 1000)])
            if choice < 0.1:
                op, amount = "read", 0
            args = [op, amount, reserve, slot_seconds, slots]
            key = ["budget:acquirer"]
            assert memory.run(BUDGET_SCRIPT, key, args) == shared.run(BUDGET_SCRIPT, key, args), (
                step
            )
        else:
            clock.advance(rng.choice([0.1, 0.3, 1.0, 2.5, 6.0, 15.0]))
