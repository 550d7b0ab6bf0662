"""Captures, voids and refunds at the acquirer, as the payments app sees them.

:func:`operation_request` maps a :class:`~payments.models.PaymentOperation` to the gateway's
request (:class:`~gateway_client.CaptureRequest`, :class:`~gateway_client.VoidRequest`,
:class:`~gateway_client.RefundRequest`), always with the operation's own acquirer idempotency
key and its fixed amount, so every attempt, re-send and reconciliation sends the same request.
:func:`operation_send` makes the call outside any transaction and classifies it into the
:class:`~payments.core.attempts.AcquirerAttempt` the authorization uses (``APPROVED`` =
applied, ``DECLINED`` = a refund the acquirer recorded as failed, ``PENDING`` = accepted
without its outcome (:class:`~gateway_client.Received`, Adyen's ``received``); the gateway's
error tree gives not sent / unknown / rejected). :func:`operation_found` reads a look-up's answer.

Nothing here writes to the database.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gateway_client import (
    AcquirerClient,
    Authorization,
    CaptureRequest,
    GatewayError,
    Received,
    Refund,
    RefundRequest,
    RetryPolicy,
    VoidRequest,
)
from observability.request_context import current_request_id
from payments.acquirer.authorize import attempt_log_data, failed_attempt
from payments.acquirer.connection import waiting_on_acquirer
from payments.core.attempts import AcquirerAttempt, AuthorizationOutcome
from payments.models import OperationKind, Payment, PaymentOperation

__all__ = ["Found", "operation_found", "operation_lookup", "operation_request", "operation_send"]


def operation_request(
    payment: Payment, operation: PaymentOperation
) -> CaptureRequest | VoidRequest | RefundRequest:
    """The request for ``operation`` on ``payment``'s charge (``payment.acquirer_reference``):
    a capture or refund of ``operation.amount`` minor units (always explicit, so a re-send is
    the same request), a void, each with ``operation.acquirer_idempotency_key``; a refund
    carries the refund id as its reference (``GET /refunds?reference=`` finds it). Each
    names the payment's currency and a capture or void the operation's id, for a provider that
    files modifications under them (Adyen; the others send neither)."""
    charge = payment.acquirer_reference or ""
    key = operation.acquirer_idempotency_key
    if operation.kind == OperationKind.CAPTURE:
        return CaptureRequest(
            acquirer_reference=charge,
            amount=operation.amount,
            idempotency_key=key,
            currency=payment.currency,
            reference=operation.id,
        )
    if operation.kind == OperationKind.VOID:
        return VoidRequest(acquirer_reference=charge, idempotency_key=key, reference=operation.id)
    return RefundRequest(
        acquirer_reference=charge,
        refund_reference=operation.id,
        amount=operation.amount,
        idempotency_key=key,
        currency=payment.currency,
    )


def _call(
    client: AcquirerClient,
    payment: Payment,
    operation: PaymentOperation,
    policy: RetryPolicy | None,
) -> Authorization | Refund | Received:
    request = operation_request(payment, operation)
    with waiting_on_acquirer():  # after the rows are read: none is read during the call
        if isinstance(request, CaptureRequest):
            return client.capture(request, policy=policy, request_id=current_request_id())
        if isinstance(request, VoidRequest):
            return client.void(request, policy=policy, request_id=current_request_id())
        return client.refund(request, policy=policy, request_id=current_request_id())


def _answered(
    operation: PaymentOperation, answer: Authorization | Refund | Received
) -> AcquirerAttempt:
    if isinstance(answer, Received):
        return AcquirerAttempt(
            outcome=AuthorizationOutcome.PENDING,
            status_code=201,
            attempts=answer.attempts,
            elapsed_seconds=0.0,
            operation=operation.kind,
            acquirer_reference=answer.acquirer_reference,
            replayed=answer.replayed,
            amount=answer.amount,
            attempt_log=attempt_log_data(answer.attempt_log),
        )
    if isinstance(answer, Refund):
        succeeded = answer.status == "succeeded"
        return AcquirerAttempt(
            outcome=AuthorizationOutcome.APPROVED if succeeded else AuthorizationOutcome.DECLINED,
            status_code=201,
            attempts=answer.attempts,
            elapsed_seconds=0.0,
            operation=operation.kind,
            acquirer_reference=answer.acquirer_reference,
            decline_code=None if succeeded else (answer.failure_code or "refund_failed"),
            replayed=answer.replayed,
            amount=answer.amount,
            attempt_log=attempt_log_data(answer.attempt_log),
        )
    return AcquirerAttempt(
        outcome=AuthorizationOutcome.APPROVED,
        status_code=200,
        attempts=answer.attempts,
        elapsed_seconds=0.0,
        operation=operation.kind,
        replayed=answer.replayed,
        amount=answer.amount_captured if operation.kind == OperationKind.CAPTURE else None,
        attempt_log=attempt_log_data(answer.attempt_log),
    )


def operation_send(
    client: AcquirerClient,
    payment: Payment,
    operation: PaymentOperation,
    *,
    policy: RetryPolicy | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> AcquirerAttempt:
    """Send ``operation`` to ``client``'s acquirer (the payment's: ``client_for``) and return
    the classified attempt, naming that acquirer.

    Outside any transaction (``RuntimeError`` otherwise), the database connection back in the
    pool for the call (``payments.acquirer.connection``). The client retries within
    ``policy`` (default its own); nothing here retries. Never raises a
    :class:`~gateway_client.GatewayError`: each becomes an outcome (a rule refusal of the
    acquirer, 404/422, is ``REJECTED`` with the acquirer's ``code``). ``monotonic`` (seconds)
    times the call.
    """
    started = monotonic()
    try:
        answer = _call(client, payment, operation, policy)
    except GatewayError as exc:
        attempt = failed_attempt(exc, operation=operation.kind, elapsed=monotonic() - started)
        return replace(attempt, acquirer=client.config.name)
    return replace(
        _answered(operation, answer),
        elapsed_seconds=round(monotonic() - started, 3),
        acquirer=client.config.name,
    )


@dataclass(frozen=True)
class Found:
    """What a look-up established about an operation. ``applied``: True (the acquirer shows it
    applied), False (it shows the opposite outcome: a capture of a voided charge, a void of a
    captured one, a failed refund), None (no trace: not applied yet, or the look-up lags).
    ``amount``, ``acquirer_reference``, ``failure_code``: from the acquirer's record."""

    applied: bool | None
    amount: int | None = None
    acquirer_reference: str | None = None
    failure_code: str | None = None
    records: int = 0


def operation_lookup(
    client: AcquirerClient,
    payment: Payment,
    operation: PaymentOperation,
    *,
    policy: RetryPolicy | None = None,
) -> Found:
    """Look ``operation`` up by our reference: a capture or void by the charge's capture state
    (``GET /charges?reference=<payment id>``), a refund by its id
    (``GET /refunds?reference=<refund id>``). Outside any transaction (``RuntimeError``
    otherwise), the connection back in the pool for the call. Raises the gateway's errors (the
    caller reschedules)."""
    with waiting_on_acquirer():
        if operation.kind == OperationKind.REFUND:
            found = client.lookup_refunds(
                operation.id,
                acquirer_reference=payment.acquirer_reference,
                policy=policy,
                request_id=current_request_id(),
            )
            return operation_found(operation, found)
        found_charges = client.lookup(payment.id, policy=policy, request_id=current_request_id())
    return operation_found(operation, found_charges)


def operation_found(
    operation: PaymentOperation, records: list[Authorization] | list[Refund]
) -> Found:
    """Read a look-up's ``records`` for ``operation`` (see :class:`Found`)."""
    if operation.kind == OperationKind.REFUND:
        refunds = [r for r in records if isinstance(r, Refund)]
        if not refunds:
            return Found(None)
        succeeded = [r for r in refunds if r.status == "succeeded"]
        refund = succeeded[0] if succeeded else refunds[0]
        return Found(
            applied=bool(succeeded),
            amount=refund.amount,
            acquirer_reference=refund.acquirer_reference,
            failure_code=None if succeeded else (refund.failure_code or "refund_failed"),
            records=len(refunds),
        )
    charges = [c for c in records if isinstance(c, Authorization) and c.approved]
    if not charges:
        return Found(None)
    charge = charges[0]
    if operation.kind == OperationKind.CAPTURE:
        if charge.captured:
            return Found(True, amount=charge.amount_captured, records=len(charges))
        if charge.voided:
            return Found(False, failure_code="charge_voided", records=len(charges))
        return Found(None, records=len(charges))
    if charge.voided:
        return Found(True, records=len(charges))
    if charge.captured:
        return Found(False, failure_code="charge_captured", records=len(charges))
    return Found(None, records=len(charges))
