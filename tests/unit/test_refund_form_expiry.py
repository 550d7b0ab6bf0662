"""The admin refund form's signed one-time key expires before the key can be purged
(payments/admin/operator_actions.py, payments.E010), at an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.checks import run_checks

from payments.admin.operator_actions import (
    ADMIN_REFUND_KEY_PATTERN,
    OperationRefused,
    admin_refund_form_key,
    admin_refund_form_token,
)

NOW = datetime(2027, 1, 1, 9, 0, tzinfo=UTC)


def test_the_form_gives_its_key_until_it_expires_and_then_never():
    token = admin_refund_form_token(now=NOW)
    key = admin_refund_form_key(token, now=NOW + timedelta(seconds=3600), max_age=3600)
    assert ADMIN_REFUND_KEY_PATTERN.match(key) and token.startswith(key + ":")
    for later in (timedelta(seconds=3601), timedelta(hours=24, seconds=1), timedelta(days=400)):
        with pytest.raises(OperationRefused, match="older than 60 minutes"):
            admin_refund_form_key(token, now=NOW + later, max_age=3600)
    with pytest.raises(OperationRefused, match="older than"):  # rendered in the future
        admin_refund_form_key(token, now=NOW - timedelta(minutes=5), max_age=3600)


@pytest.mark.parametrize(
    "alter",
    [
        lambda t: t.replace(t.split(":")[1], str(int(t.split(":")[1]) + 7200)),  # a later time
        lambda t: "admin-refund-" + "0" * 32 + t[45:],  # another key
        lambda t: t.rsplit(":", 1)[0],  # no signature
        lambda t: "admin-refund-" + "a" * 32,  # the old, unsigned form
        lambda t: "",
    ],
)
def test_an_altered_form_is_refused(alter):
    token = admin_refund_form_token(now=NOW)
    with pytest.raises(OperationRefused, match="malformed"):
        admin_refund_form_key(alter(token), now=NOW, max_age=3600)


@pytest.mark.parametrize("seconds", [0, 86400, 90000])
def test_a_form_lifetime_not_below_the_key_retention_is_refused_at_start(settings, seconds):
    settings.IDEMPOTENCY_KEY_RETENTION_SECONDS = 86400
    settings.ADMIN_REFUND_FORM_SECONDS = seconds
    assert "payments.E010" in {e.id for e in run_checks()}
    settings.ADMIN_REFUND_FORM_SECONDS = 3600
    assert "payments.E010" not in {e.id for e in run_checks()}
