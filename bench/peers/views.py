"""``POST /payments`` without the service's idempotency layer (bench only).

The service's own pieces minus the idempotency key: the same request checks
(``payments.api.parsers.request_json``, then ``payments.api.serializers.payment_create_validated``:
the plain checks, or the strict serializer that also refuses card data), the same payment row and
events (``payments.authorization.phase_one.payment_record_create``), the same acquirer call
(``payments.acquirer.authorize.payment_authorize``, with the payment's own acquirer idempotency
key), the same phase 2 (``payments.authorization.create.payment_authorization_record``) and the
same answer (``payments.api.responses.create_answer``). No claim, no stored answer, no completion:
the payment has no key. Two transactions, the acquirer called between them, as in the service.

It is what the idempotency layer's cost is measured against, and the view the
django-idempotency-key middleware wraps in the peer comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import HttpResponse
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.views import APIView

from merchants.models import Merchant
from payments.acquirer.authorize import payment_authorize
from payments.acquirer.client import acquirer_client
from payments.api.parsers import request_json
from payments.api.responses import create_answer
from payments.api.serializers import payment_create_validated
from payments.authorization.create import payment_authorization_record
from payments.authorization.phase_one import payment_record_create
from payments.core.answers import Answered, Unavailable


def payment_create_without_key(
    *, merchant: Merchant, body: Mapping[str, Any]
) -> Answered | Unavailable:
    """Phase 1 (payment + event), the acquirer call, phase 2 (attempt, outcome, answer)."""
    now = timezone.now()
    with transaction.atomic():
        payment = payment_record_create(
            merchant=merchant,
            body=dict(body),
            key=None,
            now=now,
            check_at=now + timedelta(seconds=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS),
        )
    attempt = payment_authorize(acquirer_client(), payment)
    return payment_authorization_record(
        payment.pk, attempt, first_attempt=True, now=timezone.now(), payment=payment
    )


class PlainPaymentCreateApi(APIView):
    """``POST`` a payment: the service's endpoint without the idempotency layer."""

    def post(self, request: Request) -> HttpResponse:
        body = payment_create_validated(request_json(request))
        return create_answer(payment_create_without_key(merchant=request.user, body=body))
