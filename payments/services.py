"""Writes of the payments app: creating a payment, and the state machine.

``payment_create`` is the idempotent create flow (REFERENCE: rocket-rides, adapted):

* Phase 1, one short transaction: claim the idempotency key and create the payment
  ``processing``; commit. A duplicate request now gets a fast 409 or a replay.
* The acquirer call, outside any transaction, with the payment's acquirer idempotency key.
* Phase 2, one short transaction: record the outcome, its event and the response to replay,
  and complete the key; or, when the request was certainly not applied, mark the payment
  ``failed`` and release the key so the merchant can retry with the same key.

The answer is rendered once, in phase 2, by ``payments.responses.render_payment_answer`` and
stored with the key, so every replay is byte-identical.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from gateway_client import (
    AcquirerClient,
    AmbiguousOutcomeError,
    Authorization,
    AuthorizationRequest,
    CircuitOpenError,
    GatewayError,
    PermanentError,
    RetryableError,
)
from idempotency.fingerprint import request_fingerprint
from idempotency.models import IdempotencyKey
from idempotency.services import (
    ClaimOutcome,
    idempotency_key_claim,
    idempotency_key_complete,
    idempotency_key_lock,
    idempotency_key_release,
)
from merchants.models import Merchant
from payments.crashpoints import crash_point
from payments.models import Payment, PaymentEvent, PaymentStatus, new_payment_id
from payments.responses import StoredResponse, render_payment_answer

logger = logging.getLogger(__name__)

PAYMENTS_ROUTE = "/payments"

#: The payment state machine: from-status -> statuses it may move to. Nothing else changes one.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    PaymentStatus.PROCESSING: frozenset(
        {
            PaymentStatus.SUCCEEDED,
            PaymentStatus.DECLINED,
            PaymentStatus.FAILED,
            PaymentStatus.NEEDS_REVIEW,
        }
    ),
    PaymentStatus.NEEDS_REVIEW: frozenset(
        {PaymentStatus.SUCCEEDED, PaymentStatus.DECLINED, PaymentStatus.FAILED}
    ),
    PaymentStatus.SUCCEEDED: frozenset(),
    PaymentStatus.DECLINED: frozenset(),
    PaymentStatus.FAILED: frozenset(),
}


class InvalidTransition(Exception):
    """A status change that the state machine does not allow."""


class Outcome(enum.Enum):
    """What one authorization attempt established."""

    APPROVED = "approved"  #: the acquirer authorized it.
    DECLINED = "declined"  #: the acquirer declined it (a result, not an error).
    UNKNOWN = "unknown"  #: the acquirer may have applied it: stays processing, reconcile.
    NOT_SENT = "not_sent"  #: certainly not applied: failed, key released.
    CIRCUIT_OPEN = "circuit_open"  #: refused by the open breaker, nothing sent: key released.
    REJECTED = "rejected"  #: the acquirer refused our request (permanent): failed.


@dataclass(frozen=True)
class CreateResult:
    """What :func:`payment_create` did: the payment (None on a replay of a released payment),
    the outcome of this call, the response to send, and whether it is a replay.
    """

    response: StoredResponse | None
    replay_of: IdempotencyKey | None = None
    payment: Payment | None = None
    outcome: Outcome | None = None
    retry_after: int | None = field(default=None)


def payment_transition(
    *,
    payment: Payment,
    to_status: str,
    event_type: str,
    now: datetime,
    data: dict | None = None,
    **changes: Any,
) -> None:
    """Move ``payment`` to ``to_status``, apply ``changes`` and append a :class:`PaymentEvent`.

    Must run inside a transaction holding the payment's row lock. Raises
    :class:`InvalidTransition` when :data:`ALLOWED_TRANSITIONS` forbids the move.
    """
    if to_status not in ALLOWED_TRANSITIONS[payment.status]:
        raise InvalidTransition(f"{payment.status} -> {to_status} is not allowed")
    from_status = payment.status
    payment.status = to_status
    for name, value in changes.items():
        setattr(payment, name, value)
    payment.updated_at = now
    payment.save(update_fields=["status", "updated_at", *changes])
    PaymentEvent.objects.create(
        payment=payment,
        type=event_type,
        from_status=from_status,
        to_status=to_status,
        data=data or {},
        created_at=now,
    )


def payment_event_record(*, payment: Payment, event_type: str, now: datetime, data: dict) -> None:
    """Append an event that does not change the status (for example an acquirer attempt)."""
    PaymentEvent.objects.create(
        payment=payment,
        type=event_type,
        from_status=payment.status,
        to_status=payment.status,
        data=data,
        created_at=now,
    )


def authorization_request(payment: Payment) -> AuthorizationRequest:
    """The request sent to the acquirer for ``payment``: always its own acquirer idempotency key."""
    return AuthorizationRequest(
        amount=payment.amount,
        currency=payment.currency,
        payment_method=payment.payment_method,
        payment_reference=payment.id,
        idempotency_key=payment.acquirer_idempotency_key,
    )


def _authorize(
    client: AcquirerClient, payment: Payment
) -> tuple[Outcome, Authorization | None, dict]:
    """Authorize at the acquirer (outside any transaction; the client retries within its policy)
    and classify what the call established, with an event-ready summary of it."""
    if connection.in_atomic_block:
        raise RuntimeError("The acquirer must not be called inside a database transaction.")
    started = time.monotonic()
    try:
        authorization = client.authorize(authorization_request(payment))
    except GatewayError as exc:
        if isinstance(exc, CircuitOpenError):
            outcome = Outcome.CIRCUIT_OPEN
        elif isinstance(exc, RetryableError):
            outcome = Outcome.NOT_SENT
        elif isinstance(exc, AmbiguousOutcomeError):
            outcome = Outcome.UNKNOWN
        elif isinstance(exc, PermanentError):
            outcome = Outcome.REJECTED
        else:  # pragma: no cover - every GatewayError is one of the three
            raise
        attempt = {
            "operation": "authorize",
            "outcome": outcome.value,
            "error": type(exc).__name__,
            "status_code": exc.status_code,
            "attempts": exc.attempts,
            "elapsed_seconds": round(time.monotonic() - started, 3),
        }
        if isinstance(exc, RetryableError) and exc.retry_after is not None:
            # The acquirer's (or the rate gate's) full wait, in whole seconds, rounded up.
            attempt["retry_after_seconds"] = math.ceil(exc.retry_after)
            attempt["wait_source"] = exc.wait_source
        return outcome, None, attempt
    outcome = Outcome.APPROVED if authorization.approved else Outcome.DECLINED
    attempt = {
        "operation": "authorize",
        "outcome": outcome.value,
        "status_code": 201,
        "acquirer_reference": authorization.acquirer_reference,
        "replayed": authorization.replayed,
        "attempts": authorization.attempts,
        "elapsed_seconds": round(time.monotonic() - started, 3),
    }
    return outcome, authorization, attempt


def _schedule_reconciliation(payment: Payment, now: datetime) -> None:
    """After an unknown outcome (inside phase 2): the sweep's fallback time in the database,
    and a task enqueued when the transaction commits, so the common case resolves in seconds.
    A lost task only delays the payment until the next sweep."""
    from payments.tasks import reconcile_payment  # tasks import services

    payment.next_check_at = now + timedelta(seconds=settings.RECONCILIATION_BACKOFF_BASE_SECONDS)
    payment.save(update_fields=["next_check_at"])
    transaction.on_commit(
        lambda: reconcile_payment.apply_async(
            args=[payment.id], countdown=settings.RECONCILIATION_FIRST_CHECK_SECONDS
        ),
        robust=True,
    )


def _replayable(merchant: Merchant, key: str, now: datetime) -> bool:
    """Whether ``key`` already holds an answer (a replay needs no acquirer). A read, no lock."""
    return IdempotencyKey.objects.filter(
        merchant=merchant, key=key, status=IdempotencyKey.Status.COMPLETED, expires_at__gt=now
    ).exists()


def payment_create(
    *,
    merchant: Merchant,
    idempotency_key: str,
    data: Mapping[str, Any],
    client: AcquirerClient,
    clock: Callable[[], datetime] = timezone.now,
) -> CreateResult:
    """Create a payment idempotently and authorize it at the acquirer.

    ``data`` is the validated body (amount in minor units, ISO 4217 currency, payment_method
    token, optional reference and description). Returns a :class:`CreateResult`: a replay
    (``replay_of`` set), or the outcome with the response to send (``response`` is None for
    :attr:`Outcome.NOT_SENT` and :attr:`Outcome.CIRCUIT_OPEN`, never stored; ``retry_after`` is
    then the wait in whole seconds). An open circuit breaker is checked before anything is
    written, unless the key already holds an answer to replay. Raises ``IdempotencyKeyReused``
    (422) and ``IdempotencyKeyInUse`` (409) from the claim.
    """
    fingerprint = request_fingerprint("POST", PAYMENTS_ROUTE, data)
    lock_timeout = timedelta(seconds=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS)
    now = clock()
    admitted, retry_after = client.admits("authorize")
    if not admitted and not _replayable(merchant, idempotency_key, now):
        # The breaker is open: answer at once, before anything is written; the key stays free.
        return CreateResult(
            response=None, outcome=Outcome.CIRCUIT_OPEN, retry_after=max(1, math.ceil(retry_after))
        )
    with transaction.atomic():
        claim = idempotency_key_claim(
            merchant_id=merchant.pk,
            key=idempotency_key,
            method="POST",
            route=PAYMENTS_ROUTE,
            fingerprint=fingerprint,
            now=now,
            retention=timedelta(seconds=settings.IDEMPOTENCY_KEY_RETENTION_SECONDS),
            lock_timeout=lock_timeout,
        )
        record = claim.record
        # Only a first attempt can prove that nothing was ever applied; a resumed payment (a
        # retry of a 202, or a take-over after a crash) may have been applied before.
        first_attempt = claim.outcome is ClaimOutcome.CREATED
        payment = Payment.objects.filter(idempotency_key=record).first()
        if claim.outcome is ClaimOutcome.COMPLETED:
            still_unknown = payment is not None and payment.status == PaymentStatus.PROCESSING
            if not still_unknown:
                return CreateResult(response=None, replay_of=record)
            # The stored answer is a 202: re-send with the same acquirer idempotency key.
            idempotency_key_lock(record=record, now=now)
            payment_event_record(
                payment=payment, event_type="merchant_retry", now=now, data={"resumed": True}
            )
        elif payment is None:
            payment_id = new_payment_id()
            payment = Payment.objects.create(
                id=payment_id,
                merchant=merchant,
                idempotency_key=record,
                amount=data["amount"],
                currency=data["currency"],
                payment_method=data["payment_method"],
                reference=data.get("reference"),
                description=data.get("description"),
                status=PaymentStatus.PROCESSING,
                acquirer_idempotency_key=f"authorize-{payment_id}",
                created_at=now,
                updated_at=now,
                # If this request dies before phase 2, reconciliation finds the payment here.
                next_check_at=now + lock_timeout,
            )
            payment_event_record(payment=payment, event_type="payment_created", now=now, data={})
        else:
            payment_event_record(
                payment=payment, event_type="key_taken_over", now=now, data={"resumed": True}
            )

    crash_point("after_phase1_commit")
    outcome, authorization, attempt = _authorize(client, payment)
    crash_point("after_acquirer_answer")
    if outcome in (Outcome.NOT_SENT, Outcome.CIRCUIT_OPEN) and not first_attempt:
        outcome = Outcome.UNKNOWN  # this attempt was not applied; an earlier one may have been

    now = clock()
    with transaction.atomic():
        payment = Payment.objects.select_for_update(no_key=True).get(pk=payment.pk)
        record = IdempotencyKey.objects.select_for_update().get(pk=record.pk)
        payment_event_record(payment=payment, event_type="acquirer_attempt", now=now, data=attempt)
        if payment.status != PaymentStatus.PROCESSING:
            pass  # Resolved meanwhile (by reconciliation): the answer renders what is now true.
        elif outcome is Outcome.APPROVED:
            payment_transition(
                payment=payment,
                to_status=PaymentStatus.SUCCEEDED,
                event_type="authorization_approved",
                now=now,
                acquirer_reference=authorization.acquirer_reference,
                next_check_at=None,
            )
        elif outcome is Outcome.DECLINED:
            payment_transition(
                payment=payment,
                to_status=PaymentStatus.DECLINED,
                event_type="authorization_declined",
                now=now,
                acquirer_reference=authorization.acquirer_reference,
                decline_code=authorization.decline_code,
                next_check_at=None,
            )
        elif outcome in (Outcome.NOT_SENT, Outcome.CIRCUIT_OPEN):
            payment_transition(
                payment=payment,
                to_status=PaymentStatus.FAILED,
                event_type="authorization_not_sent",
                now=now,
                failure_code=(
                    "circuit_open" if outcome is Outcome.CIRCUIT_OPEN else "acquirer_unavailable"
                ),
                next_check_at=None,
            )
            idempotency_key_release(record=record)
            return CreateResult(
                response=None,
                payment=payment,
                outcome=outcome,
                retry_after=attempt.get("retry_after_seconds"),
            )
        elif outcome is Outcome.REJECTED:
            payment_transition(
                payment=payment,
                to_status=PaymentStatus.FAILED,
                event_type="authorization_rejected",
                now=now,
                failure_code="acquirer_rejected",
                next_check_at=None,
            )
        else:
            payment_event_record(
                payment=payment, event_type="authorization_outcome_unknown", now=now, data={}
            )
            _schedule_reconciliation(payment, now)
        response = render_payment_answer(payment)
        idempotency_key_complete(
            record=record,
            status_code=response.status_code,
            headers=response.headers,
            body=response.body,
            now=now,
        )
        crash_point("before_phase2_commit")
    logger.info(
        "payment %s authorize outcome=%s status=%s", payment.id, outcome.value, payment.status
    )
    return CreateResult(response=response, payment=payment, outcome=outcome)
