"""Customer actions (3-D Secure by redirect, ADR 0049) on real PostgreSQL and the sandbox
acquirer over HTTP: a payment created with a ``return_url`` and ``tok_3ds_challenge`` is
``requires_action`` with its ``next_action``; the shopper answers the sandbox's challenge page
(real HTTP) and comes back to our return endpoint, which re-fetches the outcome and sends the
shopper on to the merchant's page. Approve, deny, returning twice, a return racing the
sandbox's notification, an abandoned action expired (voided and canceled at the sandbox), an
unknown token, and no ``return_url`` at all."""

from __future__ import annotations

import threading
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.test import Client
from django.utils import timezone

from gateway_client import VoidRequest
from gateway_client._call import Answer
from gateway_client.sandbox_dialect import SandboxDialect
from ledger.services import audit_acquirer
from merchant_client import ActionRequired, MerchantClient
from merchant_client import Payment as MerchantPayment
from payments.models import Payment, PaymentEvent
from payments.reconciliation.actions import action_expiry_sweep, action_outcome_record
from tests.integration.test_acquirer_notifications import (
    SANDBOX_PATH,
    apply_all,
    merchant_events,
    post,
)
from tests.integration.test_deferred_payments import DjangoTransport
from tests.support.api import PAYMENT_BODY
from tests.support.keys import idempotency_key
from tests.support.notifications import SANDBOX_SECRET, sandbox_notification

#: The create flow's one-statement claim runs outside any transaction, as in production.
pytestmark = pytest.mark.django_db(transaction=True)

RETURN_URL = "http://127.0.0.1:8123/orders/42/back?lang=en"
CHALLENGE = {**PAYMENT_BODY, "payment_method": "tok_3ds_challenge", "return_url": RETURN_URL}


def create(merchant, body=CHALLENGE, key: str | None = None) -> dict:
    response = merchant.create_payment(body, key=key or idempotency_key())
    assert response.status_code == 201, response.content
    return response.json()


def answer_challenge(payment: dict, outcome: str) -> str:
    """The shopper's browser at the sandbox: the page, then the button; returns where the
    sandbox sends the shopper (our return address)."""
    url = payment["next_action"]["url"]
    page = httpx.get(url)
    assert page.status_code == 200 and 'value="approve"' in page.text
    answered = httpx.post(url, data={"outcome": outcome})
    assert answered.status_code == 303
    return answered.headers["location"]


def come_back(client, return_address: str):
    """The shopper's browser at our return endpoint (no merchant key)."""
    parts = urlsplit(return_address)
    assert f"{parts.scheme}://{parts.netloc}" == "http://testserver"  # PUBLIC_BASE_URL
    return client.get(parts.path)


def actions(payment_id: str) -> list[str]:
    types = ("action_required", "action_completed", "action_expired")
    return list(
        PaymentEvent.objects.filter(payment_id=payment_id, type__in=types)
        .order_by("id")
        .values_list("type", flat=True)
    )


def test_approve_the_challenge_then_come_back_succeeded_with_one_event(client, merchant_a, sandbox):
    key = idempotency_key()
    payment = create(merchant_a, key=key)
    assert payment["status"] == "requires_action"
    assert payment["return_url"] == RETURN_URL
    assert payment["next_action"]["type"] == "redirect_to_url"
    assert payment["next_action"]["url"].startswith(f"{sandbox.url}/challenge/ch_")
    assert payment["next_action"]["expires_at"].endswith("Z")
    assert merchant_events(payment["id"]) == ["payment.requires_action"]

    back = come_back(client, answer_challenge(payment, "approve"))
    assert back.status_code == 303
    landed = urlsplit(back["Location"])
    assert landed._replace(query="").geturl() == "http://127.0.0.1:8123/orders/42/back"
    assert parse_qs(landed.query) == {"lang": ["en"], "payment_id": [payment["id"]]}
    assert back["Referrer-Policy"] == "no-referrer"

    now = merchant_a.client.get(f"/payments/{payment['id']}").json()
    assert (now["status"], now["next_action"], now["amount_captured"]) == ("succeeded", None, 1999)
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]
    assert actions(payment["id"]) == ["action_required", "action_completed"]
    (charge,) = sandbox.charges(payment["id"])
    assert (charge["status"], charge["captured"]) == ("approved", True)
    # The merchant's retry of its key answers what is true now.
    replay = merchant_a.create_payment(CHALLENGE, key=key).json()
    assert (replay["id"], replay["status"]) == (payment["id"], "succeeded")


def test_deny_the_challenge_declined(client, merchant_a, sandbox):
    payment = create(merchant_a)
    assert come_back(client, answer_challenge(payment, "deny")).status_code == 303
    now = Payment.objects.get(pk=payment["id"])
    assert (now.status, now.decline_code) == ("declined", "authentication_failed")
    assert merchant_events(payment["id"]) == ["payment.declined", "payment.requires_action"]


def test_a_manual_payment_approved_is_held_for_capture(client, merchant_a, sandbox):
    payment = create(merchant_a, {**CHALLENGE, "capture_method": "manual"})
    come_back(client, answer_challenge(payment, "approve"))
    assert Payment.objects.get(pk=payment["id"]).status == "requires_capture"
    assert sandbox.charges(payment["id"])[0]["captured"] is False


def test_coming_back_twice_records_the_outcome_once(client, merchant_a, sandbox):
    payment = create(merchant_a)
    address = answer_challenge(payment, "approve")
    first, second = come_back(client, address), come_back(client, address)
    assert first.status_code == second.status_code == 303
    assert first["Location"] == second["Location"]
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]
    assert actions(payment["id"]) == ["action_required", "action_completed"]


def test_coming_back_before_answering_changes_nothing(client, merchant_a, sandbox):
    """A shopper who skips the page (or a forged return) finds the payment still waiting:
    the look-up decides, never the browser."""
    payment = create(merchant_a)
    token_path = f"/payments/return/{Payment.objects.get(pk=payment['id']).return_token}"
    assert client.get(f"{token_path}?outcome=approve&status=succeeded").status_code == 303
    assert Payment.objects.get(pk=payment["id"]).status == "requires_action"
    assert actions(payment["id"]) == ["action_required"]


@pytest.mark.parametrize("order", ["notification_first", "together"])
def test_a_return_racing_the_notification_ends_once(client, merchant_a, sandbox, settings, order):
    """The sandbox's notification of the approval and the shopper's return, applied one after
    the other or at the same time: succeeded once, one merchant event, the notification
    applied."""
    settings.ACQUIRER_WEBHOOK_SECRETS = SANDBOX_SECRET
    payment = create(merchant_a)
    address = answer_challenge(payment, "approve")
    (charge,) = sandbox.charges(payment["id"])
    body, headers = sandbox_notification("charge.authorized", charge)
    assert post(client, SANDBOX_PATH, body, headers).status_code == 204
    if order == "notification_first":
        assert apply_all() == ["applied"]
        assert come_back(client, address).status_code == 303
    else:
        start = threading.Barrier(2)
        results: list[object] = []

        def notified() -> None:
            start.wait()
            results.append(apply_all())

        def returned() -> None:
            start.wait()
            results.append(come_back(client, address).status_code)

        threads = [threading.Thread(target=notified), threading.Thread(target=returned)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(map(str, results)) == ["303", "['applied']"]
    assert Payment.objects.get(pk=payment["id"]).status == "succeeded"
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]
    assert actions(payment["id"]) == ["action_required", "action_completed"]


def test_an_abandoned_action_expires_voided_at_the_sandbox_and_canceled(
    client, merchant_a, sandbox
):
    payment = create(merchant_a)
    expires_at = Payment.objects.get(pk=payment["id"]).action_expires_at
    assert action_expiry_sweep(clock=lambda: expires_at - timedelta(seconds=1)) == {}
    after = expires_at + timedelta(seconds=1)
    assert action_expiry_sweep(clock=lambda: after) == {payment["id"]: "canceled"}
    now = Payment.objects.get(pk=payment["id"])
    assert (now.status, now.decline_code) == ("canceled", "action_expired")
    assert merchant_events(payment["id"]) == ["payment.canceled", "payment.requires_action"]
    assert actions(payment["id"]) == ["action_required", "action_expired"]
    (charge,) = sandbox.charges(payment["id"])
    assert (charge["status"], charge["voided"]) == ("canceled", True)
    # The shopper comes back too late: the sandbox's page is closed, ours redirects unchanged.
    late = httpx.post(payment["next_action"]["url"], data={"outcome": "approve"})
    assert late.status_code == 409
    token = Payment.objects.get(pk=payment["id"]).return_token
    assert client.get(f"/payments/return/{token}").status_code == 303
    assert action_expiry_sweep(clock=lambda: after) == {}
    assert Payment.objects.get(pk=payment["id"]).status == "canceled"


def test_expiry_looks_up_first_a_shopper_who_approved_and_never_came_back(merchant_a, sandbox):
    payment = create(merchant_a)
    answer_challenge(payment, "approve")  # ... and the browser closed
    later = timezone.now() + timedelta(hours=1)
    assert action_expiry_sweep(clock=lambda: later) == {payment["id"]: "succeeded"}
    assert sandbox.charges(payment["id"])[0]["voided"] is False
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]


@pytest.mark.parametrize(
    "path",
    [
        "/payments/return/rtok_" + "A" * 43,  # well formed, names nothing
        "/payments/return/not-a-token",
        "/payments/return/rtok_x/y",
        "/payments/return/%00",
    ],
)
def test_an_unknown_or_malformed_token_is_a_404_problem(client, merchant_a, sandbox, path):
    create(merchant_a)
    response = client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "not_found"


def test_the_return_token_is_never_logged(client, merchant_a, sandbox, caplog):
    payment = create(merchant_a)
    token = Payment.objects.get(pk=payment["id"]).return_token
    caplog.clear()
    come_back(client, answer_challenge(payment, "approve"))
    assert caplog.records
    assert token not in caplog.text
    assert all(token not in str(record.__dict__) for record in caplog.records)


def test_without_return_url_the_challenge_is_a_decline(merchant_a, sandbox):
    body = {**PAYMENT_BODY, "payment_method": "tok_3ds_challenge"}
    payment = create(merchant_a, body)
    assert (payment["status"], payment["decline_code"]) == ("declined", "shopper_action_required")
    assert (payment["next_action"], payment["return_url"]) == (None, None)
    assert Payment.objects.get(pk=payment["id"]).return_token is None


@pytest.mark.parametrize(
    ("return_url", "code"),
    [
        ("ftp://shop.example/back", "invalid_url"),
        ("https://user:pw@shop.example/back", "invalid_url"),
        ("https://shop.example/back#top", "invalid_url"),
        ("http://10.0.0.1/back", "forbidden_address"),
    ],
)
def test_a_return_url_is_checked_as_a_webhook_url(merchant_a, sandbox, return_url, code):
    response = merchant_a.create_payment({**CHALLENGE, "return_url": return_url})
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert (error["field"], error["code"]) == ("return_url", code)
    assert Payment.objects.count() == 0


def test_without_a_public_base_url_customer_actions_are_off(merchant_a, sandbox, settings):
    settings.PUBLIC_BASE_URL = ""
    response = merchant_a.create_payment(CHALLENGE)
    assert response.status_code == 400
    assert response.json()["errors"][0]["code"] == "customer_actions_off"


def test_the_ledger_audit_agrees_with_the_sandbox_on_every_customer_action(
    client, merchant_a, sandbox
):
    """Waiting, approved, denied and expired: the audit finds each where the sandbox has it."""
    since = timezone.now() - timedelta(minutes=1)
    waiting, approved, denied, expired = (create(merchant_a) for _ in range(4))
    come_back(client, answer_challenge(approved, "approve"))
    come_back(client, answer_challenge(denied, "deny"))
    expires_at = Payment.objects.get(pk=expired["id"]).action_expires_at
    Payment.objects.exclude(pk=expired["id"]).update(action_expires_at=expires_at + timedelta(1))
    assert action_expiry_sweep(clock=lambda: expires_at) == {expired["id"]: "canceled"}
    report = audit_acquirer(since=since)
    assert report.clean, report.discrepancies
    assert report.payments_by_status == {
        "requires_action": 1, "succeeded": 1, "declined": 1, "canceled": 1
    }  # fmt: skip
    assert waiting["status"] == "requires_action"


def test_the_merchant_client_returns_action_required_then_reads_the_outcome(
    client, merchant_a, sandbox
):
    """merchant_client against the real API (in process): ActionRequired with the URL and the
    expiry; after the shopper's challenge and return, the succeeded payment without one."""
    api = MerchantClient("http://testserver", merchant_a.api_key, transport=DjangoTransport())
    result = api.create_payment(
        1999, "EUR", "tok_3ds_challenge", return_url=RETURN_URL, idempotency_key="mc-3ds-1"
    )
    assert isinstance(result, ActionRequired)
    assert result.url.startswith(f"{sandbox.url}/challenge/ch_")
    assert result.expires_at.tzinfo is not None and result.expires_at > timezone.now()
    assert (result.payment.status, result.payment.final) == ("requires_action", False)
    assert result.payment.return_url == RETURN_URL
    again = api.create_payment(
        1999, "EUR", "tok_3ds_challenge", return_url=RETURN_URL, idempotency_key="mc-3ds-1"
    )
    assert isinstance(again, ActionRequired) and again.replayed and again.url == result.url
    come_back(client, answer_challenge({"next_action": {"url": result.url}}, "approve"))
    done = api.get_payment(result.id)
    assert (done.status, done.next_action, done.final) == ("succeeded", None, True)
    declined = api.create_payment(1999, "EUR", "tok_3ds_challenge", idempotency_key="mc-3ds-2")
    assert isinstance(declined, MerchantPayment)
    assert declined.decline_code == "shopper_action_required"


def test_an_approval_voided_before_it_was_recorded_is_canceled(client, merchant_a, sandbox):
    """A manual payment the shopper approved and the expiry's void released before anyone
    recorded the approval: the void's charge (approved, voided) ends it canceled, never
    requires_capture (nothing is held any more); a late return changes nothing."""
    payment = create(merchant_a, {**CHALLENGE, "capture_method": "manual"})
    address = answer_challenge(payment, "approve")
    (charge,) = sandbox.charges(payment["id"])
    voided = httpx.post(
        f"{sandbox.url}/charges/{charge['id']}/void",
        json={},
        headers={"Authorization": f"Bearer {sandbox.api_key}", "Idempotency-Key": "v-1"},
    )
    assert voided.status_code == 200 and voided.json()["voided"] is True
    found = SandboxDialect().decode_void(
        Answer(200, httpx.Headers(), voided.content), VoidRequest(charge["id"], "v-1")
    )
    assert (found.approved, found.voided) == (True, True)
    assert action_outcome_record(payment["id"], found, how="expired", now=timezone.now()) == (
        "canceled"
    )
    assert come_back(client, address).status_code == 303
    assert Payment.objects.get(pk=payment["id"]).status == "canceled"
    assert merchant_events(payment["id"]) == ["payment.canceled", "payment.requires_action"]


def test_returns_a_notification_and_the_expiry_at_once_end_in_one_outcome(
    client, merchant_a, sandbox, settings
):
    """Four returns of the shopper (a double click, a reload, a back button), the sandbox's
    notification and an expiry sweep past the deadline, all released at once after the
    approval: one outcome (succeeded: the sweep looks up first), one action_completed event,
    one payment.succeeded, nothing voided at the sandbox."""
    settings.ACQUIRER_WEBHOOK_SECRETS = SANDBOX_SECRET
    payment = create(merchant_a)
    address = answer_challenge(payment, "approve")
    (charge,) = sandbox.charges(payment["id"])
    body, headers = sandbox_notification("charge.authorized", charge)
    assert post(client, SANDBOX_PATH, body, headers).status_code == 204
    after = Payment.objects.get(pk=payment["id"]).action_expires_at + timedelta(seconds=1)
    start = threading.Barrier(6)
    results: list[object] = []

    def run(work) -> None:
        start.wait()
        results.append(work())

    jobs = [lambda: come_back(Client(), address).status_code for _ in range(4)]
    jobs += [apply_all, lambda: action_expiry_sweep(clock=lambda: after)]
    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert len(results) == 6
    assert results.count(303) == 4
    assert Payment.objects.get(pk=payment["id"]).status == "succeeded"
    assert actions(payment["id"]) == ["action_required", "action_completed"]
    assert merchant_events(payment["id"]) == ["payment.requires_action", "payment.succeeded"]
    (charge,) = sandbox.charges(payment["id"])
    assert (charge["status"], charge["voided"]) == ("approved", False)
