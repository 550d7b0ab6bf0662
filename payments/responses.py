"""The answer to ``POST /payments`` for a payment, as stored for replay under its key.

Rendered once, when an outcome is recorded (by the API or by reconciliation), and replayed byte
for byte afterwards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from payments.models import Payment, PaymentStatus
from payments.problems import PROBLEM_CONTENT_TYPE, problem_body
from payments.serializers import PaymentSerializer


@dataclass(frozen=True)
class StoredResponse:
    """An HTTP answer as stored for replay: status code, headers, body bytes."""

    status_code: int
    headers: Mapping[str, str]
    body: bytes


def json_bytes(document: object) -> bytes:
    """Serialise ``document`` as UTF-8 JSON bytes."""
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def render_payment_answer(payment: Payment) -> StoredResponse:
    """The answer to ``POST /payments`` for ``payment``, as stored for replay.

    succeeded/declined: 201; processing/needs_review: 202 with ``Retry-After``; failed because
    the acquirer refused our request: 502 problem ``acquirer_error`` (with ``payment_id``).
    """
    location = f"/payments/{payment.id}"
    body = json_bytes(PaymentSerializer(payment).data)
    if payment.status in (PaymentStatus.SUCCEEDED, PaymentStatus.DECLINED):
        return StoredResponse(201, {"Content-Type": "application/json", "Location": location}, body)
    if payment.status in (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW):
        return StoredResponse(
            202,
            {
                "Content-Type": "application/json",
                "Location": location,
                "Retry-After": str(settings.PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS),
            },
            body,
        )
    problem = json.loads(
        problem_body(
            status_code=502,
            code="acquirer_error",
            title="The acquirer refused the request",
            detail="The acquirer refused this payment request; it was not authorized. "
            "Contact support with the payment id.",
        )
    )
    problem["payment_id"] = payment.id
    return StoredResponse(
        502, {"Content-Type": PROBLEM_CONTENT_TYPE, "Location": location}, json_bytes(problem)
    )
