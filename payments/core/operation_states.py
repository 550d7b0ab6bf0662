"""The operation state machine: captures, voids and refunds after the authorization
(:class:`~payments.models.PaymentOperation`).

* The amount rules: :func:`capturable_amount`, :func:`refundable_amount`, :func:`operation_check`.
* :func:`operation_open`: phase 1's row (the operation ``pending``, the payment moved to
  ``capture_pending`` / ``void_pending`` when it is a capture or a void).
* :data:`OPERATION_OUTCOMES` and :func:`operation_attempt_record`: phase 2's one table.
* :func:`operation_settle`: every final outcome of an operation (from phase 2, reconciliation or
  the beat); :func:`operation_escalate`: ``needs_review``.
* :func:`operation_lock_with_key`: the only row lock on an operation.

Lock order: the payment, then the operation, then the operation's idempotency key
(:mod:`payments.core.payment_states`). Nothing here calls the acquirer or enqueues a task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Sum

from idempotency.models import IdempotencyKey
from idempotency.services import (
    idempotency_key_complete,
    idempotency_key_release,
)
from payments.core.answers import StoredResponse, render_operation_answer
from payments.core.attempts import AcquirerAttempt, AuthorizationOutcome
from payments.core.documents import RefundSerializer
from payments.core.payment_states import (
    InvalidTransition,
    assert_in_transaction,
    payment_event_record,
    payment_lock,
    payment_transition,
)
from payments.models import (
    OperationKind,
    OperationStatus,
    Payment,
    PaymentEventType,
    PaymentOperation,
    PaymentStatus,
    new_operation_id,
)
from webhooks.outbox import event_record

#: The operation state machine: ``pending`` until the acquirer's outcome is known;
#: ``needs_review`` when reconciliation gave up, resolved later by a look-up or an operator.
OPERATION_TRANSITIONS: dict[str, frozenset[str]] = {
    OperationStatus.PENDING: frozenset(
        {OperationStatus.SUCCEEDED, OperationStatus.FAILED, OperationStatus.NEEDS_REVIEW}
    ),
    OperationStatus.NEEDS_REVIEW: frozenset({OperationStatus.SUCCEEDED, OperationStatus.FAILED}),
    OperationStatus.SUCCEEDED: frozenset(),
    OperationStatus.FAILED: frozenset(),
}

#: The event of a refund's change into each of its statuses (a capture's or a void's own status
#: is not the merchant's: the payment's change is).
REFUND_WEBHOOK_EVENTS: dict[str, str] = {
    OperationStatus.SUCCEEDED: "refund.succeeded",
    OperationStatus.FAILED: "refund.failed",
    OperationStatus.NEEDS_REVIEW: "refund.needs_review",
}


def _refund_webhook(payment: Payment, operation: PaymentOperation, now: datetime) -> None:
    """The outbox event of a refund's change into its (new) status."""
    if operation.kind != OperationKind.REFUND:
        return
    operation.payment = payment  # the locked row: the refund's currency without a query
    event_record(
        merchant_id=payment.merchant_id,
        event_type=REFUND_WEBHOOK_EVENTS[operation.status],
        object_id=operation.id,
        obj=RefundSerializer(operation).data,
        now=now,
    )


class OperationConflict(Exception):
    """The payment's state or amounts forbid the operation: a ``409`` problem, nothing stored.

    ``code``: ``invalid_payment_state``, ``amount_exceeds_capturable`` or
    ``amount_exceeds_refundable``; ``detail``: a sentence for the merchant (no request values).
    """

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")


#: The payment status each operation needs.
_REQUIRED_STATUS = {
    OperationKind.CAPTURE: PaymentStatus.REQUIRES_CAPTURE,
    OperationKind.VOID: PaymentStatus.REQUIRES_CAPTURE,
    OperationKind.REFUND: PaymentStatus.SUCCEEDED,
}

#: Phase 1 moves the payment to these (a refund leaves the status alone), with this event.
_OPENED = {
    OperationKind.CAPTURE: (PaymentStatus.CAPTURE_PENDING, PaymentEventType.CAPTURE_REQUESTED),
    OperationKind.VOID: (PaymentStatus.VOID_PENDING, PaymentEventType.VOID_REQUESTED),
    OperationKind.REFUND: (None, PaymentEventType.REFUND_REQUESTED),
}

#: A final outcome per kind: (payment status when succeeded, event), (payment status when
#: failed, event). None: the payment's status does not change.
_SETTLED = {
    OperationKind.CAPTURE: (
        (PaymentStatus.SUCCEEDED, PaymentEventType.CAPTURE_SUCCEEDED),
        (PaymentStatus.REQUIRES_CAPTURE, PaymentEventType.CAPTURE_FAILED),
    ),
    OperationKind.VOID: (
        (PaymentStatus.CANCELED, PaymentEventType.VOID_SUCCEEDED),
        (PaymentStatus.REQUIRES_CAPTURE, PaymentEventType.VOID_FAILED),
    ),
    OperationKind.REFUND: (
        (None, PaymentEventType.REFUND_SUCCEEDED),
        (None, PaymentEventType.REFUND_FAILED),
    ),
}


def capturable_amount(payment: Payment) -> int:
    """What a capture of ``payment`` may take, in minor units: the authorized amount while it
    is ``requires_capture`` (one capture; a partial capture releases the rest), else 0."""
    return payment.amount if payment.status == PaymentStatus.REQUIRES_CAPTURE else 0


def refundable_amount(payment: Payment) -> int:
    """What remains refundable on ``payment``, in minor units: ``amount_captured`` minus every
    refund that is not ``failed`` (pending and needs_review ones count: they may have been
    applied). Exact only under the payment's row lock (every refund is created under it)."""
    reserved = (
        PaymentOperation.objects.filter(payment=payment, kind=OperationKind.REFUND)
        .exclude(status=OperationStatus.FAILED)
        .aggregate(total=Sum("amount"))["total"]
    )
    return payment.amount_captured - (reserved or 0)


def operation_check(payment: Payment, kind: str, amount: int | None) -> int:
    """Check that ``kind`` may run on the locked ``payment`` for ``amount`` (minor units, or
    None for the default) and return the amount the operation takes: a capture's default is the
    authorized amount, a void's is always it, a refund's is what remains refundable.

    Raises :class:`OperationConflict` (``invalid_payment_state``, ``amount_exceeds_capturable``,
    ``amount_exceeds_refundable``). Under the payment's row lock, in phase 1's transaction.
    """
    if payment.status != _REQUIRED_STATUS[kind]:
        raise OperationConflict(
            "invalid_payment_state",
            f"A {kind} needs a payment in status {_REQUIRED_STATUS[kind]}; "
            f"this one is {payment.status}.",
        )
    if kind == OperationKind.VOID:
        return payment.amount
    if kind == OperationKind.CAPTURE:
        if amount is not None and amount > capturable_amount(payment):
            raise OperationConflict(
                "amount_exceeds_capturable", "The amount is more than the authorized amount."
            )
        return payment.amount if amount is None else amount
    remaining = refundable_amount(payment)
    if remaining <= 0 or (amount is not None and amount > remaining):
        raise OperationConflict(
            "amount_exceeds_refundable",
            "The amount is more than what remains refundable (the captured amount minus "
            "every refund that has not failed, pending ones included).",
        )
    return remaining if amount is None else amount


def operation_open(
    *,
    payment: Payment,
    kind: str,
    amount: int,
    reason: str | None,
    key: IdempotencyKey | None,
    now: datetime,
    check_at: datetime,
    data: dict | None = None,
) -> PaymentOperation:
    """Phase 1's row: insert the ``pending`` operation with its own acquirer idempotency key
    (``<kind>-<id>``, fixed here for every attempt, re-send and reconciliation) and move the
    payment (``capture_pending`` / ``void_pending``; a refund only records an event).

    ``amount`` as :func:`operation_check` returned it; ``check_at``: when reconciliation looks
    at it if the request dies before phase 2. Under the payment's row lock.
    """
    operation_id = new_operation_id(kind)
    operation = PaymentOperation.objects.create(
        id=operation_id,
        payment=payment,
        kind=kind,
        amount=amount,
        reason=reason,
        acquirer_idempotency_key=f"{kind}-{operation_id}",
        idempotency_key=key,
        created_at=now,
        updated_at=now,
        next_check_at=check_at,
    )
    to_status, event_type = _OPENED[kind]
    event = {"operation": operation.id, "kind": kind, "amount": amount} | (data or {})
    if to_status is None:
        payment_event_record(payment=payment, event_type=event_type, now=now, data=event)
    else:
        payment_transition(
            payment=payment, to_status=to_status, event_type=event_type, now=now, data=event
        )
    return operation


def operation_lock_with_key(
    operation_id: str,
) -> tuple[Payment, PaymentOperation, IdempotencyKey | None]:
    """Lock the operation's payment (``FOR NO KEY UPDATE``), then the operation (the same),
    then its idempotency key (``FOR UPDATE``): the documented order. Inside a transaction.
    Raises ``PaymentOperation.DoesNotExist`` for an unknown id."""
    assert_in_transaction()
    payment_id = (
        PaymentOperation.objects.filter(pk=operation_id).values_list("payment_id", flat=True).get()
    )
    payment = payment_lock(payment_id)
    operation = PaymentOperation.objects.select_for_update(no_key=True).get(pk=operation_id)
    key = None
    if operation.idempotency_key_id is not None:
        key = IdempotencyKey.objects.select_for_update().get(pk=operation.idempotency_key_id)
    return payment, operation, key


def operation_answer_store(
    payment: Payment, operation: PaymentOperation, *, key: IdempotencyKey | None, now: datetime
) -> StoredResponse:
    """Render the answer to the operation's POST for what it is now
    (:func:`~payments.core.answers.render_operation_answer`) and store it for ``key`` (None
    stores nothing), so every replay returns it byte for byte. Under the locks."""
    answer = render_operation_answer(payment, operation)
    if key is not None:
        idempotency_key_complete(
            record=key,
            status_code=answer.status_code,
            headers=answer.headers,
            body=answer.body,
            now=now,
        )
    return answer


def operation_settle(
    *,
    payment: Payment,
    operation: PaymentOperation,
    succeeded: bool,
    now: datetime,
    data: dict,
    failure_code: str | None = None,
    amount: int | None = None,
    acquirer_reference: str | None = None,
    to_status: str | None = None,
) -> None:
    """Record the final outcome of ``operation`` (and what it does to the payment) once.

    Succeeded: a capture moves the payment ``succeeded`` with ``amount_captured`` = ``amount``
    (the acquirer's captured amount, default the operation's), a void ``canceled``, a refund
    adds ``amount`` to ``amount_refunded``. Failed (``failure_code``): a capture or void moves
    the payment back to ``requires_capture``; a refund frees its amount. ``to_status``
    overrides the operation's new status (``needs_review`` is :func:`operation_escalate`'s).
    Under :func:`operation_lock_with_key`'s locks. Raises :class:`InvalidTransition` when the
    operation is already final.
    """
    new_status = to_status or (OperationStatus.SUCCEEDED if succeeded else OperationStatus.FAILED)
    if new_status not in OPERATION_TRANSITIONS[operation.status]:
        raise InvalidTransition(f"operation {operation.status} -> {new_status} is not allowed")
    applied = operation.amount if amount is None else amount
    operation.status = new_status
    operation.failure_code = failure_code
    if acquirer_reference is not None:
        operation.acquirer_reference = acquirer_reference
    if succeeded:
        operation.amount = applied
    operation.next_check_at = None
    operation.reconciliation_lease_until = None
    operation.updated_at = now
    operation.save()
    (ok_status, ok_event), (failed_status, failed_event) = _SETTLED[operation.kind]
    payment_status, event_type = (
        (ok_status, ok_event) if succeeded else (failed_status, failed_event)
    )
    event = {"operation": operation.id, "kind": operation.kind, "amount": applied} | data
    if failure_code is not None:
        event["failure_code"] = failure_code
    changes: dict[str, Any] = {}
    if succeeded and operation.kind == OperationKind.CAPTURE:
        changes["amount_captured"] = applied
    if succeeded and operation.kind == OperationKind.REFUND:
        changes["amount_refunded"] = payment.amount_refunded + applied
    if payment_status is not None and payment.status != payment_status:
        payment_transition(
            payment=payment, to_status=payment_status, event_type=event_type, now=now,
            data=event, **changes,
        )  # fmt: skip
        _refund_webhook(payment, operation, now)
        return
    for name, value in changes.items():
        setattr(payment, name, value)
    if changes:
        payment.updated_at = now
        payment.save(update_fields=[*changes, "updated_at"])
    payment_event_record(payment=payment, event_type=event_type, now=now, data=event)
    _refund_webhook(payment, operation, now)


def operation_escalate(
    *, payment: Payment, operation: PaymentOperation, now: datetime, reason: str
) -> None:
    """``pending -> needs_review``: reconciliation gave up on ``operation`` (too old, too many
    attempts). The payment keeps its status (``capture_pending`` / ``void_pending`` until the
    operation is resolved); an ``operation_needs_review`` event says why. Under the locks."""
    if OperationStatus.NEEDS_REVIEW not in OPERATION_TRANSITIONS[operation.status]:
        raise InvalidTransition(f"operation {operation.status} -> needs_review is not allowed")
    operation.status = OperationStatus.NEEDS_REVIEW
    operation.next_check_at = None
    operation.reconciliation_lease_until = None
    operation.updated_at = now
    operation.save()
    payment_event_record(
        payment=payment,
        event_type=PaymentEventType.OPERATION_NEEDS_REVIEW,
        now=now,
        data={
            "operation": operation.id,
            "kind": operation.kind,
            "reason": reason,
            "attempts": operation.reconciliation_attempts,
        },
    )
    _refund_webhook(payment, operation, now)


#: Phase 2's one table for operations: the attempt's outcome -> (succeeded, failure code).
#: Missing, :attr:`AuthorizationOutcome.UNKNOWN` and ``PENDING`` (accepted, outcome later): the
#: operation stays ``pending`` (a capture's payment ``capture_pending``), reconciled.
#: ``DECLINED`` is a refund the acquirer recorded as failed (its code is the attempt's).
OPERATION_OUTCOMES: dict[AuthorizationOutcome, tuple[bool, str | None]] = {
    AuthorizationOutcome.APPROVED: (True, None),
    AuthorizationOutcome.DECLINED: (False, None),
    AuthorizationOutcome.NOT_SENT: (False, "acquirer_unavailable"),
    AuthorizationOutcome.CIRCUIT_OPEN: (False, "circuit_open"),
    AuthorizationOutcome.REJECTED: (False, "acquirer_rejected"),
}


@dataclass(frozen=True)
class OperationRecorded:
    """What phase 2 recorded: the payment and operation as they are now; ``response`` the
    stored answer, or None when the attempt was certainly not applied (``unavailable``: the
    key was released, nothing to replay); ``unknown`` when reconciliation must resolve it."""

    payment: Payment
    operation: PaymentOperation
    response: StoredResponse | None
    unknown: bool = False
    retry_after: int | None = None

    @property
    def unavailable(self) -> bool:
        return self.response is None


def operation_attempt_record(
    operation_id: str,
    attempt: AcquirerAttempt,
    *,
    first_attempt: bool,
    now: datetime,
    check_at: datetime,
    on_unknown: Callable[[PaymentOperation], None] | None = None,
) -> OperationRecorded:
    """Phase 2 of an operation: record ``attempt`` under the payment's, the operation's and
    its key's locks, inside the caller's transaction.

    The ``operation_attempt`` event always; then, while the operation is ``pending``, the
    outcome :data:`OPERATION_OUTCOMES` gives (:func:`operation_settle`), or for an unknown
    or pending outcome an ``operation_outcome_unknown`` event (``received: true`` and the
    acquirer's id of the modification kept on the operation for a pending one),
    ``next_check_at = check_at`` and ``on_unknown(operation)`` (the caller enqueues its task on
    commit). A not-applied outcome
    of a resumed operation counts as unknown (an earlier attempt may have been applied).
    Certainly not applied: the key is released, nothing stored. Otherwise the answer is stored
    for the key.
    """
    assert_in_transaction()
    outcome = attempt.outcome
    if outcome.not_applied and not first_attempt:
        outcome = AuthorizationOutcome.UNKNOWN
    payment, operation, key = operation_lock_with_key(operation_id)
    payment_event_record(
        payment=payment,
        event_type=PaymentEventType.OPERATION_ATTEMPT,
        now=now,
        data=attempt.as_event_data() | {"operation": operation.id, "kind": operation.kind},
    )
    unknown = False
    if operation.status != OperationStatus.PENDING:
        pass  # Resolved meanwhile (by reconciliation): the answer renders what is now true.
    elif outcome in OPERATION_OUTCOMES:
        succeeded, failure_code = OPERATION_OUTCOMES[outcome]
        operation_settle(
            payment=payment,
            operation=operation,
            succeeded=succeeded,
            now=now,
            data={"how": "answer"},
            failure_code=failure_code or attempt.decline_code,
            amount=attempt.amount,
            acquirer_reference=attempt.acquirer_reference,
        )
        if outcome.not_applied:
            if key is not None:
                idempotency_key_release(record=key)
            return OperationRecorded(
                payment, operation, None, retry_after=attempt.retry_after_seconds
            )
    else:
        unknown = True
        data = {"operation": operation.id, "kind": operation.kind}
        changed = ["next_check_at"]
        if outcome is AuthorizationOutcome.PENDING:
            # Accepted without its outcome (Adyen's `received`): the modification's id at the
            # acquirer, which its notification names, is kept on the pending operation.
            data["received"] = True
            if attempt.acquirer_reference:
                operation.acquirer_reference = attempt.acquirer_reference
                changed.append("acquirer_reference")
        payment_event_record(
            payment=payment,
            event_type=PaymentEventType.OPERATION_OUTCOME_UNKNOWN,
            now=now,
            data=data,
        )
        operation.next_check_at = check_at
        operation.save(update_fields=changed)
        if on_unknown is not None:
            on_unknown(operation)
    response = operation_answer_store(payment, operation, key=key, now=now)
    return OperationRecorded(payment, operation, response, unknown=unknown)
