"""One authorization at the acquirer, as the payments app sees it.

:func:`authorization_request` maps a :class:`~payments.models.Payment` to the gateway's
:class:`~gateway_client.AuthorizationRequest` (always with the payment's own acquirer
idempotency key); :func:`payment_authorize` makes the call, outside any transaction, and
classifies what it established (:class:`AuthorizationOutcome`, from the gateway's error tree:
retryable = not applied, ambiguous = maybe applied, permanent = refused) into a frozen
:class:`AcquirerAttempt`, the record stored as the ``acquirer_attempt`` event.

Nothing here writes to the database: the create flow records the attempt in its phase 2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from django.conf import settings

from gateway_client import (
    AcquirerClient,
    ActionRequired,
    AmbiguousOutcomeError,
    AttemptRecord,
    AuthorizationRequest,
    CircuitOpenError,
    GatewayError,
    PermanentError,
    RetryableError,
    RetryPolicy,
)
from observability.request_context import current_request_id
from payments.acquirer.connection import waiting_on_acquirer
from payments.core.attempts import AcquirerAttempt, AuthorizationOutcome
from payments.models import CaptureMethod, Payment

__all__ = [
    "attempt_log_data",
    "authorization_request",
    "failed_attempt",
    "payment_authorize",
    "return_address",
]

#: The path of the shopper's return (``payments.api.customer_views``), after the base URL.
RETURN_PATH = "/payments/return/"


def return_address(payment: Payment) -> str | None:
    """Where the acquirer sends the shopper back after a customer action: our return endpoint
    with the payment's unguessable token (``PUBLIC_BASE_URL`` + ``/payments/return/<token>``);
    None for a payment without a ``return_url`` (no shopper can come back). Never logged."""
    if not payment.return_token:
        return None
    return settings.PUBLIC_BASE_URL.rstrip("/") + RETURN_PATH + payment.return_token


def attempt_log_data(records: tuple[AttemptRecord, ...]) -> tuple[dict, ...]:
    """The gateway's records of one call as JSON-ready dicts (fields that apply only)."""
    return tuple(record.as_dict() for record in records)


def authorization_request(payment: Payment) -> AuthorizationRequest:
    """The request sent to the acquirer for ``payment``: amount in minor units, ISO 4217
    currency, the token, our payment id as the reference, ``capture`` False for a manual
    payment (authorize only), always the payment's own acquirer idempotency key (so a re-send
    is answered from the acquirer's record), and our return address when the merchant gave a
    ``return_url`` (:func:`return_address`; ADR 0049)."""
    return AuthorizationRequest(
        amount=payment.amount,
        currency=payment.currency,
        payment_method=payment.payment_method,
        payment_reference=payment.id,
        idempotency_key=payment.acquirer_idempotency_key,
        capture=payment.capture_method == CaptureMethod.AUTOMATIC,
        return_url=return_address(payment),
    )


def _classify(exc: GatewayError) -> AuthorizationOutcome:
    if isinstance(exc, CircuitOpenError):
        return AuthorizationOutcome.CIRCUIT_OPEN
    if isinstance(exc, RetryableError):
        return AuthorizationOutcome.NOT_SENT
    if isinstance(exc, AmbiguousOutcomeError):
        return AuthorizationOutcome.UNKNOWN
    if isinstance(exc, PermanentError):
        return AuthorizationOutcome.REJECTED
    raise exc  # pragma: no cover - every GatewayError is one of the three branches


def failed_attempt(exc: GatewayError, *, operation: str, elapsed: float) -> AcquirerAttempt:
    """The :class:`AcquirerAttempt` of a call to ``operation`` that raised ``exc``: classified
    (retryable = not sent, ambiguous = unknown, permanent = rejected, open breaker), with the
    acquirer's wait and its refusal code when it gave them. ``elapsed`` in seconds."""
    retry_after = getattr(exc, "retry_after", None) if isinstance(exc, RetryableError) else None
    code = getattr(exc, "acquirer_code", None) if isinstance(exc, PermanentError) else None
    return AcquirerAttempt(
        outcome=_classify(exc),
        status_code=exc.status_code,
        attempts=exc.attempts,
        elapsed_seconds=round(elapsed, 3),
        operation=operation,
        error=type(exc).__name__,
        retry_after_seconds=None if retry_after is None else math.ceil(retry_after),
        wait_source=None if retry_after is None else exc.wait_source,
        code=code if isinstance(code, str) else None,
        attempt_log=attempt_log_data(exc.attempt_log),
    )


def payment_authorize(
    client: AcquirerClient,
    payment: Payment,
    *,
    policy: RetryPolicy | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> AcquirerAttempt:
    """Authorize ``payment`` at ``client``'s acquirer and return the classified
    :class:`AcquirerAttempt`, naming that acquirer.

    Outside any transaction (``RuntimeError`` otherwise): no network call holds a row lock,
    and the database connection goes back to the pool for the call
    (:func:`~payments.acquirer.connection.waiting_on_acquirer`: the run slot lent too).
    The client retries within ``policy`` (None: its own; a failover passes the request's
    remaining deadline); nothing here retries. Never raises a
    :class:`~gateway_client.GatewayError`: each becomes an outcome. ``monotonic`` (seconds)
    times the call.
    """
    request = authorization_request(payment)
    started = monotonic()
    try:
        with waiting_on_acquirer():
            authorization = client.authorize(
                request, policy=policy, request_id=current_request_id()
            )
    except GatewayError as exc:
        attempt = failed_attempt(exc, operation="authorize", elapsed=monotonic() - started)
        return replace(attempt, acquirer=client.config.name)
    if isinstance(authorization, ActionRequired):
        return AcquirerAttempt(
            outcome=AuthorizationOutcome.ACTION_REQUIRED,
            status_code=201,
            attempts=authorization.attempts,
            elapsed_seconds=round(monotonic() - started, 3),
            acquirer_reference=authorization.acquirer_reference,
            replayed=authorization.replayed,
            attempt_log=attempt_log_data(authorization.attempt_log),
            acquirer=client.config.name,
            action_url=authorization.url,
        )
    return AcquirerAttempt(
        outcome=(
            AuthorizationOutcome.APPROVED
            if authorization.approved
            else AuthorizationOutcome.DECLINED
        ),
        status_code=201,
        attempts=authorization.attempts,
        elapsed_seconds=round(monotonic() - started, 3),
        acquirer_reference=authorization.acquirer_reference,
        decline_code=authorization.decline_code,
        replayed=authorization.replayed,
        attempt_log=attempt_log_data(authorization.attempt_log),
        acquirer=client.config.name,
    )
