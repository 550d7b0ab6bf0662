"""API keys' lifetimes (merchants/services.py, ADR 0019): a rotated key keeps working for the
overlap, then expires at authentication; last_used_at is written at most once a minute."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from merchants.models import ApiKey
from merchants.services import (
    api_key_authenticate,
    api_key_issue,
    api_key_revoke,
    merchant_create,
)
from tests.support.fake_time import FakeClock

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_the_default_overlap_is_a_day(settings):
    """API_KEY_ROTATION_OVERLAP_SECONDS defaults to 24 h (docs/configuration.md)."""
    assert settings.API_KEY_ROTATION_OVERLAP_SECONDS == 24 * 3600


def test_a_rotated_key_works_for_the_overlap_then_expires():
    """Rotation at T0: the old key authenticates until T0 + 24 h (exclusive), never after; the
    new key has no end. A key rotated twice keeps its first end (an overlap never grows)."""
    clock = FakeClock(T0)
    merchant, first = merchant_create(name="shop")
    second = api_key_issue(merchant=merchant, now=clock())
    clock.advance(3600)
    api_key_issue(merchant=merchant, now=clock())  # a third key: the first's end stays
    assert ApiKey.objects.get(pk=first.api_key.pk).expires_at == T0 + timedelta(hours=24)
    assert ApiKey.objects.get(pk=second.api_key.pk).expires_at == clock() + timedelta(hours=24)
    before = T0 + timedelta(hours=24) - timedelta(microseconds=1)
    assert api_key_authenticate(first.raw, now=before) is not None
    assert api_key_authenticate(first.raw, now=T0 + timedelta(hours=24)) is None
    assert api_key_authenticate(second.raw, now=T0 + timedelta(hours=24)) is not None


def test_the_overlap_is_a_setting(settings):
    """API_KEY_ROTATION_OVERLAP_SECONDS=600: the old key ends 10 minutes after the rotation."""
    settings.API_KEY_ROTATION_OVERLAP_SECONDS = 600
    merchant, first = merchant_create(name="shop")
    api_key_issue(merchant=merchant, now=T0)
    assert api_key_authenticate(first.raw, now=T0 + timedelta(seconds=599)) is not None
    assert api_key_authenticate(first.raw, now=T0 + timedelta(seconds=600)) is None


def test_an_expired_key_answers_401_over_the_api():
    """The API checks the end at authentication: an expired key is 401 authentication_failed."""
    merchant, first = merchant_create(name="shop")
    api_key_issue(merchant=merchant, now=datetime.now(UTC) - timedelta(days=2))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {first.raw}")
    answer = client.get("/payments")
    assert answer.status_code == 401 and answer.json()["code"] == "authentication_failed"


def test_last_used_at_is_written_at_most_once_a_minute():
    """Requests at T0, +30 s, +59 s, +61 s, +90 s, +122 s: writes at T0, +61 s, +122 s only,
    each a conditional UPDATE; the others run no UPDATE at all."""
    clock = FakeClock(T0)
    _, issued = merchant_create(name="shop")
    writes = []
    for offset in (0, 30, 29, 2, 29, 32):
        clock.advance(offset)
        with CaptureQueriesContext(connection) as queries:
            assert api_key_authenticate(issued.raw, now=clock()) is not None
        updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
        assert len(updates) <= 1
        if updates:
            assert '"last_used_at" <' in updates[0]  # conditional: WHERE last_used_at < now - 60 s
            writes.append(clock())
    assert writes == [T0, T0 + timedelta(seconds=61), T0 + timedelta(seconds=122)]
    assert ApiKey.objects.get(pk=issued.api_key.pk).last_used_at == writes[-1]


def test_a_revoked_key_is_refused_at_once():
    """Revocation does not wait for any overlap."""
    _, issued = merchant_create(name="shop")
    api_key_revoke(api_key=issued.api_key)
    assert api_key_authenticate(issued.raw, now=datetime.now(UTC)) is None
