"""Customer actions with the Stripe connector (ADR 0049): localstripe's 3-D Secure test card
(``4000002760003184``) takes the PaymentIntent to ``requires_action``; with Stripe's hosted
page played by tests/support/stripe_3ds.py (localstripe refuses ``return_url`` and answers only
Stripe.js's ``use_stripe_sdk``), the shopper approves or denies there, comes back through our
return endpoint, and the service completes the payment by reading the PaymentIntent. An
abandoned one is canceled at localstripe by the expiry. localstripe's own listing is the
oracle: one PaymentIntent per payment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from acquirers.specs import parse_acquirers
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import Payment
from payments.reconciliation.actions import action_expiry_sweep
from tests.integration.test_acquirer_notifications import merchant_events
from tests.integration.test_customer_actions import RETURN_URL, come_back
from tests.support.localstripe import LocalStripe
from tests.support.stripe_3ds import HostedChallenge

pytestmark = pytest.mark.django_db(transaction=True)

THREE_DS_CARD = "4000002760003184"  # localstripe's: authentication required


@pytest.fixture(scope="module")
def localstripe() -> Iterator[LocalStripe]:
    with LocalStripe.start() as process:
        yield process


@pytest.fixture
def hosted(localstripe: LocalStripe, settings, monkeypatch) -> Iterator[HostedChallenge]:
    """localstripe, emptied, behind Stripe's hosted 3-D Secure page; the service's only
    acquirer a ``stripe`` one there."""
    localstripe.flush()
    monkeypatch.setenv("STRIPE_3DS_SECRET_KEY", localstripe.api_key)
    with HostedChallenge(localstripe.url, localstripe.api_key) as page:
        document = [{
            "name": "stripe-3ds", "type": "stripe", "base_url": page.url,
            "api_key_env": "STRIPE_3DS_SECRET_KEY", "api_version": "2024-06-20",
            "policy": {"honours_idempotency_keys": False},
        }]  # fmt: skip
        settings.ACQUIRERS = parse_acquirers(
            json.dumps(document), known_currencies=frozenset(CURRENCY_EXPONENTS)
        )
        yield page


def card(localstripe: LocalStripe, number: str = THREE_DS_CARD) -> str:
    """A PaymentMethod at localstripe for the card ``number`` (what Stripe.js makes)."""
    answer = httpx.post(
        f"{localstripe.url}/v1/payment_methods",
        data={"type": "card", "card[number]": number, "card[exp_month]": "12",
              "card[exp_year]": "2034", "card[cvc]": "123"},
        auth=(localstripe.api_key, ""),
    )  # fmt: skip
    answer.raise_for_status()
    return answer.json()["id"]


def create(merchant, localstripe: LocalStripe) -> dict:
    body = {"amount": 2000, "currency": "EUR", "payment_method": card(localstripe),
            "return_url": RETURN_URL}  # fmt: skip
    response = merchant.create_payment(body)
    assert response.status_code == 201, response.content
    payment = response.json()
    assert payment["status"] == "requires_action"
    return payment


def shopper(payment: dict, outcome: str) -> str:
    url = payment["next_action"]["url"]
    assert httpx.get(url).status_code == 200
    answered = httpx.post(url, data={"outcome": outcome})
    assert answered.status_code == 303
    return answered.headers["location"]


def intents(localstripe: LocalStripe, payment_id: str) -> list[dict]:
    return [
        pi
        for pi in localstripe.payment_intents()
        if pi["metadata"].get("payment_reference") == payment_id
    ]


def test_a_3ds_card_requires_action_and_completes_on_return(
    client, merchant_a, localstripe, hosted
):
    payment = create(merchant_a, localstripe)
    assert payment["next_action"]["url"].startswith(f"{hosted.url}/3ds/pi_")
    (waiting,) = intents(localstripe, payment["id"])
    assert waiting["status"] == "requires_action"
    back = come_back(client, shopper(payment, "approve"))
    assert back.status_code == 303
    assert Payment.objects.get(pk=payment["id"]).status == "succeeded"
    (done,) = intents(localstripe, payment["id"])
    assert (done["id"], done["status"]) == (waiting["id"], "succeeded")
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]


def test_a_failed_authentication_is_a_decline(client, merchant_a, localstripe, hosted):
    payment = create(merchant_a, localstripe)
    come_back(client, shopper(payment, "deny"))
    now = Payment.objects.get(pk=payment["id"])
    assert (now.status, now.decline_code) == (
        "declined",
        "payment_intent_authentication_failure",
    )
    assert len(intents(localstripe, payment["id"])) == 1


def test_an_abandoned_action_is_canceled_at_stripe(merchant_a, localstripe, hosted):
    payment = create(merchant_a, localstripe)
    expires_at = Payment.objects.get(pk=payment["id"]).action_expires_at
    after = expires_at + timedelta(seconds=1)
    assert action_expiry_sweep(clock=lambda: after) == {payment["id"]: "canceled"}
    (canceled,) = intents(localstripe, payment["id"])
    assert canceled["status"] == "canceled"
    assert merchant_events(payment["id"]) == ["payment.canceled", "payment.requires_action"]
