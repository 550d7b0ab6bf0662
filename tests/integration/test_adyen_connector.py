"""The Adyen connector end to end: the service's API, a real PostgreSQL, and the Adyen-compatible
fake (tests/support/adyen_fake.py, a separate process on 127.0.0.1) over HTTP through a fault
proxy (tests/support/fault_proxy.py). After every test, every request the fake received and
every answer it gave is validated against Adyen's OpenAPI description of Checkout v71.

The fake's own books are the oracle: every operation ends with exactly one authorization,
capture, cancel or refund there, whatever the fault. The fake honours `Idempotency-Key` as
Adyen does, so the acquirer is configured `honours_idempotency_keys: true`: an ambiguous
outcome is re-sent with the same key (by the client, or by reconciliation, which has no
look-up at Adyen: docs/adr/0041). A capture or refund answered `201 received` stays pending
until its notification settles it (payments/reconciliation/notified.py, fed here by the fake's
own signed notifications).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from acquirers.specs import parse_acquirers
from gateway_client.adyen_notifications import (
    item_outcome,
    notification_items,
    signature_valid,
)
from idempotency.models import IdempotencyKey
from payments.acquirer.client import acquirer_client
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import Payment, PaymentEvent, PaymentOperation
from payments.reconciliation.notified import Notified, operation_notified
from payments.reconciliation.operations import operation_claim, operation_reconcile
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    ReconciliationResult,
    payment_reconcile,
    reconciliation_claim_payment,
)
from tests.support import reconcile as reconciliation
from tests.support.adyen import AdyenFake
from tests.support.fault_proxy import FaultProxy
from tests.support.processes import free_port
from webhooks.models import Event

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = ReconciliationPolicy(
    grace=0, backoff_base=30, backoff_cap=1800, max_age=6 * 3600, max_attempts=5, lock_timeout=0
)
BODY = {"amount": 1000, "currency": "EUR", "payment_method": "spm_visa", "reference": "o-1"}
#: A sandbox token, charged by the fake only where it is configured to (``mixed``).
SHARED_BODY = {**BODY, "payment_method": "tok_visa"}
_names = itertools.count()


@pytest.fixture(scope="module")
def adyen() -> Iterator[AdyenFake]:
    with AdyenFake.start() as process:
        yield process


@pytest.fixture
def proxy(adyen: AdyenFake, settings, monkeypatch) -> Iterator[FaultProxy]:
    """The fake, emptied, behind a fresh fault proxy; the service's only acquirer is an `adyen`
    one there (a new name per test: breakers and budgets start clean). Every exchange the
    fake saw is validated against Checkout v71 afterwards."""
    adyen.reset()
    monkeypatch.setenv("ADYEN_TEST_API_KEY", adyen.api_key)
    with FaultProxy("127.0.0.1", adyen.port) as fault_proxy:
        document = [
            {
                "name": f"adyen-{next(_names)}",
                "type": "adyen",
                "base_url": fault_proxy.url + "/v71",
                "api_key_env": "ADYEN_TEST_API_KEY",
                "merchant_account": "AcmeECOM",
                "return_url": "https://shop.example/adyen/return",
                "policy": {"honours_idempotency_keys": True, "read_timeout_seconds": 1.0},
            }
        ]
        settings.ACQUIRERS = parse_acquirers(
            json.dumps(document), known_currencies=frozenset(CURRENCY_EXPONENTS)
        )
        settings.ACQUIRER_DEADLINE_SECONDS = 4
        yield fault_proxy
    assert adyen.validate_journal() >= 0


def ours(adyen: AdyenFake, payment_id: str) -> list[dict]:
    return [p for p in adyen.payments() if p["merchantReference"] == payment_id]


def deliver_notifications(adyen: AdyenFake) -> list[Notified]:
    """What the notification endpoint does with the fake's notification body: verify each
    item, read its outcome, settle the operation it names."""
    done = []
    for item in notification_items(adyen.notifications()):
        assert signature_valid(item.raw, adyen.hmac_key)
        outcome = item_outcome(item)
        if outcome is None or outcome.operation == "authorize":
            continue
        notified, _ = operation_notified(
            acquirer=acquirer_client().config.name, kind=outcome.operation,
            acquirer_reference=outcome.acquirer_reference, applied=outcome.applied,
            failure_code=outcome.failure_code, amount=outcome.amount, now=timezone.now(),
        )  # fmt: skip
        done.append(notified)
    return done


def post(merchant, payment_id: str, action: str, body: dict, key: str):
    return merchant.client.post(
        f"/payments/{payment_id}/{action}", body, format="json", HTTP_IDEMPOTENCY_KEY=key
    )


def test_manual_authorization_and_a_partial_capture_received_stay_pending_until_notified(
    merchant_a, adyen, proxy
):
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    assert (created.status_code, created.json()["status"]) == (201, "requires_capture")
    payment_id = created.json()["id"]
    captured = post(merchant_a, payment_id, "capture", {"amount": 700}, "cap-1")
    assert captured.status_code == 202, captured.content  # received: pending, never done
    assert captured.json()["status"] == "capture_pending"
    capture = PaymentOperation.objects.get(payment_id=payment_id, kind="capture")
    assert capture.status == "pending"
    (at_adyen,) = ours(adyen, payment_id)
    (modification,) = at_adyen["modifications"]
    assert (modification["type"], modification["amount"]) == ("captures", 700)
    assert capture.acquirer_reference == modification["pspReference"]
    at = timezone.now() + timedelta(seconds=5)
    assert operation_claim(operation_id=capture.id, now=at, policy=POLICY)
    report = operation_reconcile(
        operation_id=capture.id, client=acquirer_client(), policy=POLICY,
        clock=lambda: at, random=lambda: 0.5,
    )  # fmt: skip
    assert report.result is ReconciliationResult.WAITING  # awaited, never re-sent
    assert len(ours(adyen, payment_id)[0]["modifications"]) == 1
    assert deliver_notifications(adyen) == [Notified.SETTLED]
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.amount_captured) == ("succeeded", 700)
    replay = post(merchant_a, payment_id, "capture", {"amount": 700}, "cap-1")
    assert (replay.status_code, replay.json()["status"]) == (200, "succeeded")
    refunded = post(merchant_a, payment_id, "refunds", {"amount": 300}, "ref-1")
    assert (refunded.status_code, refunded.json()["status"]) == (202, "pending")
    over = post(merchant_a, payment_id, "refunds", {"amount": 401}, "ref-2")
    assert over.status_code == 409  # 700 - 300 pending = 400 left: refused by us, never sent
    assert deliver_notifications(adyen) == [Notified.ALREADY_SETTLED, Notified.SETTLED]
    refund = PaymentOperation.objects.get(payment_id=payment_id, kind="refund")
    assert (refund.status, refund.amount) == ("succeeded", 300)
    assert [m["type"] for m in ours(adyen, payment_id)[0]["modifications"]] == [
        "captures", "refunds",
    ]  # fmt: skip


def test_automatic_capture_declines_and_shopper_actions(merchant_a, adyen, proxy):
    created = merchant_a.create_payment(BODY)
    assert (created.status_code, created.json()["status"]) == (201, "succeeded")
    declined = merchant_a.create_payment({**BODY, "payment_method": "spm_insufficient_funds"})
    assert (declined.json()["status"], declined.json()["decline_code"]) == (
        "declined", "not_enough_balance",
    )  # fmt: skip
    challenged = merchant_a.create_payment({**BODY, "payment_method": "spm_challenge"})
    assert (challenged.json()["status"], challenged.json()["decline_code"]) == (
        "declined", "shopper_action_required",
    )  # fmt: skip
    assert len(adyen.payments()) == 3
    assert proxy.forwarded == 3


def test_a_failed_capture_returns_the_payment_to_requires_capture_with_a_merchant_event(
    merchant_a, adyen, proxy
):
    created = merchant_a.create_payment(
        {**BODY, "payment_method": "spm_capture_fails", "capture_method": "manual"}
    )
    payment_id = created.json()["id"]
    assert post(merchant_a, payment_id, "capture", {}, "cap-1").status_code == 202
    assert deliver_notifications(adyen) == [Notified.SETTLED]
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.amount_captured) == ("requires_capture", 0)
    capture = PaymentOperation.objects.get(payment_id=payment_id, kind="capture")
    assert (capture.status, capture.failure_code) == ("failed", "adyen_capture_failed")
    assert PaymentEvent.objects.filter(payment_id=payment_id, type="capture_failed").exists()
    assert Event.objects.filter(object_id=payment_id, type="payment.requires_capture").count() == 2
    assert deliver_notifications(adyen) == [Notified.ALREADY_SETTLED]  # at least once: once
    name = acquirer_client().config.name
    for acquirer, kind, reference, notified in (
        (name, "capture", "NOSUCHPSP0000001", Notified.UNKNOWN),
        ("another", "capture", capture.acquirer_reference, Notified.UNKNOWN),
        (name, "refund", capture.acquirer_reference, Notified.MISMATCH),
    ):
        assert operation_notified(
            acquirer=acquirer, kind=kind, acquirer_reference=reference, applied=True,
            failure_code=None, amount=None, now=timezone.now(),
        )[0] is notified  # fmt: skip
    capture.refresh_from_db()
    assert capture.status == "failed"


def test_without_a_look_up_same_key_re_sends_until_the_maximum_age_then_review(
    merchant_a, adyen, proxy
):
    pending = merchant_a.create_payment({**BODY, "payment_method": "spm_pending"}, key="p-1")
    assert (pending.status_code, pending.json()["status"]) == (202, "processing")
    payment_id = pending.json()["id"]
    assert reconcile_payment(payment_id) is ReconciliationResult.RETRY_LATER  # replayed Pending
    assert len(adyen.payments()) == 1  # re-sent with the same key: Adyen's record, no second
    held = merchant_a.create_payment({**BODY, "capture_method": "manual"}, key="p-2")
    assert post(merchant_a, held.json()["id"], "capture", {}, "cap-1").status_code == 202
    capture = PaymentOperation.objects.get(kind="capture")
    late = timezone.now() + timedelta(seconds=POLICY.max_age + 60)
    assert reconciliation_claim_payment(payment_id=payment_id, now=late, policy=POLICY)
    report = payment_reconcile(
        payment_id=payment_id, client=acquirer_client(), policy=POLICY, clock=lambda: late,
        random=lambda: 0.5,
    )  # fmt: skip
    assert report.result is ReconciliationResult.NEEDS_REVIEW  # never re-sent this late
    assert operation_claim(operation_id=capture.id, now=late, policy=POLICY)
    report = operation_reconcile(
        operation_id=capture.id, client=acquirer_client(), policy=POLICY, clock=lambda: late,
        random=lambda: 0.5,
    )  # fmt: skip
    assert report.result is ReconciliationResult.NEEDS_REVIEW
    assert (
        "no look-up"
        in PaymentEvent.objects.filter(payment_id=payment_id, type="needs_review")
        .get()
        .data["reason"]
    )
    capture.refresh_from_db()
    assert capture.status == "needs_review"
    assert Payment.objects.get(pk=held.json()["id"]).status == "capture_pending"
    assert len(adyen.payments()) == 2 and len(adyen.payments()[1]["modifications"]) == 1
    assert deliver_notifications(adyen) == [Notified.SETTLED]  # a late notification settles it
    capture.refresh_from_db()
    assert capture.status == "succeeded"


def mixed(
    settings, adyen_url: str, sandbox_url: str, sandbox_key: str, adyen_first: bool,
    shared: bool = True,
):  # fmt: skip
    """ACQUIRERS: a sandbox and the Adyen fake (ambiguous answers not retried at Adyen, so a
    202 shows that it never fails over); the first in routing order as asked. ``shared``: the
    fake is declared to charge the sandbox's tokens too (it reads ``tok_visa`` as its stored
    payment method ``visa``), so one payment method has two acquirers (ADR 0051)."""
    families = ["adyen_stored_payment_method", "sandbox_token"] if shared else None
    document = [
        {"name": f"sandbox-{next(_names)}", "base_url": sandbox_url, "api_key": sandbox_key,
         "priority": 20 if adyen_first else 10},
        {"name": f"adyen-{next(_names)}", "type": "adyen", "base_url": adyen_url + "/v71",
         "api_key_env": "ADYEN_TEST_API_KEY", "merchant_account": "AcmeECOM",
         "return_url": "https://shop.example/adyen/return", "priority": 10 if adyen_first else 20,
         "policy": {"retry_ambiguous": False, "read_timeout_seconds": 1.0},
         **({"payment_methods": families} if families else {})},
    ]  # fmt: skip
    settings.ACQUIRERS = parse_acquirers(
        json.dumps(document), known_currencies=frozenset(CURRENCY_EXPONENTS)
    )
    return settings.ACQUIRERS


def test_failover_between_a_sandbox_and_adyen_only_when_certain(
    merchant_a, adyen, proxy, sandbox, settings
):
    refused = f"http://127.0.0.1:{free_port()}"  # nobody listens: certainly not applied
    _, at_adyen = mixed(settings, proxy.url, refused, "sk", adyen_first=False)
    moved = merchant_a.create_payment(SHARED_BODY, key="f-1")
    assert (moved.status_code, moved.json()["status"]) == (201, "succeeded")
    payment = Payment.objects.get(pk=moved.json()["id"])
    assert payment.acquirer == at_adyen.name
    assert len(ours(adyen, payment.id)) == 1
    first, _ = mixed(settings, proxy.url, sandbox.url, sandbox.api_key, adyen_first=True)
    proxy.plan(error(500))
    stays = merchant_a.create_payment(SHARED_BODY, key="f-2")
    assert (stays.status_code, stays.json()["status"]) == (202, "processing")
    payment = Payment.objects.get(pk=stays.json()["id"])
    assert payment.acquirer == first.name  # maybe applied at Adyen: never sent elsewhere
    assert sandbox.stats()["charges_total"] == 0
    assert reconcile_payment(payment.id) is ReconciliationResult.RESOLVED
    payment.refresh_from_db()
    assert payment.status == "succeeded"
    assert len(ours(adyen, payment.id)) == 1


def test_failover_only_to_an_acquirer_that_can_charge_the_payment_method(
    merchant_a, adyen, proxy, settings
):
    """With each type's own families (ADR 0051) a sandbox token never goes to Adyen, nor an
    Adyen stored payment method to the sandbox: the refused sandbox's payment is a 503 with
    nothing sent to Adyen, and a payment method nobody charges is a 400 naming the field."""
    refused = f"http://127.0.0.1:{free_port()}"  # nobody listens: certainly not applied
    sandbox_spec, adyen_spec = mixed(
        settings, proxy.url, refused, "sk", adyen_first=False, shared=False
    )
    alone = merchant_a.create_payment(SHARED_BODY, key="g-1")
    assert alone.status_code == 503, alone.content
    assert adyen.payments() == []  # the one other acquirer cannot charge a tok_: never sent
    stored = merchant_a.create_payment(BODY, key="g-2")  # spm_: the sandbox is never tried
    assert (stored.status_code, stored.json()["status"]) == (201, "succeeded")
    assert Payment.objects.get(pk=stored.json()["id"]).acquirer == adyen_spec.name
    assert not PaymentEvent.objects.filter(
        payment_id=stored.json()["id"], type="acquirer_switched"
    ).exists()
    stripe_pm = merchant_a.create_payment({**BODY, "payment_method": "pm_card_visa"}, key="g-3")
    assert stripe_pm.status_code == 400
    assert stripe_pm.json()["errors"] == [
        {
            "field": "payment_method",
            "code": "payment_method_not_supported",
            "message": "No acquirer of this service can charge this kind of payment method.",
        }
    ]
    assert not IdempotencyKey.objects.filter(key="g-3").exists()
    assert sandbox_spec.payment_method_families == {"sandbox_token"}


def error(status: int, **headers: str) -> tuple[str, int, dict[str, str], bytes]:
    body = json.dumps({"status": status, "errorCode": "905", "message": "fault proxy",
                       "errorType": "internal"}).encode()  # fmt: skip
    return ("answer", status, {"Content-Type": "application/json", **headers}, body)


HTML_502 = ("answer", 502, {"Content-Type": "text/html"}, b"<html><h1>502 Bad Gateway</h1></html>")
FAULTS = ["drop", "reset", "hang", error(500), HTML_502, error(429)]
FAULT_IDS = ["drop", "reset", "hang", "500", "502-html", "429"]


@pytest.mark.parametrize("fault", FAULTS, ids=FAULT_IDS)
def test_every_fault_ends_with_exactly_one_payment_capture_and_refund(
    merchant_a, adyen, proxy, fault
):
    proxy.plan(fault)
    first = merchant_a.create_payment({**BODY, "capture_method": "manual"}, key="k-1")
    assert first.status_code in (201, 202), first.content
    payment_id = first.json()["id"]
    if first.status_code == 202:
        assert Payment.objects.get(pk=payment_id).status == "processing"
        assert reconcile_payment(payment_id) is ReconciliationResult.RESOLVED
    payment = Payment.objects.get(pk=payment_id)
    assert payment.status == "requires_capture"
    (at_adyen,) = ours(adyen, payment_id)  # the same key on every re-send: one payment
    assert at_adyen["resultCode"] == "Authorised"
    assert payment.acquirer_reference == at_adyen["pspReference"]
    for action, kind, body in (("capture", "capture", {"amount": 700}),
                               ("refunds", "refund", {"amount": 250})):  # fmt: skip
        proxy.plan(fault)
        answered = post(merchant_a, payment_id, action, body, f"{kind}-1")
        assert answered.status_code == 202, answered.content  # pending either way
        operation = PaymentOperation.objects.get(payment_id=payment_id, kind=kind)
        if not operation.acquirer_reference:  # unknown, not received: re-sent, same key
            assert reconcile_operation(operation.id) is ReconciliationResult.WAITING
        operation.refresh_from_db()
        assert operation.status == "pending" and operation.acquirer_reference
        deliver_notifications(adyen)
        operation.refresh_from_db()
        assert (operation.status, operation.amount) == ("succeeded", body["amount"])
    (at_adyen,) = ours(adyen, payment_id)
    assert [(m["type"], m["amount"]) for m in at_adyen["modifications"]] == [
        ("captures", 700), ("refunds", 250),
    ]  # fmt: skip
    assert len(adyen.payments()) == 1


def test_a_fault_after_adyen_applied_it_is_replayed_by_the_same_key(merchant_a, adyen, proxy):
    adyen.fault({"status": 500, "applied": True})
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"}, key="k-1")
    assert (created.status_code, created.json()["status"]) == (201, "requires_capture")
    assert len(adyen.payments()) == 1
    adyen.fault({"status": 500, "applied": True})
    payment_id = created.json()["id"]
    captured = post(merchant_a, payment_id, "capture", {"amount": 400}, "cap-1")
    assert captured.status_code == 202
    (at_adyen,) = ours(adyen, payment_id)
    assert [m["amount"] for m in at_adyen["modifications"]] == [400]


class Crashed(BaseException):
    """The process died at a crash point (a BaseException: no handler catches it, and the open
    transaction rolls back as PostgreSQL rolls back a dead connection's)."""


def crashing_at(monkeypatch, point: str) -> None:
    def crash_point(name: str) -> None:
        if name == point:
            raise Crashed(name)

    monkeypatch.setattr("payments.authorization.create.crash_point", crash_point)
    monkeypatch.setattr("payments.operations.flows.crash_point", crash_point)


PHASES = ("after_phase1_commit", "after_acquirer_answer", "before_phase2_commit")


@pytest.mark.parametrize("phase", PHASES)
def test_crash_points_of_every_operation_resolve_once(merchant_a, adyen, proxy, monkeypatch, phase):
    crashing_at(monkeypatch, phase)
    with pytest.raises(Crashed):
        merchant_a.create_payment({**BODY, "capture_method": "manual"}, key="pay-1")
    payment = Payment.objects.get()
    assert payment.status == "processing"
    assert len(adyen.payments()) == (0 if phase == "after_phase1_commit" else 1)
    assert reconcile_payment(payment.id) is ReconciliationResult.RESOLVED
    payment.refresh_from_db()
    assert payment.status == "requires_capture"
    for kind, action, body in (("capture", "capture", {"amount": 600}),
                               ("refund", "refunds", {"amount": 200})):  # fmt: skip
        crashing_at(monkeypatch, f"{kind}_{phase}")
        with pytest.raises(Crashed):
            post(merchant_a, payment.id, action, body, f"{kind}-1")
        operation = PaymentOperation.objects.get(payment_id=payment.id, kind=kind)
        assert operation.status == "pending"
        assert reconcile_operation(operation.id) is ReconciliationResult.WAITING
        deliver_notifications(adyen)
        operation.refresh_from_db()
        assert operation.status == "succeeded"
    void_payment = void_after_crash(merchant_a, adyen, monkeypatch, phase)
    (at_adyen,) = ours(adyen, payment.id)
    assert [(m["type"], m["amount"]) for m in at_adyen["modifications"]] == [
        ("captures", 600), ("refunds", 200),
    ]  # fmt: skip
    (voided,) = ours(adyen, void_payment)
    assert [m["type"] for m in voided["modifications"]] == ["cancels"]
    assert Payment.objects.get(pk=void_payment).status == "canceled"
    assert len(adyen.payments()) == 2  # one authorization per payment, whatever the crash


def void_after_crash(merchant_a, adyen: AdyenFake, monkeypatch, phase: str) -> str:
    crashing_at(monkeypatch, "none")
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"}, key="pay-2")
    payment_id = created.json()["id"]
    crashing_at(monkeypatch, f"void_{phase}")
    with pytest.raises(Crashed):
        post(merchant_a, payment_id, "void", {}, "void-1")
    void = PaymentOperation.objects.get(payment_id=payment_id, kind="void")
    assert reconcile_operation(void.id) is ReconciliationResult.WAITING
    deliver_notifications(adyen)
    void.refresh_from_db()
    assert void.status == "succeeded"
    return payment_id


def reconcile_payment(payment_id: str) -> ReconciliationResult:
    return reconciliation.reconcile_payment(payment_id, POLICY)


def reconcile_operation(operation_id: str) -> ReconciliationResult:
    return reconciliation.reconcile_operation(operation_id, POLICY)
