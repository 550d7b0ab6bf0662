"""The state store (memory backend, Redis fallback), the rate gate and the retry budgets."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import redis

from gateway_client import AcquirerClient, AcquirerConfig, ManualClock, MemoryStore, RedisStore
from resilience.budget import RetryBudget
from resilience.gate import RateGate, scope_for
from resilience.metrics import CounterMetrics
from resilience.store import AtomicScript, MemoryKeyspace


def store_on(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock.monotonic)


# -- budget vectors (docs/reference/retries.md) -----------------------------------------------


def test_finagle_defaults_with_no_traffic_give_100_retries() -> None:
    """ttl 10 s, 10 retries/s reserve: after 10 s without traffic, 100 retries are available."""
    clock = ManualClock()
    budget = RetryBudget(store_on(clock), "acquirer", percent_can_retry=0.2)
    clock.advance(10)
    assert budget.state().retries_available == 100
    granted = sum(budget.try_withdraw()[0] for _ in range(150))
    assert granted == 100


def test_budget_defaults_are_documented_numbers() -> None:
    """RetryBudget defaults: ttl 10 s, 10 retries/s reserve, 10 % of first attempts."""
    budget = RetryBudget(MemoryStore(), "x")
    assert (budget.ttl, budget.min_retries_per_second, budget.percent_can_retry) == (
        10.0,
        10.0,
        0.1,
    )


def test_budget_retries_are_ten_percent_of_first_attempts_plus_reserve() -> None:
    """200 first attempts in the window earn 20 retries on top of the 100 reserve."""
    clock = ManualClock()
    budget = RetryBudget(store_on(clock), "acquirer")
    for _ in range(200):
        budget.record_request()
    assert sum(budget.try_withdraw()[0] for _ in range(500)) == 120


def test_budget_window_slides() -> None:
    """Withdrawals older than ttl expire: the reserve is back 10 s later."""
    clock = ManualClock()
    budget = RetryBudget(store_on(clock), "acquirer", min_retries_per_second=1)
    assert sum(budget.try_withdraw()[0] for _ in range(20)) == 10
    clock.advance(5)
    assert budget.try_withdraw()[0] is False
    clock.advance(5)
    assert budget.state().retries_available == 10


def test_budget_is_shared_through_the_store() -> None:
    """Two budget objects on one store and name share one balance."""
    clock = ManualClock()
    store = store_on(clock)
    first = RetryBudget(store, "acquirer", min_retries_per_second=0.3)
    second = RetryBudget(store, "acquirer", min_retries_per_second=0.3)
    assert first.try_withdraw()[0] and second.try_withdraw()[0] and first.try_withdraw()[0]
    assert second.try_withdraw()[0] is False


def test_budgets_of_two_acquirers_are_separate() -> None:
    """A budget per acquirer name."""
    store = MemoryStore()
    a = RetryBudget(store, "a", min_retries_per_second=0.1)
    b = RetryBudget(store, "b", min_retries_per_second=0.1)
    assert a.try_withdraw()[0] is True
    assert a.try_withdraw()[0] is False
    assert b.try_withdraw()[0] is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl": 0}, "ttl must be a positive number of seconds"),
        ({"min_retries_per_second": -1}, "min_retries_per_second must be >= 0"),
        ({"percent_can_retry": 1.5}, "percent_can_retry must be between 0 and 1"),
        ({"slots": 0}, "slots must be >= 1"),
    ],
)
def test_budget_rejects_bad_numbers(kwargs: dict[str, Any], message: str) -> None:
    """Non-positive ttl, negative reserve, a percentage above 1 or no slots: ValueError."""
    with pytest.raises(ValueError, match=re.escape(message)):
        RetryBudget(MemoryStore(), "x", **kwargs)


# -- rate gate ---------------------------------------------------------------------------------


def test_gate_is_open_by_default() -> None:
    """A scope never closed has 0 s remaining."""
    assert RateGate(MemoryStore()).remaining("acquirer:abc") == 0.0


def test_gate_counts_down_on_the_store_clock() -> None:
    """Closed for 30 s, it has 20 s left 10 s later and opens at 30 s."""
    clock = ManualClock()
    gate = RateGate(store_on(clock))
    assert gate.close("s", 30) == 30.0
    clock.advance(10)
    assert gate.remaining("s") == 20.0
    clock.advance(20)
    assert gate.remaining("s") == 0.0


def test_gate_never_moves_earlier() -> None:
    """A shorter wait does not reopen a gate closed for longer."""
    clock = ManualClock()
    gate = RateGate(store_on(clock))
    gate.close("s", 30)
    assert gate.close("s", 5) == 30.0
    assert gate.close("s", 40) == 40.0


def test_gate_rejects_infinite_or_negative_waits() -> None:
    """close() with inf, NaN or a negative wait raises ValueError."""
    gate = RateGate(MemoryStore())
    for bad in (float("inf"), float("nan"), -1.0):
        with pytest.raises(ValueError, match=r"^seconds must be a finite number >= 0$"):
            gate.close("s", bad)


def test_scope_comes_from_configuration_never_from_the_key() -> None:
    """scope_for gives the configured rate scope, else the acquirer's name; the client's scope
    (a Redis key and a metric label) carries nothing derived from its API key."""
    assert scope_for("acme") == "acme"
    assert scope_for("acme", "account-7") == "account-7"
    config = AcquirerConfig("https://acquirer.test", "sk_live_secret", name="acme")
    assert AcquirerClient(config).scope == "acme"
    configured = AcquirerConfig("https://acquirer.test", "sk_live_secret", rate_scope="eu-1")
    assert AcquirerClient(configured).scope == "eu-1"


# -- memory store and reusable scripts ---------------------------------------------------------

INCREMENT = AtomicScript(
    name="test_increment",
    lua="return {tostring(redis.call('INCRBY', KEYS[1], ARGV[2]))}",
    python=lambda space, keys, args, now: [space.incr(keys[0], int(args[0]))],
)


def test_custom_scripts_run_on_the_memory_store() -> None:
    """A colleague's AtomicScript (a breaker counter, say) runs on the memory store."""
    store = MemoryStore()
    assert store.run(INCREMENT, ["k"], [2]) == [2.0]
    assert store.run(INCREMENT, ["k"], [3]) == [5.0]


def test_memory_keyspace_expires_keys() -> None:
    """A key set with a ttl reads as absent once the store's now passes it."""
    space = MemoryKeyspace()
    space.set("k", 1, ttl=5)
    space.now = 4.9
    assert space.get("k") == 1
    space.now = 5.0
    assert space.get("k") is None
    assert len(space) == 0


def test_memory_store_namespaces_keys() -> None:
    """Two namespaces on separate stores never share a key (keys are prefixed)."""
    seen: list[str] = []
    spy = AtomicScript("spy", "", lambda space, keys, args, now: seen.extend(keys) or [0])
    MemoryStore(namespace="payments").run(spy, ["gate:x"], [])
    assert seen == ["payments:gate:x"]


# -- Redis fallback, without a server -----------------------------------------------------------


class DownRedis:
    """A redis client whose every command fails as if the server were unreachable."""

    calls = 0

    def register_script(self, lua: str) -> Any:
        def run(keys: list[str], args: list[str]) -> Any:
            DownRedis.calls += 1
            raise redis.ConnectionError("Error 111 connecting to redis://:secret@cache:6379")

        return run

    def time(self) -> Any:
        raise redis.ConnectionError("down")


def test_unreachable_redis_falls_back_to_memory_and_counts() -> None:
    """Every operation still succeeds on the in-memory fallback; the metric counts them."""
    clock = ManualClock()
    metrics = CounterMetrics()
    store = RedisStore(DownRedis(), metrics=metrics, fallback=MemoryStore(clock.monotonic))
    gate = RateGate(store)
    gate.close("s", 10)
    assert gate.remaining("s") == 10.0
    assert store.using_fallback is True
    assert metrics.get("store_fallback") == 2
    assert store.fallback_operations == 2


def test_unreachable_redis_is_not_retried_within_the_retry_interval() -> None:
    """After a failure, Redis is skipped for retry_interval seconds, then tried again."""
    local = ManualClock()
    DownRedis.calls = 0
    store = RedisStore(DownRedis(), retry_interval=5, local_clock=local.monotonic)
    gate = RateGate(store)
    for _ in range(10):
        gate.remaining("s")
    assert DownRedis.calls == 1
    local.advance(5)
    gate.remaining("s")
    assert DownRedis.calls == 2


def test_unreachable_redis_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    """One warning per log_interval, naming the error class and never the Redis URL."""
    caplog.set_level(logging.WARNING, logger="gateway_client.store")
    local = ManualClock()
    store = RedisStore(DownRedis(), retry_interval=0, log_interval=60, local_clock=local.monotonic)
    gate = RateGate(store)
    for _ in range(5):
        gate.remaining("s")
        local.advance(1)
    assert len(caplog.records) == 1
    assert "ConnectionError" in caplog.records[0].getMessage()
    assert "secret" not in caplog.records[0].getMessage()
    local.advance(60)
    gate.remaining("s")
    assert len(caplog.records) == 2
