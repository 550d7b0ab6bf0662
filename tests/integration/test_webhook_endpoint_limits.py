"""Nothing a merchant creates is unbounded: at most WEBHOOK_MAX_ENDPOINTS live webhook
endpoints (each event is delivered to each one), enforced under the merchant's row lock so
concurrent creations cannot pass it together; and the endpoint list pages with a real cursor
and a true ``has_more`` (it showed 100 with ``has_more: false``, the rest unreachable)."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connections
from rest_framework.test import APIClient

from idempotency.models import IdempotencyKey
from webhooks.models import WebhookEndpoint

BODY = {"url": "http://127.0.0.1:9/hook", "enabled_events": ["payment.succeeded"]}


def create(merchant, key: str | None = None, client=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return (client or merchant.client).post("/webhook_endpoints", BODY, format="json", **headers)


def test_the_default_cap_is_stripes():
    assert settings.WEBHOOK_MAX_ENDPOINTS == 16


@pytest.mark.django_db
def test_one_endpoint_over_the_cap_is_refused_and_its_key_stays_free(merchant_a, settings):
    settings.WEBHOOK_MAX_ENDPOINTS = 3
    made = [create(merchant_a).json()["id"] for _ in range(3)]
    refused = create(merchant_a, key="fourth")
    assert refused.status_code == 400
    assert refused["Content-Type"] == "application/problem+json"
    assert refused.json()["code"] == "webhook_endpoint_limit_reached"
    assert WebhookEndpoint.objects.filter(deleted_at__isnull=True).count() == 3
    assert not IdempotencyKey.objects.filter(key="fourth").exists()
    # Deleting one makes room, and the refused request's key works as it is.
    assert merchant_a.client.delete(f"/webhook_endpoints/{made[0]}").status_code in (200, 204)
    assert create(merchant_a, key="fourth").status_code == 201


@pytest.mark.django_db
def test_the_cap_is_per_merchant(merchant_a, merchant_b, settings):
    settings.WEBHOOK_MAX_ENDPOINTS = 2
    for merchant in (merchant_a, merchant_a, merchant_b, merchant_b):
        assert create(merchant).status_code == 201
    assert create(merchant_a).status_code == 400
    assert create(merchant_b).status_code == 400


@pytest.mark.django_db(transaction=True)
def test_concurrent_creations_cannot_pass_the_cap_together(merchant_a, settings):
    """Eight threads, each with its own connection, create at once against room for one."""
    settings.WEBHOOK_MAX_ENDPOINTS = 5
    for _ in range(4):
        assert create(merchant_a).status_code == 201
    start = threading.Barrier(8)
    statuses: list[int] = []

    def attempt() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {merchant_a.api_key}")
        start.wait()
        try:
            statuses.append(create(merchant_a, client=client).status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [201] + [400] * 7
    assert WebhookEndpoint.objects.filter(deleted_at__isnull=True).count() == 5


@pytest.mark.django_db
def test_the_list_pages_through_every_endpoint_with_a_cursor(merchant_a, settings):
    settings.WEBHOOK_MAX_ENDPOINTS = 25
    made = {create(merchant_a).json()["id"] for _ in range(25)}
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": 10, **({"starting_after": cursor} if cursor else {})}
        page = merchant_a.client.get("/webhook_endpoints", query).json()
        pages += 1
        seen.extend(item["id"] for item in page["data"])
        if not page["has_more"]:
            break
        cursor = page["data"][-1]["id"]
    assert pages == 3 and len(seen) == 25 and set(seen) == made
    assert merchant_a.client.get("/webhook_endpoints").json()["has_more"] is True
    unknown = merchant_a.client.get("/webhook_endpoints", {"starting_after": "we_unknown"})
    assert unknown.status_code == 400
    assert unknown.json()["errors"][0]["field"] == "starting_after"
