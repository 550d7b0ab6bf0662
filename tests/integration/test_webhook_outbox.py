"""The webhook outbox (issue 13): one event per state change, written in the change's
transaction, on every path (authorization, capture, void, refund, reconciliation, an
operator's resolve), carrying the object as the API shows it."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from payments.acquirer.client import acquirer_client
from payments.admin.operator_actions import payment_resolve
from payments.core.operation_states import (
    operation_escalate,
    operation_lock_with_key,
    operation_open,
)
from payments.core.payment_states import (
    ALLOWED_TRANSITIONS,
    PAYMENT_WEBHOOK_EVENTS,
    payment_lock,
    payment_transition,
)
from payments.models import OperationKind, Payment, PaymentEventType
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    payment_reconcile,
    reconciliation_claim_payment,
)
from tests.factories import MerchantFactory, PaymentFactory
from tests.support.api import PAYMENT_BODY
from webhooks.fanout import event_fan_out
from webhooks.models import Delivery, Event, WebhookEndpoint

TRANSITIONS = sorted((a, b) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets)


def endpoint(merchant, events, **fields) -> WebhookEndpoint:
    now = timezone.now()
    return WebhookEndpoint.objects.create(
        merchant=merchant, url="http://127.0.0.1:9/hook", enabled_events=events,
        secret="whsec_" + "A" * 44, created_at=now, updated_at=now, **fields,
    )  # fmt: skip


def types_of(object_id: str) -> list[str]:
    return list(Event.objects.filter(object_id=object_id).order_by("created_at", "id")
                .values_list("type", flat=True))  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("from_status", "to_status"), TRANSITIONS)
def test_every_status_change_writes_exactly_one_event_or_none_for_pending(from_status, to_status):
    """Each transition of the state machine into a status with an event type writes exactly
    that one event; into a pending status (processing, capture_pending, void_pending), none."""
    payment = PaymentFactory(status=from_status, capture_method="manual", amount_captured=0)
    with transaction.atomic():
        locked = payment_lock(payment.pk)
        payment_transition(
            payment=locked, to_status=to_status, event_type=PaymentEventType.RECONCILED,
            now=timezone.now(),
        )  # fmt: skip
    expected = PAYMENT_WEBHOOK_EVENTS.get(Payment.objects.get(pk=payment.pk).status)
    assert types_of(payment.pk) == ([expected] if expected else [])


@pytest.mark.django_db
def test_a_rolled_back_state_change_leaves_no_event():
    """The event is in the change's transaction (and its deliveries are not: the worker fans
    it out after the commit): a rollback takes it away."""
    payment = PaymentFactory(status="processing")
    endpoint(payment.merchant, ["*"])
    seen = []

    def change_then_fail() -> None:
        with transaction.atomic():
            payment_transition(
                payment=payment_lock(payment.pk), to_status="succeeded",
                event_type=PaymentEventType.AUTHORIZATION_APPROVED, now=timezone.now(),
            )  # fmt: skip
            seen.append((Event.objects.count(), Delivery.objects.count()))
            raise RuntimeError("the change's transaction fails after the transition")

    with pytest.raises(RuntimeError):
        change_then_fail()
    assert seen == [(1, 0)]
    assert (Event.objects.count(), Delivery.objects.count()) == (0, 0)
    assert Payment.objects.get(pk=payment.pk).status == "processing"


@pytest.mark.django_db
def test_deliveries_go_to_the_subscribed_live_endpoints_only():
    """The fan-out: one delivery per endpoint that wants the type (a disabled one's waits for
    it); none to another merchant's, a deleted one, or one that wants other types."""
    payment = PaymentFactory(status="processing")
    wants_all = endpoint(payment.merchant, ["*"])
    wants_it = endpoint(payment.merchant, ["payment.succeeded"])
    disabled = endpoint(payment.merchant, ["*"], status="disabled", disabled_reason="gone")
    endpoint(payment.merchant, ["refund.succeeded"])
    endpoint(payment.merchant, ["*"], deleted_at=timezone.now())
    endpoint(MerchantFactory(), ["*"])
    with transaction.atomic():
        payment_transition(
            payment=payment_lock(payment.pk), to_status="succeeded",
            event_type=PaymentEventType.AUTHORIZATION_APPROVED, now=timezone.now(),
        )  # fmt: skip
    assert not Delivery.objects.exists()  # the transaction wrote the event only
    (event,) = Event.objects.all()
    assert event_fan_out(event.id, now=timezone.now()) == 3
    assert set(Delivery.objects.values_list("endpoint_id", flat=True)) == {
        wants_all.id, wants_it.id, disabled.id,
    }  # fmt: skip


@pytest.mark.django_db
def test_refund_needs_review_writes_its_event():
    """Reconciliation giving up on a refund: refund.needs_review, the refund's object."""
    payment = PaymentFactory(status="succeeded")
    now = timezone.now()
    with transaction.atomic():
        locked = payment_lock(payment.pk)
        refund = operation_open(
            payment=locked, kind=OperationKind.REFUND, amount=400, reason=None, key=None,
            now=now, check_at=now,
        )  # fmt: skip
    assert types_of(refund.id) == []
    with transaction.atomic():
        locked, operation, _ = operation_lock_with_key(refund.id)
        operation_escalate(payment=locked, operation=operation, now=now, reason="too old")
    (event,) = Event.objects.filter(object_id=refund.id)
    assert event.type == "refund.needs_review"
    obj = json.loads(event.data)["object"]
    assert (obj["object"], obj["status"], obj["amount"], obj["payment"]) == (
        "refund", "needs_review", 400, payment.pk,
    )  # fmt: skip


@pytest.mark.django_db
def test_an_operators_resolve_writes_its_event():
    payment = PaymentFactory(status="needs_review")
    payment_resolve(payment_id=payment.pk, to_status="declined", operator="alice", note="n",
                    code="do_not_honor")  # fmt: skip
    assert types_of(payment.pk) == ["payment.declined"]


def post(merchant, path: str, body: dict | None = None):
    return merchant.client.post(
        path, body or {}, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex
    )


@pytest.mark.django_db(transaction=True)
def test_the_api_paths_write_one_event_per_change_with_the_object_the_api_shows(
    merchant_a, sandbox
):
    """Authorization, capture, refund and void through the API: the events are exactly the
    changes, and each event's object is what GET showed right after."""
    automatic = merchant_a.create_payment(PAYMENT_BODY).json()
    (event,) = Event.objects.filter(object_id=automatic["id"])
    assert event.type == "payment.succeeded"
    assert (
        json.loads(event.data)["object"]
        == merchant_a.client.get(f"/payments/{automatic['id']}").json()
    )
    declined = merchant_a.create_payment({**PAYMENT_BODY, "payment_method": "tok_decline"})
    assert types_of(declined.json()["id"]) == ["payment.declined"]

    manual = merchant_a.create_payment({**PAYMENT_BODY, "capture_method": "manual"}).json()
    assert post(merchant_a, f"/payments/{manual['id']}/capture").status_code == 200
    refund = post(merchant_a, f"/payments/{manual['id']}/refunds", {"amount": 500}).json()
    assert types_of(manual["id"]) == ["payment.requires_capture", "payment.succeeded"]
    (refunded,) = Event.objects.filter(object_id=refund["id"])
    assert refunded.type == "refund.succeeded"
    assert (
        json.loads(refunded.data)["object"]
        == merchant_a.client.get(f"/refunds/{refund['id']}").json()
    )

    held = merchant_a.create_payment({**PAYMENT_BODY, "capture_method": "manual"}).json()
    assert post(merchant_a, f"/payments/{held['id']}/void").status_code == 200
    assert types_of(held["id"]) == ["payment.requires_capture", "payment.canceled"]
    assert set(Event.objects.values_list("merchant_id", flat=True)) == {merchant_a.merchant.pk}


@pytest.mark.django_db(transaction=True)
def test_reconciliation_writes_the_final_event_of_a_202(merchant_a, sandbox, single_attempt):
    """A 202 writes no event (processing has none); reconciliation's resolution writes one."""
    body = {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    first = merchant_a.create_payment(body)
    assert first.status_code == 202
    payment_id = first.json()["id"]
    assert types_of(payment_id) == []
    at = timezone.now() + timedelta(seconds=3)
    policy = ReconciliationPolicy()
    assert reconciliation_claim_payment(payment_id=payment_id, now=at, policy=policy)
    payment_reconcile(
        payment_id=payment_id, client=acquirer_client(), policy=policy, clock=lambda: at,
        random=lambda: 0.5,
    )  # fmt: skip
    assert types_of(payment_id) == ["payment.succeeded"]
