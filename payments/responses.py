"""Every byte of the answer to ``POST /payments``, made here and nowhere else.

* :func:`render_payment_answer`: the answer for a payment (201, 202 or the 502 problem),
  rendered once when an outcome is recorded (by the create flow, reconciliation or an operator)
  and stored with the idempotency key, so every replay is byte for byte the same.
* :func:`create_answer`: the HTTP response for what the create flow established
  (:data:`CreateResult`): the stored answer, the 503 problem when the payment was certainly not
  sent, or the replay of a completed key (``idempotency.responses.replay_response``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpResponse

from idempotency.models import IdempotencyKey
from idempotency.responses import replay_response
from payments.models import Payment, PaymentStatus
from payments.problems import PROBLEM_CONTENT_TYPE, problem_body, problem_response
from payments.serializers import PaymentSerializer


@dataclass(frozen=True)
class StoredResponse:
    """An HTTP answer as stored for replay: status code, headers, body bytes."""

    status_code: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Replayed:
    """The key already held an answer: ``record`` is the completed key to replay."""

    record: IdempotencyKey


@dataclass(frozen=True)
class Answered:
    """The outcome is recorded: ``response`` (201, 202 or 502) is the one stored for the key."""

    payment: Payment
    response: StoredResponse


@dataclass(frozen=True)
class Unavailable:
    """Certainly not applied (the acquirer unreachable, or the breaker open): nothing stored to
    replay, the key is free again. ``retry_after``: the known wait in whole seconds, or None.
    ``payment``: the payment now ``failed``, or None when the breaker refused before any write.
    """

    retry_after: int | None
    payment: Payment | None = None


#: What the create flow (``payments.services.payment_create``) returns.
CreateResult = Replayed | Answered | Unavailable


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


def stored_http_response(stored: StoredResponse) -> HttpResponse:
    """``stored`` as an :class:`~django.http.HttpResponse`: its status, headers and body bytes."""
    response = HttpResponse(stored.body, status=stored.status_code)
    for name, value in stored.headers.items():
        response[name] = value
    return response


def create_answer(result: CreateResult) -> HttpResponse:
    """The HTTP answer to ``POST /payments`` for ``result``.

    :class:`Answered`: the stored answer. :class:`Replayed`: the key's stored answer with
    ``Idempotent-Replayed: true``. :class:`Unavailable`: a 503 problem ``acquirer_unavailable``
    (RFC 9457) with ``Retry-After`` (RFC 9110 section 10.2.3), the known wait in seconds or
    ``PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS``; never stored, so the key can be retried.
    """
    if isinstance(result, Replayed):
        return replay_response(result.record)
    if isinstance(result, Unavailable):
        retry_after = result.retry_after or settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS
        return problem_response(
            status_code=503,
            code="acquirer_unavailable",
            title="The acquirer is unavailable",
            detail="The acquirer could not be reached; the payment was not sent and nothing was "
            "charged. Retry later, with the same Idempotency-Key if you wish.",
            headers={"Retry-After": str(max(0, math.ceil(retry_after)))},
        )
    return stored_http_response(result.response)
