"""Stripe's notifications end to end: localstripe (tests/support/localstripe.py) sends its own
signed webhook (``payment_intent.succeeded``, its JSON indented as it renders it) to the
service's endpoint on a live server; the Stripe connector verifies those exact bytes with the
acquirer's secret, the row is stored, and applying it records one event on the payment."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from acquirers.specs import parse_acquirers
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import AcquirerNotification, PaymentEvent
from payments.notifications.apply import notification_apply
from tests.support.localstripe import LocalStripe
from tests.support.notifications import STRIPE_SECRET

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"amount": 1000, "currency": "EUR", "payment_method": "pm_card_visa", "reference": "n-1"}


def test_localstripes_signed_webhook_is_verified_stored_and_applied_once(
    live_server, merchant_a, settings
):
    with LocalStripe.start() as localstripe:
        settings.ACQUIRERS = parse_acquirers(
            json.dumps(
                [
                    {
                        "name": "stripe-ls",
                        "type": "stripe",
                        "base_url": localstripe.url,
                        "api_key_env": "STRIPE_KEY",
                        "api_version": "2024-06-20",
                        "webhook_secret_env": "STRIPE_WH",
                        "policy": {"honours_idempotency_keys": False},
                    }
                ]
            ),
            known_currencies=frozenset(CURRENCY_EXPONENTS),
            environ={"STRIPE_KEY": localstripe.api_key, "STRIPE_WH": STRIPE_SECRET},
        )
        httpx.post(
            f"{localstripe.url}/_config/webhooks/service",
            data={"url": f"{live_server.url}/acquirer_notifications/stripe-ls",
                  "secret": STRIPE_SECRET},
        ).raise_for_status()  # fmt: skip
        created = merchant_a.create_payment(BODY)
        assert created.status_code == 201, created.content
        payment_id = created.json()["id"]
        deadline = time.monotonic() + 10  # localstripe waits 1 s before it sends
        wanted = AcquirerNotification.objects.filter(event_type="payment_intent.succeeded")
        while not wanted.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    row = wanted.get()
    assert row.acquirer == "stripe-ls" and row.event_id.startswith("evt_")
    assert row.body.startswith("{\n  ")  # localstripe's own indented bytes, verified as sent
    assert json.loads(row.body)["data"]["object"]["metadata"]["payment_reference"] == payment_id
    assert notification_apply(row.pk).result == "applied"
    assert notification_apply(row.pk).result == "already_done"
    row.refresh_from_db()
    assert row.payment_id == payment_id
    events = PaymentEvent.objects.filter(payment_id=payment_id, type="acquirer_notification")
    assert events.count() == 1
