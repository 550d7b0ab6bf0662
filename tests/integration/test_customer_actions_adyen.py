"""Customer actions with the Adyen connector (ADR 0049, "Adyen"): the Adyen-compatible fake
(tests/support/adyen_fake.py, a separate process over real HTTP) answers ``spm_3ds``
``RedirectShopper`` with a ``GET`` redirect to its challenge page; the shopper approves or
denies there and comes back to our return endpoint with Adyen's ``redirectResult``, which the
service hands to ``/payments/details``: Adyen's answer is the outcome. After every test each
request the fake received and each answer it gave is validated against Adyen's OpenAPI
description of Checkout v71 (``/payments/details`` included). Adyen's own signed notifications
(the fake's) go through our endpoint: an ``AUTHORISATION`` ends an action whose shopper never
came back, and the ``CANCELLATION`` of the expiry's cancel ends an abandoned one ``canceled``.
The fake's books are the oracle."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.utils import timezone

from acquirers.specs import parse_acquirers
from ledger.services import audit_acquirer
from payments.acquirer.client import acquirer_client
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import Payment
from payments.reconciliation.actions import action_expiry_sweep
from tests.integration.test_acquirer_notifications import apply_all, merchant_events
from tests.integration.test_customer_actions import RETURN_URL, actions
from tests.support.adyen import AdyenFake

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"amount": 1000, "currency": "EUR", "payment_method": "spm_3ds", "reference": "o-3ds",
        "return_url": RETURN_URL}  # fmt: skip
_names = itertools.count()


@pytest.fixture(scope="module")
def adyen() -> Iterator[AdyenFake]:
    with AdyenFake.start() as process:
        yield process


@pytest.fixture
def acquirer(adyen: AdyenFake, settings, monkeypatch) -> Iterator[AdyenFake]:
    """The fake, emptied; the service's only acquirer an ``adyen`` one there (a new name per
    test: breakers start clean). Every exchange is validated against Checkout v71 after."""
    adyen.reset()
    monkeypatch.setenv("ADYEN_TEST_API_KEY", adyen.api_key)
    document = [{
        "name": f"adyen-3ds-{next(_names)}", "type": "adyen", "base_url": adyen.base_url,
        "api_key_env": "ADYEN_TEST_API_KEY", "merchant_account": "AcmeECOM",
        "return_url": "https://shop.example/adyen/return",
        "webhook_secret_env": "ADYEN_TEST_HMAC_KEYS",
        "policy": {"honours_idempotency_keys": True},
    }]  # fmt: skip
    environ = {"ADYEN_TEST_API_KEY": adyen.api_key, "ADYEN_TEST_HMAC_KEYS": adyen.hmac_key}
    settings.ACQUIRERS = parse_acquirers(
        json.dumps(document), known_currencies=frozenset(CURRENCY_EXPONENTS), environ=environ
    )
    yield adyen
    assert adyen.validate_journal() > 0


def create(merchant, body: dict = BODY) -> dict:
    response = merchant.create_payment(body)
    assert response.status_code == 201, response.content
    return response.json()


def answer_challenge(payment: dict, outcome: str) -> str:
    """The shopper's browser at the fake's challenge page; returns where Adyen sends the
    shopper (our return address with its ``redirectResult``)."""
    url = payment["next_action"]["url"]
    page = httpx.get(url)
    assert page.status_code == 200 and 'value="approve"' in page.text
    answered = httpx.post(url, data={"outcome": outcome})
    assert answered.status_code == 303
    return answered.headers["location"]


def come_back(client, return_address: str):
    """The shopper's browser at our return endpoint, with Adyen's query."""
    parts = urlsplit(return_address)
    assert f"{parts.scheme}://{parts.netloc}" == "http://testserver"  # PUBLIC_BASE_URL
    assert "redirectResult" in parse_qs(parts.query)
    return client.get(f"{parts.path}?{parts.query}")


def deliver(client, adyen: AdyenFake) -> list[str]:
    """Adyen's notifications so far through our endpoint (each stored once), then applied."""
    answer = client.generic(
        "POST", f"/acquirer_notifications/{acquirer_client().config.name}",
        adyen.notifications(), content_type="application/json",
    )  # fmt: skip
    assert (answer.status_code, answer.content) == (200, b"[accepted]")
    return apply_all()


def ours(adyen: AdyenFake, payment_id: str) -> list[dict]:
    return [p for p in adyen.payments() if p["merchantReference"] == payment_id]


def details_calls(adyen: AdyenFake) -> list[dict]:
    return [e for e in adyen.journal() if e["path"] == "/v71/payments/details"]


def test_redirect_shopper_requires_action_with_adyens_page(merchant_a, acquirer):
    payment = create(merchant_a)
    assert payment["status"] == "requires_action"
    (held,) = ours(acquirer, payment["id"])
    assert payment["next_action"]["url"] == f"{acquirer.url}/_fake/challenge/{held['pspReference']}"
    assert held["returnUrl"].startswith("http://testserver/payments/return/rtok_")
    assert Payment.objects.get(pk=payment["id"]).acquirer_reference == held["pspReference"]
    assert merchant_events(payment["id"]) == ["payment.requires_action"]


def test_approve_then_come_back_succeeded_by_adyens_details_answer(client, merchant_a, acquirer):
    payment = create(merchant_a)
    back = come_back(client, answer_challenge(payment, "approve"))
    assert back.status_code == 303
    assert back["Location"] == f"{RETURN_URL}&payment_id={payment['id']}"
    assert Payment.objects.get(pk=payment["id"]).status == "succeeded"
    (call,) = details_calls(acquirer)
    assert call["status"] == 200 and call["answer"]["resultCode"] == "Authorised"
    assert call["headers"]["idempotency-key"].startswith(f"details-{payment['id']}-")
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]
    assert actions(payment["id"]) == ["action_required", "action_completed"]


def test_deny_is_a_decline(client, merchant_a, acquirer):
    payment = create(merchant_a)
    come_back(client, answer_challenge(payment, "deny"))
    now = Payment.objects.get(pk=payment["id"])
    assert (now.status, now.decline_code) == ("declined", "3d_not_authenticated")
    assert merchant_events(payment["id"]) == ["payment.declined", "payment.requires_action"]


def test_a_manual_payment_approved_is_held_for_capture(client, merchant_a, acquirer):
    payment = create(merchant_a, {**BODY, "capture_method": "manual"})
    come_back(client, answer_challenge(payment, "approve"))
    assert Payment.objects.get(pk=payment["id"]).status == "requires_capture"
    (held,) = ours(acquirer, payment["id"])
    assert (held["manual"], held["captured"]) == (True, 0)


def test_coming_back_twice_records_the_outcome_once(client, merchant_a, acquirer):
    """The second return finds the payment final and asks Adyen nothing."""
    payment = create(merchant_a)
    address = answer_challenge(payment, "approve")
    first, second = come_back(client, address), come_back(client, address)
    assert first.status_code == second.status_code == 303
    assert first["Location"] == second["Location"]
    assert len(details_calls(acquirer)) == 1
    assert "applied" in deliver(client, acquirer)  # Adyen's AUTHORISATION, after: nothing new
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]
    assert actions(payment["id"]) == ["action_required", "action_completed"]


def test_a_result_adyen_refuses_is_no_new_outcome(client, merchant_a, acquirer):
    """A forged, unknown or already used ``redirectResult``: Adyen refuses it (422), the
    payment keeps waiting, the shopper still lands on the merchant's page."""
    payment = create(merchant_a)
    address = answer_challenge(payment, "approve")
    parts = urlsplit(address)
    forged = client.get(f"{parts.path}?redirectResult=forged")
    assert forged.status_code == 303
    assert Payment.objects.get(pk=payment["id"]).status == "requires_action"
    (refused,) = details_calls(acquirer)
    assert refused["status"] == 422
    come_back(client, address)
    assert Payment.objects.get(pk=payment["id"]).status == "succeeded"


def test_coming_back_without_a_result_changes_nothing(client, merchant_a, acquirer):
    payment = create(merchant_a)
    parts = urlsplit(answer_challenge(payment, "approve"))
    assert client.get(parts.path).status_code == 303
    assert Payment.objects.get(pk=payment["id"]).status == "requires_action"
    assert details_calls(acquirer) == []


def test_a_post_redirect_is_declined_shopper_action_required(merchant_a, acquirer):
    """No plain link can follow a POST redirect: declined as before customer actions."""
    payment = create(merchant_a, {**BODY, "payment_method": "spm_3ds_post"})
    assert (payment["status"], payment["decline_code"]) == ("declined", "shopper_action_required")
    assert payment["next_action"] is None


def test_without_return_url_a_redirect_is_declined(merchant_a, acquirer):
    body = {key: value for key, value in BODY.items() if key != "return_url"}
    payment = create(merchant_a, body)
    assert (payment["status"], payment["decline_code"]) == ("declined", "shopper_action_required")
    (sent,) = ours(acquirer, payment["id"])
    assert sent["returnUrl"] == "https://shop.example/adyen/return"


@pytest.mark.parametrize(("outcome", "status", "event"), [
    ("approve", "succeeded", "payment.succeeded"),
    ("deny", "declined", "payment.declined"),
])  # fmt: skip
def test_adyens_authorisation_ends_an_action_whose_shopper_never_came_back(
    client, merchant_a, acquirer, outcome, status, event
):
    """Without a look-up, Adyen's verified AUTHORISATION is the record (ADR 0047); a return
    afterwards finds the payment final and asks Adyen nothing."""
    payment = create(merchant_a)
    address = answer_challenge(payment, outcome)
    assert deliver(client, acquirer) == ["applied"]
    assert Payment.objects.get(pk=payment["id"]).status == status
    assert come_back(client, address).status_code == 303
    assert details_calls(acquirer) == []
    assert merchant_events(payment["id"]) == sorted(["payment.requires_action", event])


def test_an_abandoned_action_is_canceled_at_adyen_then_ends_canceled(client, merchant_a, acquirer):
    """No look-up to ask first: the sweep cancels by pspReference (Adyen answers
    ``received``: pending), and Adyen's CANCELLATION ends the payment ``canceled``."""
    payment = create(merchant_a)
    after = Payment.objects.get(pk=payment["id"]).action_expires_at + timedelta(seconds=1)
    assert action_expiry_sweep(clock=lambda: after) == {payment["id"]: "requires_action"}
    (canceled,) = ours(acquirer, payment["id"])
    assert canceled["cancelled"] is True
    assert [m["type"] for m in canceled["modifications"]] == ["cancels"]
    assert httpx.post(payment["next_action"]["url"], data={"outcome": "approve"}).status_code == 410
    assert deliver(client, acquirer) == ["applied"]
    now = Payment.objects.get(pk=payment["id"])
    assert (now.status, now.decline_code) == ("canceled", "action_expired")
    assert merchant_events(payment["id"]) == ["payment.canceled", "payment.requires_action"]
    assert actions(payment["id"]) == ["action_required", "action_expired"]
    # A later sweep finds nothing to expire; the cancel was sent once.
    assert action_expiry_sweep(clock=lambda: after + timedelta(minutes=5)) == {}
    assert len(ours(acquirer, payment["id"])[0]["modifications"]) == 1


def test_a_cancel_applied_after_an_approval_was_recorded_is_kept_for_review(
    client, merchant_a, acquirer
):
    """The residual race (ADR 0049, Adyen): the shopper approves and nobody applies Adyen's
    AUTHORISATION before the expiry's cancel is sent; the AUTHORISATION then records the
    approval (held for capture) and the cancel's CANCELLATION contradicts it: kept
    ``ignored`` with why, for an operator, never a second outcome."""
    payment = create(merchant_a, {**BODY, "capture_method": "manual"})
    answer_challenge(payment, "approve")
    after = Payment.objects.get(pk=payment["id"]).action_expires_at + timedelta(seconds=1)
    assert action_expiry_sweep(clock=lambda: after) == {payment["id"]: "requires_action"}
    assert deliver(client, acquirer) == ["applied", "ignored"]
    assert Payment.objects.get(pk=payment["id"]).status == "requires_capture"
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.requires_capture"]


def test_the_ledger_audit_agrees_with_adyen_on_every_customer_action(client, merchant_a, acquirer):
    """Waiting, approved, denied and expired, with Adyen's notifications applied: its answers
    and AUTHORISATION items agree with our rows (no second pspReference, no contradiction)."""
    since = timezone.now() - timedelta(minutes=1)
    waiting, approved, denied, expired = (create(merchant_a) for _ in range(4))
    come_back(client, answer_challenge(approved, "approve"))
    come_back(client, answer_challenge(denied, "deny"))
    expires_at = Payment.objects.get(pk=expired["id"]).action_expires_at
    Payment.objects.exclude(pk=expired["id"]).update(action_expires_at=expires_at + timedelta(1))
    assert action_expiry_sweep(clock=lambda: expires_at) == {expired["id"]: "requires_action"}
    deliver(client, acquirer)
    report = audit_acquirer(since=since)
    assert report.clean, report.discrepancies
    assert report.payments_by_status == {
        "requires_action": 1, "succeeded": 1, "declined": 1, "canceled": 1
    }  # fmt: skip
    assert waiting["status"] == "requires_action"
