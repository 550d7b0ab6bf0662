"""Per-merchant limits (payments/api/limits.py) on a real Redis: the Lua programs mean what their
Python twins mean, and the API answers a merchant over its rate with 429 and the IETF
RateLimit fields that gateway_client's own reader understands."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
import redis

from idempotency.models import IdempotencyKey
from payments.api.limits import (
    RATE_SCRIPT,
    SLOTS_SCRIPT,
    RateDecision,
    payment_slot,
    request_rate_window_offset,
)
from resilience.clock import ManualClock
from resilience.quota import quota_profile
from resilience.store import MemoryStore, RedisStore
from resilience.structured_fields import parse_list
from tests.factories import PaymentFactory
from tests.support.api import PAYMENT_BODY
from tests.support.redis import suite_redis_url
from tests.support.windows import clear_of_window_ends


@pytest.fixture(autouse=True)
def _one_minute_window(settings):
    """A 60 s rate window (the default is 1 s): a test's requests, counted against a quota,
    fall in one window however slowly a loaded machine runs them."""
    settings.MERCHANT_RATE_LIMIT_WINDOW_SECONDS = 60


@pytest.fixture
def namespace() -> Iterator[str]:
    """A fresh key namespace, deleted afterwards."""
    name = f"test_limits_{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(suite_redis_url())
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)


@pytest.fixture
def shared_limits(settings, namespace: str) -> str:
    """The service's state store (and so the merchants' limits) in the suite's Redis."""
    settings.ACQUIRER_STATE_REDIS_URL = suite_redis_url()
    settings.ACQUIRER_STATE_NAMESPACE = namespace
    return namespace


def _stores(namespace: str) -> tuple[ManualClock, MemoryStore, RedisStore]:
    clock = ManualClock(start=7000.25)
    shared = RedisStore.from_url(suite_redis_url(), namespace=namespace, clock=clock.monotonic)
    return clock, MemoryStore(clock.monotonic), shared


@pytest.mark.parametrize("seed", [1, 2])
def test_lua_and_python_rate_give_the_same_answers(namespace: str, seed: int) -> None:
    """300 random requests of three merchants (quota, window, offset of their own), refunds
    (of the window a request was counted in, of an earlier one, of one never counted) and
    clock steps: the same allowed or given back / remaining / reset / window on both."""
    clock, memory, shared = _stores(namespace)
    rng = random.Random(seed)
    merchants = {"merchant_rate:1": [1, 1, 0], "merchant_rate:2": [5, 10, 3],
                 "merchant_rate:3": [2, 10, 7]}  # fmt: skip
    counted: dict[str, list[int]] = {name: [] for name in merchants}
    for step in range(300):
        choice = rng.random()
        name = rng.choice(sorted(merchants))
        key, args = [name], list(merchants[name])
        if choice < 0.55:
            answer = memory.run(RATE_SCRIPT, key, args)
            assert answer == shared.run(RATE_SCRIPT, key, args), step
            if answer[0]:
                counted[name].append(int(answer[3]))
        elif choice < 0.8:
            window = counted[name].pop() if counted[name] and rng.random() < 0.8 else 12345
            args += ["refund", window]
            assert memory.run(RATE_SCRIPT, key, args) == shared.run(RATE_SCRIPT, key, args), step
        else:
            clock.advance(rng.choice([0.1, 0.7, 2.0, 9.5]))


def test_a_refund_gives_back_one_count_of_its_own_window_only(namespace: str) -> None:
    """Quota 2 in a 10 s window: two counted, a third refused; a refund of the window lets one
    more in; a refund once the window has ended, or with nothing counted, gives nothing back."""
    clock, _, shared = _stores(namespace)
    key, args = ["merchant_rate:5"], [2, 10, 0]
    first = shared.run(RATE_SCRIPT, key, args)
    window = int(first[3])
    assert first[:2] == [1.0, 1.0]
    assert shared.run(RATE_SCRIPT, key, args)[:2] == [1.0, 0.0]
    assert shared.run(RATE_SCRIPT, key, args)[:2] == [0.0, 0.0]
    assert shared.run(RATE_SCRIPT, key, [*args, "refund", window])[:2] == [1.0, 1.0]
    assert shared.run(RATE_SCRIPT, key, args)[:2] == [1.0, 0.0]
    clock.advance(10.0)
    assert shared.run(RATE_SCRIPT, key, [*args, "refund", window])[:2] == [0.0, 2.0]
    assert shared.run(RATE_SCRIPT, key, [*args, "refund", window + 1])[:2] == [0.0, 2.0]


@pytest.mark.parametrize("seed", [1, 2])
def test_lua_and_python_slots_give_the_same_answers(namespace: str, seed: int) -> None:
    """300 random acquires, releases (known and unknown leases) and clock steps past leases:
    the same grants and counts on both, expired leases freeing their slots on both."""
    clock, memory, shared = _stores(namespace)
    rng = random.Random(seed)
    held: list[str] = []
    for step in range(300):
        choice = rng.random()
        key = ["merchant_slots:1"]
        if choice < 0.5:
            lease = f"l{step}"
            args = ["acquire", lease, rng.choice([1, 2, 3]), rng.choice([1.5, 5.0])]
            result = memory.run(SLOTS_SCRIPT, key, args)
            assert result == shared.run(SLOTS_SCRIPT, key, args), step
            if result[0]:
                held.append(lease)
        elif choice < 0.8:
            lease = held.pop(rng.randrange(len(held))) if held and rng.random() < 0.8 else "x"
            args = ["release", lease]
            assert memory.run(SLOTS_SCRIPT, key, args) == shared.run(SLOTS_SCRIPT, key, args), step
        else:
            clock.advance(rng.choice([0.5, 1.0, 6.0]))


def test_a_lease_expires_and_frees_its_slot(namespace: str) -> None:
    """A process that dies holding a slot does not keep it: after the lease it is free."""
    clock, _, shared = _stores(namespace)
    key = ["merchant_slots:9"]
    assert shared.run(SLOTS_SCRIPT, key, ["acquire", "dead", 1, 30]) == [1.0, 1.0]
    assert shared.run(SLOTS_SCRIPT, key, ["acquire", "next", 1, 30]) == [0.0, 1.0]
    clock.advance(30.0)
    assert shared.run(SLOTS_SCRIPT, key, ["acquire", "next", 1, 30]) == [1.0, 1.0]


def test_header_values_are_rounded_up_never_down() -> None:
    """0.2 s to the window's end is t=1, 59.000001 s is t=60; r is exact."""
    assert RateDecision(True, 10, 60, 3, 0.2).headers()["RateLimit"] == '"merchant";r=3;t=1'
    assert RateDecision(False, 10, 60, 0, 59.000001).headers() == {
        "RateLimit-Policy": '"merchant";q=10;w=60',
        "RateLimit": '"merchant";r=0;t=60',
    }


@pytest.mark.django_db
def test_over_the_rate_answers_429_with_headers_gateway_client_reads(
    merchant_a, shared_limits
) -> None:
    """Quota 3: three answers count down r; the fourth is 429 rate_limited whose Retry-After
    and RateLimit t agree, both read by resilience.quota_profile (the client's own reader)."""
    merchant_a.merchant.rate_limit_requests = 3
    merchant_a.merchant.save()
    clear_of_window_ends([request_rate_window_offset(merchant_a.merchant.pk, 60)], 60)
    remaining = []
    for _ in range(3):
        answer = merchant_a.client.get("/payments")
        assert answer.status_code == 200
        [item] = parse_list(answer["RateLimit"])
        remaining.append(item.params["r"])
        [policy] = parse_list(answer["RateLimit-Policy"])
        assert (policy.value, policy.params["q"], policy.params["w"]) == ("merchant", 3, 60)
    assert remaining == [2, 1, 0]
    refused = merchant_a.client.get("/payments")
    assert refused.status_code == 429
    assert refused["Content-Type"] == "application/problem+json"
    assert refused.json()["code"] == "rate_limited"
    retry_after = int(refused["Retry-After"])
    assert 1 <= retry_after <= 60
    ietf = quota_profile("ietf")
    headers = {name: refused[name] for name in ("RateLimit", "RateLimit-Policy")}
    assert ietf.server_wait(429, headers, now=0.0).seconds == float(retry_after)
    assert ietf.server_wait(429, {**headers, "Retry-After": refused["Retry-After"]}, now=0.0) \
        .source == "retry-after"  # fmt: skip
    assert ietf.confirms_rate_limit(headers, now=0.0)


@pytest.mark.django_db(transaction=True)
def test_a_refused_request_stores_nothing_and_a_replay_counts(
    merchant_a, shared_limits, sandbox
) -> None:
    """Quota 2: a payment, its replay (which counts: r=0), then the same key again is 429
    and the key is left as it was; a new key is 429 and stores no key at all."""
    merchant_a.merchant.rate_limit_requests = 2
    merchant_a.merchant.save()
    clear_of_window_ends([request_rate_window_offset(merchant_a.merchant.pk, 60)], 60)
    body = PAYMENT_BODY
    assert merchant_a.create_payment(body, key="order-9").status_code == 201
    replay = merchant_a.create_payment(body, key="order-9")
    assert replay["Idempotent-Replayed"] == "true"
    assert parse_list(replay["RateLimit"])[0].params["r"] == 0
    keys_before = list(IdempotencyKey.objects.values_list("key", "status", "response_status"))
    assert merchant_a.create_payment(body, key="order-9").status_code == 429
    assert merchant_a.create_payment(body, key="order-10").status_code == 429
    assert list(IdempotencyKey.objects.values_list("key", "status", "response_status")) == (
        keys_before
    )


@pytest.mark.django_db
def test_a_slot_is_released_when_the_block_raises(merchant_a, shared_limits) -> None:
    """payment_slot frees its slot on an exception as on an answer."""
    merchant_a.merchant.concurrent_payments_limit = 1
    for _ in range(2):
        with pytest.raises(RuntimeError), payment_slot(merchant_a.merchant):
            raise RuntimeError("the service failed")
    client = redis.Redis.from_url(suite_redis_url())
    assert client.zcard(f"{shared_limits}:merchant_slots:{merchant_a.merchant.pk}") == 0


@pytest.mark.django_db
@pytest.mark.parametrize("route", ["capture", "void", "refunds"])
def test_the_lifecycle_posts_hold_a_slot_too(merchant_a, shared_limits, route) -> None:
    """Cap 1, its slot held: capture, void and refund POSTs are 429 concurrency_limited and
    store no key; a GET of the payment is served (reads hold no slot)."""
    merchant_a.merchant.concurrent_payments_limit = 1
    merchant_a.merchant.save()
    payment = PaymentFactory(merchant=merchant_a.merchant, status="requires_capture")
    with payment_slot(merchant_a.merchant):
        answer = merchant_a.client.post(
            f"/payments/{payment.pk}/{route}", {}, format="json", HTTP_IDEMPOTENCY_KEY="op-1"
        )
        assert merchant_a.client.get(f"/payments/{payment.pk}").status_code == 200
    assert answer.status_code == 429
    assert (answer.json()["code"], answer["Retry-After"]) == ("concurrency_limited", "1")
    assert not IdempotencyKey.objects.filter(key="op-1").exists()


@pytest.mark.django_db
def test_a_payment_refused_by_the_in_flight_cap_keeps_the_merchants_rate(
    merchant_a, shared_limits
) -> None:
    """Quota 2, cap 1 with its slot held: three payment POSTs are 429 concurrency_limited,
    each answered with r=2 (its count given back); then two requests are still served (r=1,
    r=0) and the third is 429 rate_limited. A client honouring the cap's Retry-After keeps
    its rate."""
    merchant_a.merchant.rate_limit_requests = 2
    merchant_a.merchant.concurrent_payments_limit = 1
    merchant_a.merchant.save()
    clear_of_window_ends([request_rate_window_offset(merchant_a.merchant.pk, 60)], 60)
    with payment_slot(merchant_a.merchant):
        for attempt in range(3):
            refused = merchant_a.create_payment(PAYMENT_BODY, key=f"order-{attempt}")
            assert (refused.status_code, refused.json()["code"]) == (429, "concurrency_limited")
            assert parse_list(refused["RateLimit"])[0].params["r"] == 2
    remaining = [parse_list(merchant_a.client.get("/payments")["RateLimit"])[0].params["r"]
                 for _ in range(2)]  # fmt: skip
    assert remaining == [1, 0]
    assert merchant_a.client.get("/payments").json()["code"] == "rate_limited"
    assert not IdempotencyKey.objects.filter(key__startswith="order-").exists()


@pytest.mark.django_db
def test_an_unreachable_redis_falls_back_to_counting_in_the_process(merchant_a, settings, caplog):
    """Redis down (nothing listens): the limits count in memory, per process, and the store
    logs the fallback once; the merchant is limited, never answered 500."""
    settings.ACQUIRER_STATE_REDIS_URL = "redis://127.0.0.1:9/0"  # the discard port: refused
    settings.ACQUIRER_STATE_NAMESPACE = f"test_limits_down_{uuid.uuid4().hex[:8]}"
    merchant_a.merchant.rate_limit_requests = 1
    merchant_a.merchant.save()
    with caplog.at_level("WARNING", logger="gateway_client.store"):
        assert merchant_a.client.get("/payments").status_code == 200
        refused = merchant_a.client.get("/payments")
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
    assert [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()] == [
        "state store: Redis unreachable (ConnectionError); using the in-memory fallback, "
        "shared by this process only"
    ]
