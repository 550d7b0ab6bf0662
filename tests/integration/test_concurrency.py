"""Concurrent duplicates over real HTTP (pytest-django's live server, real PostgreSQL).

Vectors 7 and 8 of docs/reference/idempotency.md: the unique constraint decides every race.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from idempotency.models import IdempotencyKey
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)


def post(url: str, api_key: str, key: str, body: dict) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key}
    return httpx.post(f"{url}/payments", json=body, headers=headers, timeout=30)


def test_twenty_concurrent_identical_posts_charge_once(live_server, merchant_a, sandbox):
    """Vector 8: 20 identical POSTs at once -> exactly 1 acquirer charge, no 500."""
    body = {**PAYMENT_BODY, "payment_method": "tok_slow_200"}
    start = threading.Barrier(20)

    def one(_: int) -> httpx.Response:
        start.wait()
        return post(live_server.url, merchant_a.api_key, "storm-1", body)

    with ThreadPoolExecutor(max_workers=20) as pool:
        responses = list(pool.map(one, range(20)))

    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) <= {201, 409}, statuses
    created = [r for r in responses if r.status_code == 201]
    assert len({r.content for r in created}) == 1
    assert all(r.headers["Retry-After"] == "1" for r in responses if r.status_code == 409)
    assert sandbox.stats()["charges_total"] == 1
    assert IdempotencyKey.objects.count() == 1


def test_concurrent_duplicate_gets_409_while_acquirer_is_slow(
    live_server, merchant_a, sandbox, settings
):
    """Vector 7: while the first POST waits 2 s on the acquirer, a duplicate gets 409 at once;
    after completion a third POST replays; exactly 1 charge."""
    settings.ACQUIRER_READ_TIMEOUT_SECONDS = 10.0
    body = {**PAYMENT_BODY, "payment_method": "tok_slow_2000"}
    first_done = threading.Event()

    def first() -> httpx.Response:
        try:
            return post(live_server.url, merchant_a.api_key, "slow-1", body)
        finally:
            first_done.set()

    with ThreadPoolExecutor(max_workers=1) as pool:
        first_future = pool.submit(first)
        deadline = time.monotonic() + 10
        while not IdempotencyKey.objects.filter(key="slow-1").exists():  # phase 1 committed
            assert time.monotonic() < deadline, "the first request never claimed its key"
            time.sleep(0.01)
        duplicate = post(live_server.url, merchant_a.api_key, "slow-1", body)
        answered_before_first = not first_done.is_set()
        first_response = first_future.result()

    assert duplicate.status_code == 409
    assert duplicate.headers["Retry-After"] == "1"
    assert duplicate.json()["code"] == "idempotency_key_in_use"
    assert duplicate.json()["title"] == "A request is outstanding for this Idempotency-Key"
    assert answered_before_first, "the 409 waited for the running request"
    assert first_response.status_code == 201
    third = post(live_server.url, merchant_a.api_key, "slow-1", body)
    assert third.headers["Idempotent-Replayed"] == "true"
    assert third.content == first_response.content
    assert sandbox.stats()["charges_total"] == 1
