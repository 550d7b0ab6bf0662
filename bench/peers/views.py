"""``POST /payments`` without the service's idempotency layer (bench only).

The same request checks (content type, card data, the strict serializer), the same payment
rows and events, the same acquirer call through the same gateway client (with the payment's own
acquirer idempotency key) and the same rendered answer as ``payments.apis`` /
``payments.services.payment_create``, minus the idempotency key: no claim, no stored answer, no
completion. Two transactions, the acquirer called between them, as in the service.

It is what the idempotency layer's cost is measured against, and the view the
django-idempotency-key middleware wraps in the peer comparison.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.views import APIView

from payments.acquirer.client import acquirer_client
from payments.card_data import card_data_fields
from payments.models import Payment, PaymentStatus, new_payment_id
from payments.problems import Problem
from payments.responses import render_payment_answer
from payments.serializers import PaymentCreateInputSerializer
from payments.services import (
    Outcome,
    _authorize,
    payment_event_record,
    payment_transition,
)

_TRANSITIONS = {
    Outcome.APPROVED: (PaymentStatus.SUCCEEDED, "authorization_approved"),
    Outcome.DECLINED: (PaymentStatus.DECLINED, "authorization_declined"),
    Outcome.NOT_SENT: (PaymentStatus.FAILED, "authorization_not_sent"),
    Outcome.REJECTED: (PaymentStatus.FAILED, "authorization_rejected"),
}


def payment_create_without_key(*, merchant, data) -> tuple[Outcome, Payment, dict]:
    """Phase 1 (payment + event), the acquirer call, phase 2 (outcome + events)."""
    now = timezone.now()
    with transaction.atomic():
        payment_id = new_payment_id()
        payment = Payment.objects.create(
            id=payment_id,
            merchant=merchant,
            idempotency_key=None,
            amount=data["amount"],
            currency=data["currency"],
            payment_method=data["payment_method"],
            reference=data.get("reference"),
            description=data.get("description"),
            status=PaymentStatus.PROCESSING,
            acquirer_idempotency_key=f"authorize-{payment_id}",
            created_at=now,
            updated_at=now,
            next_check_at=now + timedelta(seconds=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS),
        )
        payment_event_record(payment=payment, event_type="payment_created", now=now, data={})
    outcome, authorization, attempt = _authorize(acquirer_client(), payment)
    now = timezone.now()
    with transaction.atomic():
        payment = Payment.objects.select_for_update().get(pk=payment.pk)
        payment_event_record(payment=payment, event_type="acquirer_attempt", now=now, data=attempt)
        if outcome in _TRANSITIONS:
            status, event = _TRANSITIONS[outcome]
            changes = {"next_check_at": None}
            if authorization is not None:
                changes["acquirer_reference"] = authorization.acquirer_reference
                if authorization.decline_code:
                    changes["decline_code"] = authorization.decline_code
            elif outcome is Outcome.NOT_SENT:
                changes["failure_code"] = "acquirer_unavailable"
            else:
                changes["failure_code"] = "acquirer_rejected"
            payment_transition(
                payment=payment, to_status=status, event_type=event, now=now, **changes
            )
        else:
            payment_event_record(
                payment=payment, event_type="authorization_outcome_unknown", now=now, data={}
            )
    return outcome, payment, attempt


class PlainPaymentCreateApi(APIView):
    """``POST`` a payment: the service's endpoint without the idempotency layer."""

    def post(self, request: Request) -> HttpResponse:
        if request.content_type.split(";")[0].strip().lower() != "application/json":
            raise Problem(
                "Send the body as JSON with 'Content-Type: application/json'.",
                code="unsupported_media_type",
                title="The body must be application/json",
            )
        data = request.data
        if card_data_fields(data):
            raise Problem(
                "Card numbers are not accepted.",
                code="card_data_not_accepted",
                title="Card data is not accepted",
            )
        serializer = PaymentCreateInputSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        outcome, payment, attempt = payment_create_without_key(
            merchant=request.user, data=serializer.validated_data
        )
        if outcome is Outcome.NOT_SENT:
            raise Problem(
                "The acquirer could not be reached; the payment was not sent.",
                code="acquirer_unavailable",
                title="The acquirer is unavailable",
                status_code=503,
                retry_after=attempt.get("retry_after_seconds")
                or settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS,
            )
        stored = render_payment_answer(payment)
        response = HttpResponse(stored.body, status=stored.status_code)
        for name, value in stored.headers.items():
            response[name] = value
        return response
