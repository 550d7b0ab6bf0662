"""The in-flight cap over real HTTP: concurrent requests to a threaded live server, the
sandbox acquirer holding payments with its slow token, the slots in the suite's Redis."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from tests.support.api import PAYMENT_BODY
from tests.support.processes import wait_until
from tests.support.redis import suite_redis_url

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = {**PAYMENT_BODY, "payment_method": "tok_slow_1500"}


def post(base: str, api_key: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{base}/payments",
        json=body,
        headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": uuid.uuid4().hex},
        timeout=20.0,
    )


def test_one_merchant_at_its_cap_is_refused_and_another_is_served(
    live_server, sandbox, settings, merchant_a, merchant_b
):
    """Cap 2: two slow payments of merchant A hold both slots; A's third is 429
    concurrency_limited with Retry-After at once, while B is served; once A's payments end
    their slots are free again (released, not expired)."""
    namespace = f"test_slots_{uuid.uuid4().hex[:10]}"
    settings.ACQUIRER_STATE_REDIS_URL = suite_redis_url()
    settings.ACQUIRER_STATE_NAMESPACE = namespace
    merchant_a.merchant.concurrent_payments_limit = 2
    merchant_a.merchant.save()
    merchant_b.merchant.concurrent_payments_limit = 2
    merchant_b.merchant.save()
    slots = redis.Redis.from_url(suite_redis_url())
    key = f"{namespace}:merchant_slots:{merchant_a.merchant.pk}"
    base = live_server.url
    with ThreadPoolExecutor(2) as pool:
        slow = [pool.submit(post, base, merchant_a.api_key, SLOW) for _ in range(2)]
        wait_until(lambda: slots.zcard(key) == 2, timeout=10, what="two slots held")
        refused = post(base, merchant_a.api_key, PAYMENT_BODY)
        served = post(base, merchant_b.api_key, PAYMENT_BODY)
        assert [f.result().status_code for f in slow] == [201, 201]
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["code"] == "concurrency_limited"
    assert served.status_code == 201
    assert slots.zcard(key) == 0
    assert post(base, merchant_a.api_key, PAYMENT_BODY).status_code == 201
    for name in slots.scan_iter(f"{namespace}:*"):
        slots.delete(name)
