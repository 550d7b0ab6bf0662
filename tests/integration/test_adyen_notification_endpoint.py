"""Adyen's notifications through the service's endpoint (``POST /acquirer_notifications/<name>``),
on a real PostgreSQL, with the Adyen-compatible fake (tests/support/adyen_fake.py) over HTTP:
its own HMAC-signed notifications settle the captures and refunds it answered ``received``
(ADR 0047); forged, foreign-account and contradicting items change nothing.

The fake signs with Adyen's published scheme; ``gateway_client.adyen_notifications`` is checked
against Adyen's own SDK vectors in tests/unit/test_adyen_notifications.py.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from acquirers.specs import parse_acquirers
from gateway_client.adyen_notifications import signature
from ledger.services import Category, audit_acquirer
from payments.acquirer.client import acquirer_client
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import (
    AcquirerNotification,
    Dispute,
    Payment,
    PaymentEvent,
    PaymentOperation,
)
from payments.notifications.apply import notification_apply
from tests.support.adyen import AdyenFake
from webhooks.models import Event

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"amount": 1000, "currency": "EUR", "payment_method": "spm_visa", "reference": "o-1"}
ACCOUNT = "AcmeECOM"
_names = itertools.count()


@pytest.fixture(scope="module")
def adyen() -> Iterator[AdyenFake]:
    with AdyenFake.start() as process:
        yield process


@pytest.fixture
def acquirer(adyen: AdyenFake, settings, monkeypatch) -> str:
    """The service's only acquirer: an ``adyen`` one at the fake (emptied), taking
    notifications signed with the fake's HMAC key. Its name (new per test)."""
    adyen.reset()
    monkeypatch.setenv("ADYEN_TEST_API_KEY", adyen.api_key)
    name = f"adyen-n{next(_names)}"
    document = [
        {
            "name": name,
            "type": "adyen",
            "base_url": adyen.url + "/v71",
            "api_key_env": "ADYEN_TEST_API_KEY",
            "merchant_account": ACCOUNT,
            "return_url": "https://shop.example/adyen/return",
            "webhook_secret_env": "ADYEN_TEST_HMAC_KEYS",
            "policy": {"honours_idempotency_keys": True},
        }
    ]
    # Rotation: a newer key first, the fake's (older) second; either verifies.
    environ = {
        "ADYEN_TEST_API_KEY": adyen.api_key,
        "ADYEN_TEST_HMAC_KEYS": f"{'ab' * 32} {adyen.hmac_key}",
    }
    settings.ACQUIRERS = parse_acquirers(
        json.dumps(document), known_currencies=frozenset(CURRENCY_EXPONENTS), environ=environ
    )
    assert acquirer_client().config.name == name
    return name


def notify(client, acquirer: str, body: bytes):
    return client.generic(
        "POST", f"/acquirer_notifications/{acquirer}", body, content_type="application/json"
    )


def apply_all() -> list[str]:
    """Apply every stored notification still ``received`` (what the task does), oldest first."""
    rows = AcquirerNotification.objects.filter(status="received").order_by("id")
    return [notification_apply(pk).result for pk in rows.values_list("pk", flat=True)]


def post(merchant, payment_id: str, action: str, body: dict, key: str):
    return merchant.client.post(
        f"/payments/{payment_id}/{action}", body, format="json", HTTP_IDEMPOTENCY_KEY=key
    )


def signed_item(key: str, **fields) -> dict:
    """A ``NotificationRequestItem`` with ``fields``, signed with ``key`` (Adyen's scheme)."""
    item = {"merchantAccountCode": ACCOUNT, "success": "true", **fields}
    item["additionalData"] = {
        **item.get("additionalData", {}),
        "hmacSignature": signature(item, key),
    }
    return {"NotificationRequestItem": item}


def batch(*items: dict) -> bytes:
    return json.dumps({"live": "false", "notificationItems": list(items)}).encode()


def test_a_capture_and_a_refund_received_are_settled_through_the_endpoint_once(
    merchant_a, adyen, acquirer
):
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    payment_id = created.json()["id"]
    assert post(merchant_a, payment_id, "capture", {"amount": 700}, "cap-1").status_code == 202
    answer = notify(merchant_a.client, acquirer, adyen.notifications())
    assert (answer.status_code, answer.content) == (200, b"[accepted]")
    # The fake's body holds every event so far: the authorization (a hint) and the capture.
    assert sorted(AcquirerNotification.objects.values_list("event_type", flat=True)) == [
        "AUTHORISATION", "CAPTURE",
    ]  # fmt: skip
    # The authorization's hint waits while the capture is pending (no look-up at Adyen can
    # confirm it); the capture's record settles it; the hint then applies.
    assert apply_all() == ["retry_later", "applied"]
    assert apply_all() == ["applied"]
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.amount_captured) == ("succeeded", 700)
    capture = PaymentOperation.objects.get(payment_id=payment_id, kind="capture")
    assert capture.status == "succeeded"
    assert (
        PaymentEvent.objects.filter(payment_id=payment_id, type="acquirer_notification").count()
        == 2
    )

    assert post(merchant_a, payment_id, "refunds", {"amount": 300}, "ref-1").status_code == 202
    again = notify(merchant_a.client, acquirer, adyen.notifications())  # redelivers the first two
    assert again.status_code == 200
    assert AcquirerNotification.objects.count() == 3
    assert apply_all() == ["applied"]
    refund = PaymentOperation.objects.get(payment_id=payment_id, kind="refund")
    assert (refund.status, refund.amount) == ("succeeded", 300)
    assert Payment.objects.get(pk=payment_id).amount_refunded == 300

    # At least once: the same body a third time stores nothing and changes nothing.
    assert notify(merchant_a.client, acquirer, adyen.notifications()).status_code == 200
    assert AcquirerNotification.objects.count() == 3
    assert apply_all() == []
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.amount_captured, payment.amount_refunded) == (
        "succeeded", 700, 300,
    )  # fmt: skip


def test_a_forged_item_or_another_accounts_is_refused_and_nothing_is_stored(
    merchant_a, adyen, acquirer
):
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    payment_id = created.json()["id"]
    assert post(merchant_a, payment_id, "capture", {}, "cap-1").status_code == 202
    document = json.loads(adyen.notifications())
    capture_item = document["notificationItems"][-1]["NotificationRequestItem"]
    tampered = json.loads(json.dumps(capture_item))
    tampered["success"] = "false"  # the signature no longer matches
    unsigned = {k: v for k, v in capture_item.items() if k != "additionalData"}
    foreign = signed_item(
        adyen.hmac_key, **{k: v for k, v in unsigned.items() if k != "merchantAccountCode"}
    )
    foreign["NotificationRequestItem"]["merchantAccountCode"] = "SomeoneElseECOM"
    foreign["NotificationRequestItem"]["additionalData"]["hmacSignature"] = signature(
        foreign["NotificationRequestItem"], adyen.hmac_key
    )
    for body, reason in (
        (batch({"NotificationRequestItem": tampered}), "bad_signature"),
        (batch({"NotificationRequestItem": unsigned}), "missing_signature"),
        (batch(foreign), "bad_signature"),
        (batch(signed_item("cd" * 32, **{k: v for k, v in unsigned.items()})), "bad_signature"),
        (b'{"live": "false", "notificationItems": []}', "malformed"),
    ):
        answer = notify(merchant_a.client, acquirer, body)
        assert answer.status_code == 400, answer.content
        assert answer["Content-Type"] == "application/problem+json"
        assert reason in answer.json()["detail"]
    assert not AcquirerNotification.objects.exists()
    capture = PaymentOperation.objects.get(payment_id=payment_id, kind="capture")
    assert capture.status == "pending"


def test_a_capture_failed_after_its_capture_changes_nothing_and_is_kept_for_review(
    merchant_a, adyen, acquirer
):
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    payment_id = created.json()["id"]
    assert post(merchant_a, payment_id, "capture", {}, "cap-1").status_code == 202
    notify(merchant_a.client, acquirer, adyen.notifications())
    assert apply_all() == ["retry_later", "applied"]
    assert apply_all() == ["applied"]
    capture = PaymentOperation.objects.get(payment_id=payment_id, kind="capture")
    assert capture.status == "succeeded"
    payment = Payment.objects.get(pk=payment_id)
    late = signed_item(
        adyen.hmac_key,
        eventCode="CAPTURE_FAILED",
        pspReference=capture.acquirer_reference,
        originalReference=payment.acquirer_reference,
        merchantReference=capture.id,
        amount={"value": 1000, "currency": "EUR"},
    )
    assert notify(merchant_a.client, acquirer, batch(late)).status_code == 200
    assert apply_all() == ["ignored"]
    row = AcquirerNotification.objects.get(event_type="CAPTURE_FAILED")
    assert row.status == "ignored" and "review" in row.last_error
    assert row.payment_id == payment_id
    payment.refresh_from_db()
    capture.refresh_from_db()
    assert (payment.status, payment.amount_captured, capture.status) == (
        "succeeded", 1000, "succeeded",
    )  # fmt: skip


def test_an_outcome_before_our_phase_2_stored_the_modification_waits_then_settles(
    merchant_a, adyen, acquirer
):
    """The notification can beat our own answer: it waits for the provider's id of the
    modification, then settles the operation once."""
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    payment_id = created.json()["id"]
    assert post(merchant_a, payment_id, "capture", {}, "cap-1").status_code == 202
    capture = PaymentOperation.objects.get(payment_id=payment_id, kind="capture")
    psp = capture.acquirer_reference
    PaymentOperation.objects.filter(pk=capture.pk).update(acquirer_reference=None)  # not yet
    notify(merchant_a.client, acquirer, adyen.notifications())
    assert apply_all() == ["retry_later", "retry_later"]  # the hint waits for the capture
    row = AcquirerNotification.objects.get(event_type="CAPTURE")
    assert row.status == "received" and row.next_attempt_at is not None
    PaymentOperation.objects.filter(pk=capture.pk).update(acquirer_reference=psp)  # phase 2
    assert notification_apply(row.pk).result == "applied"
    capture.refresh_from_db()
    assert capture.status == "succeeded"
    assert notification_apply(row.pk).result == "already_done"


@pytest.mark.parametrize(
    ("closing_event", "dispute_status", "outcome", "held"),
    [
        ("CHARGEBACK_REVERSED", None, "won", 0),
        ("CHARGEBACK", "Lost", "lost", 1000),
    ],
)
def test_an_adyen_dispute_opened_then_closed(
    merchant_a, adyen, acquirer, closing_event, dispute_status, outcome, held
):
    """A chargeback notified, then closed won (reversed) or lost (a CHARGEBACK whose
    disputeStatus is Lost): the dispute, the payment's disputed amount and the merchant's
    events. One dispute per payment at Adyen, keyed by the payment's pspReference."""
    created = merchant_a.create_payment(BODY)
    payment = Payment.objects.get(pk=created.json()["id"])
    common = {
        "pspReference": "9915555555555555",
        "originalReference": payment.acquirer_reference,
        "merchantReference": payment.pk,
        "amount": {"value": 1000, "currency": "EUR"},
    }
    opened = signed_item(
        adyen.hmac_key,
        eventCode="NOTIFICATION_OF_CHARGEBACK",
        **common,
        additionalData={"chargebackReasonCode": "10.4"},
    )
    assert notify(merchant_a.client, acquirer, batch(opened)).status_code == 200
    assert apply_all() == ["applied"]
    dispute = Dispute.objects.get()
    assert (dispute.status, dispute.amount, dispute.currency, dispute.reason) == (
        "needs_response", 1000, "EUR", "10.4",
    )  # fmt: skip
    assert Payment.objects.get(pk=payment.pk).amount_disputed == 1000
    extra = {} if dispute_status is None else {"additionalData": {"disputeStatus": dispute_status}}
    closed = signed_item(
        adyen.hmac_key, eventCode=closing_event, **{**common, "pspReference": "9915555555555556"},
        **extra,
    )  # fmt: skip
    assert notify(merchant_a.client, acquirer, batch(closed)).status_code == 200
    assert apply_all() == ["applied"]
    dispute.refresh_from_db()
    assert (dispute.status, dispute.closed_at is not None) == (outcome, True)
    assert Payment.objects.get(pk=payment.pk).amount_disputed == held
    assert sorted(Event.objects.filter(object_id=dispute.id).values_list("type", flat=True)) == [
        "dispute.closed",
        "dispute.created",
    ]


def test_the_ledger_audit_counts_adyens_answers_and_notifications(merchant_a, adyen, acquirer):
    """Adyen lists nothing: its records are its answers (our attempt events) and its verified
    notifications (ADR 0047; ledger/adyen_records.py). A payment captured and refunded and a
    declined one are each one record (answer and AUTHORISATION share the pspReference), the
    refund one refund record, all matching; an AUTHORISATION Adyen signed for a reference
    that is none of ours is the one finding. The fake's books are the oracle."""
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    payment_id = created.json()["id"]
    declined = merchant_a.create_payment({**BODY, "payment_method": "spm_decline"}, key="d-1")
    assert declined.json()["status"] == "declined"
    assert post(merchant_a, payment_id, "capture", {}, "cap-1").status_code == 202
    assert notify(merchant_a.client, acquirer, adyen.notifications()).status_code == 200
    apply_all()
    apply_all()
    assert post(merchant_a, payment_id, "refunds", {"amount": 250}, "ref-1").status_code == 202
    stranger = signed_item(
        adyen.hmac_key, eventCode="AUTHORISATION", pspReference="9913333333333333",
        merchantReference="pay_madebehindourback0000000", amount={"value": 500, "currency": "EUR"},
        eventDate="2026-12-01T10:00:00+01:00",
    )  # fmt: skip
    document = json.loads(adyen.notifications())
    body = batch(*document["notificationItems"], stranger)
    assert notify(merchant_a.client, acquirer, body).status_code == 200
    apply_all()
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.amount_captured, payment.amount_refunded) == (
        "succeeded", 1000, 250,
    )  # fmt: skip

    report = audit_acquirer(since=timezone.now() - timedelta(minutes=1))
    at_adyen = {p["pspReference"] for p in adyen.payments()}
    assert len(at_adyen) == 2
    assert report.source == f"{acquirer}: adyen answers and notifications"
    assert report.not_audited == []
    assert report.payments_checked == 2
    assert report.records_checked == len(at_adyen) + 1  # + the stranger's AUTHORISATION
    assert report.refund_records_checked == 1
    assert [(d.category, d.acquirer_references) for d in report.discrepancies] == [
        (Category.RECORD_UNKNOWN_TO_US, ("9913333333333333",))
    ]
