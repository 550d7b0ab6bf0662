"""Every byte of the answers to ``POST /payments`` and to the operations after it
(``POST /payments/{id}/capture``, ``/void``, ``/refunds``), made here and nowhere else.

* :func:`render_payment_answer`: the answer for a payment (201, 202 or the 502 problem),
  rendered once when an outcome is recorded (by the create flow, reconciliation or an operator)
  and stored with the idempotency key, so every replay is byte for byte the same.
* :func:`create_answer`: the HTTP response for what the create flow established
  (:data:`CreateResult`): the stored answer, the 503 problem when the payment was certainly not
  sent, or the replay of a completed key (``idempotency.responses.replay_response``).
* :func:`render_operation_answer` and :func:`operation_answer`: the same for an operation
  (200 payment / 201 refund, 202 while pending, the stored 502, the 503 never stored).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from idempotency.models import IdempotencyKey
from payments.core.documents import RefundSerializer, next_action_document
from payments.core.documents import rfc3339 as _rfc3339
from payments.core.problem_format import PROBLEM_CONTENT_TYPE, problem_body
from payments.models import OperationKind, OperationStatus, Payment, PaymentOperation, PaymentStatus


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


#: What the create flow (``payments.authorization.create.payment_create``) returns.
CreateResult = Replayed | Answered | Unavailable


def json_bytes(document: object) -> bytes:
    """Serialise ``document`` as UTF-8 JSON bytes."""
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def payment_document(payment: Payment) -> dict[str, object]:
    """The payment object of the API (``PaymentSerializer``'s fields and values, exactly),
    built without the serializer: the create flow renders it on every payment, and a
    serializer costs more than the request's SQL. ``tests/integration/test_hot_path_sql.py``
    holds the two equal; a field added to one must be added to the other."""
    return {
        "id": payment.id,
        "object": "payment",
        "status": str(payment.status),
        "amount": payment.amount,
        "currency": payment.currency,
        "payment_method": payment.payment_method,
        "reference": payment.reference,
        "description": payment.description,
        "decline_code": payment.decline_code,
        "failure_code": payment.failure_code,
        "acquirer_reference": payment.acquirer_reference,
        "capture_method": str(payment.capture_method),
        "amount_captured": payment.amount_captured,
        "amount_refunded": payment.amount_refunded,
        "amount_disputed": payment.amount_disputed,
        "not_before": _rfc3339(payment.not_before),
        "acquirer": payment.acquirer,
        "return_url": payment.return_url,
        "next_action": next_action_document(payment),
        "created_at": _rfc3339(payment.created_at),
        "updated_at": _rfc3339(payment.updated_at),
    }


def render_payment_answer(payment: Payment) -> StoredResponse:
    """The answer to ``POST /payments`` for ``payment``, as stored for replay.

    processing/needs_review: 202 with ``Retry-After``; deferred: 202 with ``Retry-After`` the
    seconds until its ``not_before`` (at least 1); failed because the acquirer refused our
    request: 502 problem ``acquirer_error`` (with ``payment_id``); every other status
    (succeeded, requires_capture, declined, a deferred payment that expired never sent, and the
    later ones): 201.
    """
    location = f"/payments/{payment.id}"
    body = json_bytes(payment_document(payment))
    if payment.status in (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW):
        return _accepted(location, body)
    if payment.status == PaymentStatus.DEFERRED:
        return _accepted(location, body, retry_after=_until_not_before(payment))
    if payment.status == PaymentStatus.FAILED and payment.failure_code not in _NEVER_SENT:
        return _acquirer_error(
            location,
            "The acquirer refused this payment request; it was not authorized. "
            "Contact support with the payment id.",
            payment_id=payment.id,
        )
    return StoredResponse(201, {"Content-Type": "application/json", "Location": location}, body)


#: The failure codes of a payment that was never sent and whose answer is stored (a deferred
#: payment past its maximum age): a final result, 201, not the 502 of a refusal.
_NEVER_SENT = frozenset({"acquirer_unavailable"})


def _until_not_before(payment: Payment) -> int:
    """Whole seconds from the payment's last change to its ``not_before``, at least 1."""
    if payment.not_before is None:
        return settings.PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS
    return max(1, math.ceil((payment.not_before - payment.updated_at).total_seconds()))


def _accepted(location: str, body: bytes, *, retry_after: int | None = None) -> StoredResponse:
    """202 with ``Retry-After`` (default ``PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS``): the
    outcome at the acquirer is not known yet, or the payment waits to be sent."""
    wait = settings.PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS if retry_after is None else retry_after
    return StoredResponse(
        202,
        {
            "Content-Type": "application/json",
            "Location": location,
            "Retry-After": str(wait),
        },
        body,
    )


def _acquirer_error(location: str, detail: str, **ids: str) -> StoredResponse:
    """The stored 502 problem ``acquirer_error``, with the ids of what was refused."""
    problem = json.loads(
        problem_body(
            status_code=502,
            code="acquirer_error",
            title="The acquirer refused the request",
            detail=detail,
        )
    )
    problem |= ids
    return StoredResponse(
        502, {"Content-Type": PROBLEM_CONTENT_TYPE, "Location": location}, json_bytes(problem)
    )


#: The failure codes of an operation the acquirer did not record as a result: the answer is
#: the 502 problem (a refund the acquirer declined is a result: 201 with status failed).
_REFUSED = frozenset({"acquirer_rejected"})


def render_operation_answer(payment: Payment, operation: PaymentOperation) -> StoredResponse:
    """The answer to the POST that created ``operation``, as stored for replay.

    A capture or void: 200 with the payment when succeeded; 202 with the payment
    (``capture_pending`` / ``void_pending``) and ``Retry-After`` while pending or in review;
    the 502 problem ``acquirer_error`` when the acquirer refused it. A refund: 201 with the
    refund when succeeded or failed at the acquirer (a declined refund is a result); 202 with
    the refund while pending or in review; 502 when refused. The 503 of a certainly-not-sent
    operation is never stored (:func:`operation_answer`).
    """
    unresolved = operation.status in (OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW)
    refused = operation.status == OperationStatus.FAILED and operation.failure_code in _REFUSED
    if operation.kind == OperationKind.REFUND:
        location = f"/refunds/{operation.id}"
        body = json_bytes(RefundSerializer(operation).data)
        status_code = 201
    else:
        location = f"/payments/{payment.id}"
        body = json_bytes(payment_document(payment))
        status_code = 200
    if unresolved:
        return _accepted(location, body)
    if refused:
        ids = {"payment_id": payment.id}
        if operation.kind == OperationKind.REFUND:
            ids["refund_id"] = operation.id
        return _acquirer_error(
            location,
            f"The acquirer refused this {operation.kind}; it was not applied. "
            "Contact support with the payment id.",
            **ids,
        )
    return StoredResponse(
        status_code, {"Content-Type": "application/json", "Location": location}, body
    )
