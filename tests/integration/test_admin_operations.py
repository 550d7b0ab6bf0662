"""payments.admin.operator_actions: the operators' actions as services (state machine, audit,
replay)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.models import IdempotencyKey
from payments.admin.operator_actions import (
    OperationRefused,
    payment_reconcile_request,
    payment_resolve,
)
from payments.models import Payment
from tests.factories import MerchantFactory, PaymentFactory

pytestmark = pytest.mark.django_db


def needs_review_payment() -> Payment:
    merchant = MerchantFactory()
    now = timezone.now()
    key = IdempotencyKey.objects.create(
        merchant=merchant, key="k-1", method="POST", route="/payments",
        request_fingerprint="f" * 64, status="completed", response_status=202,
        response_body=b"{}", created_at=now, completed_at=now, expires_at=now + timedelta(days=1),
    )  # fmt: skip
    return PaymentFactory(merchant=merchant, status="needs_review", idempotency_key=key)


def test_reconcile_request_is_enqueued_only_after_commit(
    enqueued, django_capture_on_commit_callbacks
):
    """Nothing is sent to the broker before the transaction commits."""
    payment = PaymentFactory(status="processing")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        payment_reconcile_request(payment_id=payment.pk, operator="alice", note="n")
    assert enqueued == [] and len(callbacks) == 1
    callbacks[0]()
    assert enqueued == [payment.pk]


def test_reconcile_request_makes_a_processing_payment_due_now(enqueued):
    """next_check_at becomes now, so the sweep takes it if the task message is lost."""
    now = timezone.now()
    payment = PaymentFactory(status="processing", next_check_at=now + timedelta(minutes=30))
    payment_reconcile_request(payment_id=payment.pk, operator="alice", note="n", clock=lambda: now)
    assert Payment.objects.get(pk=payment.pk).next_check_at == now


@pytest.mark.parametrize("note", ["", "   "])
def test_reconcile_request_requires_a_note(enqueued, note):
    """An empty note is refused."""
    payment = PaymentFactory(status="processing")
    with pytest.raises(OperationRefused):
        payment_reconcile_request(payment_id=payment.pk, operator="alice", note=note)
    assert not payment.events.exists()


def test_resolve_as_failed_uses_the_default_failure_code():
    """Failed without a code: failure_code not_authorized_at_acquirer; the key replays a 502."""
    payment = needs_review_payment()
    payment_resolve(payment_id=payment.pk, to_status="failed", operator="alice", note="no record")
    payment.refresh_from_db()
    assert (payment.status, payment.failure_code) == ("failed", "not_authorized_at_acquirer")
    assert IdempotencyKey.objects.get().response_status == 502


def test_resolve_as_declined_stores_the_decline_code():
    """Declined with a code: decline_code set, the key replays a 201 declined."""
    payment = needs_review_payment()
    payment_resolve(
        payment_id=payment.pk, to_status="declined", operator="alice", note="n",
        code="do_not_honor",
    )  # fmt: skip
    payment.refresh_from_db()
    assert (payment.status, payment.decline_code) == ("declined", "do_not_honor")
    key = IdempotencyKey.objects.get()
    assert key.response_status == 201 and b'"declined"' in bytes(key.response_body)


def test_resolve_records_the_transition_with_operator_and_note():
    """One resolved_by_operator event, needs_review -> succeeded, with who and why."""
    payment = needs_review_payment()
    payment_resolve(payment_id=payment.pk, to_status="succeeded", operator="alice", note="ok")
    event = payment.events.get()
    assert (event.type, event.from_status, event.to_status) == (
        "resolved_by_operator", "needs_review", "succeeded",
    )  # fmt: skip
    assert event.data == {"operator": "alice", "note": "ok", "how": "manual_check"}


def test_resolve_twice_is_refused():
    """A second resolution finds the payment resolved and changes nothing."""
    payment = needs_review_payment()
    payment_resolve(payment_id=payment.pk, to_status="succeeded", operator="alice", note="ok")
    with pytest.raises(OperationRefused):
        payment_resolve(payment_id=payment.pk, to_status="failed", operator="bob", note="no")
    assert Payment.objects.get(pk=payment.pk).status == "succeeded"


@pytest.mark.parametrize("code", ["Do Not Honor", "x" * 65, "a--b"])
def test_resolve_refuses_a_malformed_code(code):
    """Codes are lower-case words joined by underscores, at most 64 characters."""
    payment = needs_review_payment()
    with pytest.raises(OperationRefused):
        payment_resolve(
            payment_id=payment.pk, to_status="declined", operator="a", note="n", code=code
        )


def test_resolve_refuses_a_status_that_is_not_a_resolution():
    """processing or needs_review are not resolutions."""
    payment = needs_review_payment()
    with pytest.raises(OperationRefused):
        payment_resolve(payment_id=payment.pk, to_status="processing", operator="a", note="n")
