"""Failed authentications per client address (payments/api/limits.py) on a real Redis: past
the limit a client is answered 429 problem+json with Retry-After, before any key look-up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from merchants.authentication import api_key_cache_clear
from payments.api.limits import authentication_window_offset
from tests.support.redis import suite_redis_url
from tests.support.windows import clear_of_window_ends

pytestmark = pytest.mark.django_db

#: Well-shaped keys nobody was given: each costs a look-up until the limit.
UNKNOWN_KEY = "sk_test_" + "A" * 40


@pytest.fixture
def limited(settings) -> Iterator[None]:
    """Three failures per 60 s, counted in a fresh namespace of the suite's Redis."""
    namespace = f"test_auth_{uuid.uuid4().hex[:10]}"
    settings.ACQUIRER_STATE_REDIS_URL = suite_redis_url()
    settings.ACQUIRER_STATE_NAMESPACE = namespace
    settings.API_AUTH_FAILURE_LIMIT = 3
    settings.API_AUTH_FAILURE_WINDOW_SECONDS = 60
    yield
    client = redis.Redis.from_url(suite_redis_url())
    for key in client.scan_iter(f"{namespace}:*"):
        client.delete(key)
    client.close()


def clear_of(*clients: str) -> None:
    """Start clear of these clients' window ends (tests/support/windows.py)."""
    window = 60  # the fixture's API_AUTH_FAILURE_WINDOW_SECONDS
    clear_of_window_ends([authentication_window_offset(c, window) for c in clients], window)


def get(address: str, authorization: str | None = None, **headers):
    client = APIClient(REMOTE_ADDR=address)
    if authorization is not None:
        headers["HTTP_AUTHORIZATION"] = authorization
    return client.get("/payments", **headers)


@pytest.mark.parametrize(
    "authorization",
    [None, f"Bearer {UNKNOWN_KEY}", "Bearer not-a-key", "Basic dXNlcjpwdw==", "Bearer"],
)
def test_a_client_past_its_failures_gets_429_before_any_look_up(limited, authorization):
    """Missing, unknown, malformed or another scheme: three 401s, then 429
    authentication_rate_limited with Retry-After, answered without a query; another address
    is not affected."""
    clear_of("198.51.100.7", "198.51.100.8")
    for _ in range(3):
        assert get("198.51.100.7", authorization).status_code == 401
    with CaptureQueriesContext(connection) as queries:
        refused = get("198.51.100.7", authorization)
    assert refused.status_code == 429
    assert refused["Content-Type"] == "application/problem+json"
    assert refused.json()["code"] == "authentication_rate_limited"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert len(queries) == 0
    assert get("198.51.100.8", authorization).status_code == 401


def test_a_trusted_key_passes_from_a_blocked_address_and_ipv6_counts_by_64(limited, merchant_a):
    """A key this process already trusts (cached) still works from an address past its limit;
    once forgotten, it waits like the rest. IPv6 addresses of one /64 share one count."""
    clear_of("203.0.113.9", "2001:db8:1:2::/64", "2001:db8:1:3::/64")
    key = f"Bearer {merchant_a.api_key}"
    assert get("203.0.113.9", key).status_code == 200  # looked up, now cached
    for _ in range(3):
        get("203.0.113.9", f"Bearer {UNKNOWN_KEY}")
    assert get("203.0.113.9", key).status_code == 200
    api_key_cache_clear()
    assert get("203.0.113.9", key).status_code == 429

    for host in range(1, 4):
        assert get(f"2001:db8:1:2::{host}", f"Bearer {UNKNOWN_KEY}").status_code == 401
    assert get("2001:db8:1:2:ffff::1").status_code == 429
    assert get("2001:db8:1:3::1").status_code == 401


def test_behind_the_proxy_the_forwarded_address_counts(limited, settings):
    """With API_CLIENT_ADDRESS_HEADER, the proxy's last X-Forwarded-For address is the
    client: two clients behind one proxy have counts of their own."""
    settings.API_CLIENT_ADDRESS_HEADER = "X-Forwarded-For"
    clear_of("192.0.2.50", "192.0.2.51")
    for _ in range(3):
        get("10.0.0.2", None, HTTP_X_FORWARDED_FOR="192.0.2.50")
    assert get("10.0.0.2", None, HTTP_X_FORWARDED_FOR="192.0.2.50").status_code == 429
    assert get("10.0.0.2", None, HTTP_X_FORWARDED_FOR="192.0.2.51").status_code == 401
    spoofed = get("10.0.0.2", None, HTTP_X_FORWARDED_FOR="192.0.2.51, 192.0.2.50")
    assert spoofed.status_code == 429  # only the address the proxy wrote last counts
