"""The per-process API-key cache (merchants/authentication.py, ADR 0026), on an injected clock:
a hit costs no query, and a key revoked or given an end elsewhere (a queryset update, as another
process's write: no signal here) stops working at most API_KEY_CACHE_SECONDS after this process
looked it up; a change saved in this process applies at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from merchants.authentication import API_KEY_CACHE, ApiKeyCache
from merchants.models import ApiKey
from merchants.services import api_key_revoke, merchant_create
from tests.support.fake_time import FakeClock

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TTL = 5.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def cache(clock) -> ApiKeyCache:
    return ApiKeyCache(lambda: TTL, clock)


def test_a_hit_costs_no_query(cache):
    _, issued = merchant_create(name="shop")
    assert cache.authenticate(issued.raw) is not None
    with CaptureQueriesContext(connection) as queries:
        assert cache.authenticate(issued.raw).merchant.name == "shop"
    assert queries.captured_queries == []


def test_a_key_revoked_elsewhere_stops_within_the_ttl(cache, clock):
    """Looked up at T0, revoked by another process at T0 + 1 s: still served until T0 + 5 s
    (exclusive), refused from T0 + 5 s on, and refused for good (nothing cached on a miss)."""
    _, issued = merchant_create(name="shop")
    assert cache.authenticate(issued.raw) is not None
    clock.advance(1)
    ApiKey.objects.filter(pk=issued.api_key.pk).update(revoked_at=clock())
    clock.advance(TTL - 1 - 0.001)
    assert cache.authenticate(issued.raw) is not None  # T0 + 4.999 s: the bound, not later
    clock.advance(0.001)
    assert cache.authenticate(issued.raw) is None  # T0 + 5 s
    clock.advance(60)
    assert cache.authenticate(issued.raw) is None


def test_a_rotation_elsewhere_is_seen_within_the_ttl_and_a_known_end_exactly(cache, clock):
    """A rotation elsewhere gives the key an end 2 s away: seen at the next look-up (T0 + 5 s),
    and the end, once known, is enforced at its instant even from the cache."""
    _, issued = merchant_create(name="shop")
    assert cache.authenticate(issued.raw) is not None
    ApiKey.objects.filter(pk=issued.api_key.pk).update(expires_at=T0 + timedelta(seconds=7))
    clock.advance(TTL)
    assert cache.authenticate(issued.raw) is not None  # looked up again: ends at T0 + 7 s
    clock.advance(1.999)
    assert cache.authenticate(issued.raw) is not None  # from the cache, T0 + 6.999 s
    clock.advance(0.001)
    assert cache.authenticate(issued.raw) is None  # T0 + 7 s: from the cache, at the instant


def test_a_revocation_in_this_process_applies_at_once(clock):
    """api_key_revoke saves the key: the process's own cache (the one the API uses) forgets
    every key at once (post_save)."""
    _, issued = merchant_create(name="shop")
    assert API_KEY_CACHE.authenticate(issued.raw) is not None
    api_key_revoke(api_key=issued.api_key)
    assert API_KEY_CACHE.authenticate(issued.raw) is None


def test_an_unknown_key_always_queries(cache):
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            assert cache.authenticate("sk_live_not_a_key") is None
        assert len(queries.captured_queries) == 1


def test_a_ttl_of_zero_looks_up_every_time(clock):
    cache = ApiKeyCache(lambda: 0, clock)
    _, issued = merchant_create(name="shop")
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            assert cache.authenticate(issued.raw) is not None
        assert any(q["sql"].startswith("SELECT") for q in queries.captured_queries)
