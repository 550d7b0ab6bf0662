"""The per-process API-key cache (merchants/authentication.py, ADR 0026), on an injected clock:
a hit costs no query, and a key revoked or given an end elsewhere (a queryset update, as another
process's write: no signal here) stops working at most API_KEY_CACHE_SECONDS after this process
looked it up; a change saved in this process applies at once."""

from __future__ import annotations

import random
import string
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


def malformed_tokens(seed: int = 9, count: int = 200) -> list[str]:
    """Bearer tokens no key we issue has the shape of: other prefixes, lengths and alphabets
    (a generated corpus)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "_-"
    out = ["x", "sk_live_", "sk_live_not_a_key", "pk_live_" + "a" * 43, "sk_live_" + "a" * 44]
    while len(out) < count:
        prefix = rng.choice(["sk_live_", "sk_test_", "sk_prod_", "SK_LIVE_", "", "whsec_"])
        length = rng.choice([0, 1, 42, 44, 64, rng.randrange(2, 200)])
        body = "".join(rng.choice(alphabet) for _ in range(length))
        if rng.random() < 0.3 and body:  # one character outside the alphabet
            i = rng.randrange(len(body))
            body = body[:i] + rng.choice("+/=.~é\u200b%") + body[i + 1 :]
        token = prefix + body
        if not (prefix in ("sk_live_", "sk_test_") and length == 43 and body.isascii()
                and all(c in alphabet for c in body)):  # fmt: skip
            out.append(token)
    return out


def test_a_token_not_shaped_as_our_keys_is_refused_without_a_query(merchant_a):
    """A flood of garbage tokens costs the database nothing: 401, no query; a well-shaped
    unknown key still queries (once)."""
    from rest_framework.test import APIClient

    client = APIClient()
    for token in malformed_tokens():
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/payments")
        assert response.status_code == 401, token
        assert len(queries.captured_queries) == 0, token
    client.credentials(HTTP_AUTHORIZATION="Bearer sk_live_" + "A" * 43)
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/payments").status_code == 401
    assert len(queries.captured_queries) == 1
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {merchant_a.api_key}")
    assert client.get("/payments").status_code == 200
