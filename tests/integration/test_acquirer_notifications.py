"""Provider notifications on real PostgreSQL and the sandbox acquirer over HTTP
(payments/notifications/, docs/connectors.md "Notifications", ADR 0046): the endpoint, storage
first, deduplication, the apply task's hint-to-re-fetch and its wait for our own phase 2, and
disputes (sandbox and Stripe) into the payment, the merchant's events and the ledger audit."""

from __future__ import annotations

import importlib
import json
import threading
import time
from datetime import timedelta

import httpx
import pytest
from django.apps import apps
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.db import connection
from django.utils import timezone
from prometheus_client import REGISTRY

from acquirers.specs import parse_acquirers
from ledger.disputes import dispute_counts
from ledger.services import audit_acquirer
from merchant_client.types import decode_payment
from payments.acquirer.authorize import authorization_request
from payments.acquirer.client import acquirer_client
from payments.models import AcquirerNotification, Dispute, Payment, PaymentEvent
from payments.notifications.apply import notification_apply
from tests.factories import PaymentFactory
from tests.support.api import PAYMENT_BODY
from tests.support.notifications import (
    SANDBOX_SECRET,
    STRIPE_SECRET,
    sandbox_notification,
    stripe_dispute_event,
    stripe_signed,
)
from webhooks.models import Event

#: Tests that create payments through the API: its one-statement claim runs outside any
#: transaction, as in production, so their database is not wrapped in one.
through_the_api = pytest.mark.django_db(transaction=True)
pytestmark = pytest.mark.django_db

SANDBOX_PATH = "/acquirer_notifications/sandbox"
STRIPE = "stripe-eu"


@pytest.fixture
def sandbox_notifications(settings, sandbox):
    """The default acquirer (the sandbox) takes notifications signed with SANDBOX_SECRET."""
    settings.ACQUIRER_WEBHOOK_SECRETS = SANDBOX_SECRET
    return sandbox


@pytest.fixture
def stripe_acquirer(settings, sandbox_notifications):
    """Two acquirers: the sandbox, and a Stripe one taking notifications signed with
    STRIPE_SECRET (its API is not called: disputes are records)."""
    settings.ACQUIRERS = parse_acquirers(
        json.dumps(
            [
                {
                    "name": "sandbox",
                    "base_url": sandbox_notifications.url,
                    "api_key": sandbox_notifications.api_key,
                    "webhook_secret_env": "SANDBOX_WH",
                },
                {
                    "name": STRIPE,
                    "type": "stripe",
                    "base_url": "http://127.0.0.1:9",
                    "api_key_env": "STRIPE_KEY",
                    "api_version": "2024-06-20",
                    "webhook_secret_env": "STRIPE_WH",
                },
            ]
        ),
        environ={
            "SANDBOX_WH": SANDBOX_SECRET,
            "STRIPE_WH": STRIPE_SECRET,
            "STRIPE_KEY": "sk_test_notifications",
        },
    )


def charged_payment(merchant, amount: int = 1999) -> Payment:
    """A succeeded payment of ``merchant`` with its charge recorded at the sandbox (through the
    gateway client, as phase 2 leaves it), without the API's create flow."""
    payment = PaymentFactory(merchant=merchant, amount=amount, acquirer="sandbox")
    authorization = acquirer_client().authorize(authorization_request(payment))
    Payment.objects.filter(pk=payment.pk).update(
        acquirer_reference=authorization.acquirer_reference
    )
    payment.refresh_from_db()
    return payment


def post(client, path: str, body: bytes, headers: dict[str, str]):
    meta = {
        f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items() if k != "content-type"
    }
    return client.generic("POST", path, body, content_type="application/json", **meta)


def post_stripe(client, body: bytes):
    return post(
        client,
        f"/acquirer_notifications/{STRIPE}",
        body,
        {"stripe-signature": stripe_signed(body, [STRIPE_SECRET])},
    )


def rejected(acquirer: str, reason: str) -> float:
    labels = {"acquirer": acquirer, "reason": reason}
    return (
        REGISTRY.get_sample_value("payments_acquirer_notifications_rejected_total", labels) or 0.0
    )


def apply_all() -> list[str]:
    """Apply every stored notification still ``received`` (what the task does), oldest first."""
    rows = AcquirerNotification.objects.filter(status="received").order_by("id")
    return [notification_apply(pk).result for pk in rows.values_list("pk", flat=True)]


def merchant_events(object_id: str) -> list[str]:
    """The merchant's event types about ``object_id``, sorted (ids are random)."""
    return sorted(
        Event.objects.filter(object_id=object_id).order_by("id").values_list("type", flat=True)
    )


def notification_events(payment_id: str) -> int:
    return PaymentEvent.objects.filter(payment_id=payment_id, type="acquirer_notification").count()


# -- the endpoint ------------------------------------------------------------------------------


def test_the_same_json_reindented_is_refused_counted_and_nothing_is_stored(
    client, sandbox_notifications
):
    body, headers = sandbox_notification("charge.authorized", {"id": "ch_1", "reference": "pay_x"})
    before = rejected("sandbox", "bad_signature")
    reindented = json.dumps(json.loads(body), indent=2).encode()
    answer = post(client, SANDBOX_PATH, reindented, headers)
    assert answer.status_code == 400
    assert answer.json()["code"] == "notification_refused"
    assert SANDBOX_SECRET not in answer.content.decode()
    assert AcquirerNotification.objects.count() == 0
    assert rejected("sandbox", "bad_signature") == before + 1
    assert post(client, SANDBOX_PATH, body, {}).status_code == 400  # unsigned
    assert rejected("sandbox", "missing_signature") >= 1


def test_an_acquirer_without_secrets_or_unknown_has_no_endpoint(client, sandbox, settings):
    body, headers = sandbox_notification("charge.authorized", {"id": "ch_1", "reference": "p"})
    settings.ACQUIRER_WEBHOOK_SECRETS = ""
    assert post(client, SANDBOX_PATH, body, headers).status_code == 404
    settings.ACQUIRER_WEBHOOK_SECRETS = SANDBOX_SECRET
    assert post(client, "/acquirer_notifications/nobody", body, headers).status_code == 404
    assert client.get(SANDBOX_PATH).status_code == 405
    assert AcquirerNotification.objects.count() == 0


def test_a_replayed_notification_changes_nothing(client, merchant_a, sandbox_notifications):
    """Delivered three times (the provider's retries, a replay): stored once, applied once,
    answered as the sandbox expects every time."""
    payment = {"id": charged_payment(merchant_a.merchant).pk}
    charge = sandbox_notifications.charges(payment["id"])[0]
    body, headers = sandbox_notification("charge.authorized", charge)
    assert post(client, SANDBOX_PATH, body, headers).status_code == 204
    assert apply_all() == ["applied"]
    for _ in range(2):
        assert post(client, SANDBOX_PATH, body, headers).status_code == 204
    assert apply_all() == []
    row = AcquirerNotification.objects.get()
    assert (row.status, row.payment_id, row.event_type) == (
        "applied",
        payment["id"],
        "charge.authorized",
    )
    assert notification_events(payment["id"]) == 1
    assert notification_apply(row.pk).result == "already_done"
    assert Payment.objects.get(pk=payment["id"]).status == "succeeded"


def test_a_card_number_in_a_notification_is_redacted_before_it_is_stored(
    client, merchant_a, sandbox_notifications
):
    payment = {"id": charged_payment(merchant_a.merchant).pk}
    charge = {**sandbox_notifications.charges(payment["id"])[0], "note": "card 4111 1111 1111 1111"}
    body, headers = sandbox_notification("charge.authorized", charge)
    assert post(client, SANDBOX_PATH, body, headers).status_code == 204
    stored = AcquirerNotification.objects.get().body
    assert "4111" not in stored and "[card number redacted]" in stored
    assert apply_all() == ["applied"]


# -- early, and at once -------------------------------------------------------------------------


@through_the_api
def test_the_sandboxs_notification_before_our_phase_2_is_applied_once_after_it(
    live_server, merchant_a, sandbox_notifications, settings, single_attempt
):
    """The sandbox records the charge and notifies at once, then hangs its answer; our request
    is still waiting (its key in progress) when the notification is stored: applying it waits.
    The request ends 202 processing (an ambiguous timeout); the notification, applied now,
    resolves the payment at once (a look-up): succeeded, one charge, one notification event."""
    settings.ACQUIRER_READ_TIMEOUT_SECONDS = 2.0
    sandbox = sandbox_notifications
    httpx.put(
        f"{sandbox.url}/_sandbox/notifications",
        json={"url": f"{live_server.url}{SANDBOX_PATH}", "secrets": [SANDBOX_SECRET]},
    ).raise_for_status()
    answers = []

    def create() -> None:
        body = {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
        answers.append(merchant_a.create_payment(body))
        connection.close()

    request = threading.Thread(target=create)
    request.start()
    try:
        deadline = time.monotonic() + 1.8
        while not AcquirerNotification.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        [row] = AcquirerNotification.objects.all()
        assert row.event_type == "charge.authorized"
        early = notification_apply(row.pk)
        assert request.is_alive()  # our phase 2 has not committed
        assert early.result == "retry_later"
    finally:
        request.join()
        httpx.delete(f"{sandbox.url}/_sandbox/notifications")
    assert answers[0].status_code == 202
    payment_id = answers[0].json()["id"]
    assert Payment.objects.get(pk=payment_id).status == "processing"
    applied = notification_apply(row.pk)
    assert applied.result == "applied"
    payment = Payment.objects.get(pk=payment_id)
    assert payment.status == "succeeded"
    assert notification_events(payment_id) == 1
    assert sandbox.stats()["charges_total"] == 1
    assert PaymentEvent.objects.filter(payment_id=payment_id, type="reconciled").count() == 1


def test_a_stripe_dispute_before_we_know_the_payment_intent_waits_then_applies(
    client, stripe_acquirer
):
    payment = PaymentFactory(acquirer=STRIPE, status="processing", acquirer_reference=None)
    body = stripe_dispute_event(
        "charge.dispute.created", dispute_id="dp_early", payment_intent="pi_early",
        amount=1000, currency="eur", status="needs_response",
    )  # fmt: skip
    assert post_stripe(client, body).json() == {"received": True}
    assert apply_all() == ["retry_later"]
    row = AcquirerNotification.objects.get()
    assert row.status == "received" and row.next_attempt_at > timezone.now()
    Payment.objects.filter(pk=payment.pk).update(acquirer_reference="pi_early", status="succeeded")
    assert apply_all() == ["applied"]
    assert Payment.objects.get(pk=payment.pk).amount_disputed == 1000


# -- disputes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["won", "lost"])
def test_a_sandbox_dispute_created_then_closed(client, merchant_a, sandbox_notifications, outcome):
    """Opened and closed at the sandbox: the payment's disputed amount, the merchant's events
    and the ledger audit say the same."""
    since = timezone.now() - timedelta(minutes=1)
    sandbox = sandbox_notifications
    charged = charged_payment(merchant_a.merchant)
    payment = {"id": charged.pk, "acquirer_reference": charged.acquirer_reference}
    opened = httpx.post(
        f"{sandbox.url}/_sandbox/disputes",
        json={"charge": payment["acquirer_reference"], "amount": 1500, "reason": "fraudulent"},
    ).json()
    assert (
        post(client, SANDBOX_PATH, *sandbox_notification("dispute.created", opened)).status_code
        == 204
    )
    assert apply_all() == ["applied"]
    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.amount, dispute.currency) == ("needs_response", 1500, "EUR")
    assert dispute.evidence_due_by is not None
    assert Payment.objects.get(pk=payment["id"]).amount_disputed == 1500
    document = client.get(
        f"/payments/{payment['id']}", HTTP_AUTHORIZATION=f"Bearer {merchant_a.api_key}"
    ).json()
    assert document["amount_disputed"] == 1500
    assert decode_payment(document).amount_disputed == 1500  # the merchant client reads it
    closed = httpx.post(
        f"{sandbox.url}/_sandbox/disputes/{opened['id']}", json={"status": outcome}
    ).json()
    assert (
        post(client, SANDBOX_PATH, *sandbox_notification("dispute.closed", closed)).status_code
        == 204
    )
    assert apply_all() == ["applied"]
    dispute.refresh_from_db()
    held = 0 if outcome == "won" else 1500
    assert (dispute.status, dispute.closed_at is not None) == (outcome, True)
    assert Payment.objects.get(pk=payment["id"]).amount_disputed == held
    assert merchant_events(dispute.id) == ["dispute.closed", "dispute.created"]
    assert (
        json.loads(Event.objects.filter(type="dispute.closed").get().data)["object"]["status"]
        == outcome
    )
    report = audit_acquirer(since=since)
    assert report.disputes.by_status == {outcome: 1}
    assert report.disputes.amounts == {outcome: {"EUR": 1500}}
    assert report.disputes.inconsistent == []
    assert f"{outcome} 1 (1500 EUR)" in report.disputes.summary()


@pytest.mark.parametrize("outcome", ["won", "lost"])
def test_a_stripe_dispute_created_then_closed(client, stripe_acquirer, outcome):
    payment = PaymentFactory(acquirer=STRIPE, acquirer_reference="pi_42", amount=2000)
    common = {"dispute_id": "dp_42", "payment_intent": "pi_42", "amount": 2000, "currency": "eur"}
    created = stripe_dispute_event("charge.dispute.created", status="needs_response", **common)
    assert post_stripe(client, created).status_code == 200
    assert apply_all() == ["applied"]
    assert Payment.objects.get(pk=payment.pk).amount_disputed == 2000
    closed = stripe_dispute_event("charge.dispute.closed", status=outcome, **common)
    assert post_stripe(client, closed).status_code == 200
    assert apply_all() == ["applied"]
    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.provider_status, dispute.acquirer) == (outcome, outcome, STRIPE)
    held = 0 if outcome == "won" else 2000
    assert Payment.objects.get(pk=payment.pk).amount_disputed == held
    assert merchant_events(dispute.id) == ["dispute.closed", "dispute.created"]
    counts = dispute_counts([payment.pk])
    assert (counts.by_status, counts.amounts, counts.inconsistent) == (
        {outcome: 1},
        {outcome: {"EUR": 2000}},
        [],
    )


def test_dispute_notifications_out_of_order_end_closed_once(client, stripe_acquirer):
    """closed arrives first, then the older created and updated: the dispute stays lost, the
    merchant has each event once, nothing reopens."""
    payment = PaymentFactory(acquirer=STRIPE, acquirer_reference="pi_7", amount=500)
    common = {"dispute_id": "dp_7", "payment_intent": "pi_7", "amount": 500, "currency": "eur"}
    now = int(time.time())
    bodies = [
        stripe_dispute_event("charge.dispute.closed", status="lost", created=now, **common),
        stripe_dispute_event(
            "charge.dispute.created", status="needs_response", created=now - 60, **common
        ),
        stripe_dispute_event(
            "charge.dispute.updated", status="under_review", created=now - 30, **common
        ),
    ]
    for body in bodies:
        assert post_stripe(client, body).status_code == 200
    assert apply_all() == ["applied", "applied", "applied"]
    dispute = Dispute.objects.get()
    assert dispute.status == "lost"
    assert merchant_events(dispute.id) == ["dispute.closed", "dispute.created"]
    assert Payment.objects.get(pk=payment.pk).amount_disputed == 500


def test_a_dispute_in_another_currency_is_ignored_not_recorded(client, stripe_acquirer):
    PaymentFactory(acquirer=STRIPE, acquirer_reference="pi_8", amount=500, currency="EUR")
    body = stripe_dispute_event("charge.dispute.created", dispute_id="dp_8", payment_intent="pi_8",
                                amount=500, currency="usd", status="needs_response")  # fmt: skip
    assert post_stripe(client, body).status_code == 200
    assert apply_all() == ["ignored"]
    assert Dispute.objects.count() == 0
    assert "USD" in AcquirerNotification.objects.get().last_error


# -- the console ----------------------------------------------------------------------------------


def test_operators_see_disputes_and_notifications_read_only(client, stripe_acquirer):
    roles = importlib.import_module("payments.migrations.0004_operations_roles")
    roles.create_roles(apps, None)
    user = User.objects.create_user("support-1", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="support"))
    client.force_login(user)
    payment = PaymentFactory(acquirer=STRIPE, acquirer_reference="pi_9", amount=900)
    body = stripe_dispute_event("charge.dispute.created", dispute_id="dp_9", payment_intent="pi_9",
                                amount=900, currency="eur", status="needs_response")  # fmt: skip
    post_stripe(client, body)
    apply_all()
    dispute = Dispute.objects.get()
    listing = client.get("/admin/payments/dispute/").content.decode()
    assert dispute.id in listing and payment.pk in listing and "9.00 EUR" in listing
    # An object's id in an admin URL is quoted (quote()): unquoted, "dsp_24..." reads as "dsp$..."
    # (the admin's escape of "$"), not found, and the admin redirects home with 302.
    assert client.get(f"/admin/payments/dispute/{quote(dispute.id)}/change/").status_code == 200
    assert client.get("/admin/payments/dispute/add/").status_code == 403
    notifications = client.get("/admin/payments/acquirernotification/").content.decode()
    assert "charge.dispute.created" in notifications and STRIPE_SECRET not in notifications
    answer = client.get(f"/admin/payments/payment/{quote(payment.pk)}/change/")
    assert answer.status_code == 200, (answer.status_code, answer.get("Location"))
    page = answer.content.decode()
    assert "amount disputed (open and lost disputes)" in page.lower()


def test_a_body_above_the_api_limit_is_read_in_full_and_one_above_256_kib_is_refused(
    client, sandbox_notifications
):
    """A notification is bounded by its own limit (256 KiB), not the API's 16 KiB: a 40 KiB
    one is verified on all its bytes and stored; a 300 KiB one answers 413, nothing stored."""
    big = {"id": "ch_1", "reference": "pay_x", "padding": "x" * 40_000}
    body, headers = sandbox_notification("charge.authorized", big)
    assert post(client, SANDBOX_PATH, body, headers).status_code == 204
    assert len(AcquirerNotification.objects.get().body) == len(body)
    huge, headers = sandbox_notification("charge.authorized", {**big, "padding": "x" * 300_000})
    answer = post(client, SANDBOX_PATH, huge, headers)
    assert (answer.status_code, answer.json()["code"]) == (413, "body_too_large")
    assert AcquirerNotification.objects.count() == 1
