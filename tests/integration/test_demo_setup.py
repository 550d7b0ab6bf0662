"""``manage.py demo_setup`` (make run) and ``--key-only`` (make key)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from merchants.models import ApiKey, Merchant
from merchants.services import api_key_hash
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("demo_setup", *args, stdout=out)
    return out.getvalue()


def test_key_only_prints_one_export_line_with_a_test_key():
    """make key: one line to eval; the key is stored by its hash, for the merchant demo."""
    (line,) = run("--key-only").splitlines()
    key = line.removeprefix("export API_KEY=")
    assert line.startswith("export API_KEY=sk_test_")
    assert ApiKey.objects.get(key_hash=api_key_hash(key)).merchant.name == "demo"


def test_the_banner_names_endpoints_left_registered_and_how_to_delete_them():
    """A receiver stopped before this fix (or killed) left an endpoint: make run says so."""
    assert "still registered" not in run("--api", "http://127.0.0.1:8100")
    now = timezone.now()
    WebhookEndpoint.objects.create(
        merchant=Merchant.objects.get(name="demo"), url="http://127.0.0.1:8091/webhooks",
        enabled_events=["*"], secret="whsec_x", created_at=now, updated_at=now,
        failing_since=now,
    )  # fmt: skip
    banner = run("--api", "http://127.0.0.1:8100")
    assert "still registered" in banner and "http://127.0.0.1:8091/webhooks  enabled" in banner
    assert "curl -X DELETE http://127.0.0.1:8100/webhook_endpoints/<id>" in banner
    assert "whsec_x" not in banner
