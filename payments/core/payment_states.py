"""The payment state machine: transitions, events, the stored answer, and the row locks.

Every write that changes a payment stands on this module: the create flow
(``payments.authorization.create``), reconciliation (``payments.reconciliation.payments``) and the
operators'
actions (``payments.admin.operator_actions``). Nothing here calls the acquirer or enqueues a task.

* :data:`ALLOWED_TRANSITIONS` and :func:`payment_transition`: the only way a status changes,
  each change with its :class:`~payments.models.PaymentEvent`.
* :func:`payment_event_record`: an event that does not change the status.
* The webhook outbox (``webhooks.outbox.event_record``): every change into a status of
  :data:`PAYMENT_WEBHOOK_EVENTS` (and of a refund into one of :data:`REFUND_WEBHOOK_EVENTS`)
  writes its merchant event in the same transaction, so no change lacks its event and no event
  lacks its change; the outbox enqueues the delivery when the transaction commits.
* :func:`payment_answer_store`: the answer a replay of the merchant's idempotency key returns,
  rendered from what is true now and stored with the key.
* :func:`payment_outcome_record`: the create flow's phase 2 for a known outcome in one
  statement (the payment's update, both events, the key's answer), taking the same locks in
  the same order as :func:`payment_lock_with_key` (ADR 0026).
* :func:`payment_lock` and :func:`payment_lock_with_key`: the only row locks taken on
  ``Payment`` (besides reconciliation's ``SKIP LOCKED`` claims).
* The operations after the authorization (captures, voids, refunds:
  :class:`~payments.models.PaymentOperation`): the amount rules (:func:`capturable_amount`,
  :func:`refundable_amount`, :func:`operation_check`), :func:`operation_open` (phase 1's row),
  :data:`OPERATION_OUTCOMES` and :func:`operation_attempt_record` (phase 2's one table),
  :func:`operation_settle` (every final outcome of an operation, from phase 2, reconciliation
  or the beat), and :func:`operation_lock_with_key`, the only row lock on an operation.

Lock order, everywhere: **the payment, then its idempotency key** (for an operation: **the
payment, then the operation, then the operation's idempotency key**). The payment row is locked
``FOR NO KEY UPDATE`` (``select_for_update(no_key=True)``), the key row ``FOR UPDATE``. The one
path that holds a key first is phase 1 of the create flow (the claim), and it only creates the
payment or appends an event to it; the event's foreign key takes ``KEY SHARE`` on the payment,
which ``FOR NO KEY UPDATE`` does not block, so a request holding a key never waits for a
transaction holding the payment, and the two never deadlock (``tests/integration/
test_row_locks.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.db import connection

from config.request_context import current_request_id
from idempotency.models import IdempotencyKey
from idempotency.services import (
    idempotency_key_complete,
)
from payments.core.answers import (
    StoredResponse,
    payment_document,
    render_payment_answer,
)
from payments.models import (
    CaptureMethod,
    Payment,
    PaymentEvent,
    PaymentEventType,
    PaymentStatus,
)
from webhooks.outbox import event_record

__all__ = [
    "ALLOWED_TRANSITIONS",
    "PAYMENT_WEBHOOK_EVENTS",
    "InvalidTransition",
    "UnexpectedStatus",
    "assert_in_transaction",
    "payment_answer_store",
    "payment_event_record",
    "payment_lock",
    "payment_lock_with_key",
    "payment_transition",
    "payment_webhook_record",
    "resolved_status",
]

#: The payment state machine: from-status -> statuses it may move to. Nothing else changes one.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    PaymentStatus.PROCESSING: frozenset(
        {
            PaymentStatus.DEFERRED,  # certainly not applied, and the merchant allowed it
            PaymentStatus.SUCCEEDED,
            PaymentStatus.REQUIRES_CAPTURE,
            PaymentStatus.DECLINED,
            PaymentStatus.FAILED,
            PaymentStatus.NEEDS_REVIEW,
        }
    ),
    # Not sent anywhere yet (payments/authorization/deferred_sweep.py): the sweep submits it, or it
    # expires.
    PaymentStatus.DEFERRED: frozenset({PaymentStatus.PROCESSING, PaymentStatus.FAILED}),
    PaymentStatus.NEEDS_REVIEW: frozenset(
        {
            PaymentStatus.SUCCEEDED,
            PaymentStatus.REQUIRES_CAPTURE,
            PaymentStatus.DECLINED,
            PaymentStatus.FAILED,
        }
    ),
    # A manual payment: authorized, held until a capture or a void.
    PaymentStatus.REQUIRES_CAPTURE: frozenset(
        {PaymentStatus.CAPTURE_PENDING, PaymentStatus.VOID_PENDING}
    ),
    PaymentStatus.CAPTURE_PENDING: frozenset(
        {PaymentStatus.SUCCEEDED, PaymentStatus.REQUIRES_CAPTURE}
    ),
    PaymentStatus.VOID_PENDING: frozenset({PaymentStatus.CANCELED, PaymentStatus.REQUIRES_CAPTURE}),
    PaymentStatus.SUCCEEDED: frozenset(),  # refunds change amount_refunded, never the status
    PaymentStatus.DECLINED: frozenset(),
    PaymentStatus.FAILED: frozenset(),
    PaymentStatus.CANCELED: frozenset(),
}


#: The statuses an authorization's approval leaves the payment in, by capture method.
_APPROVED_STATUS = {
    CaptureMethod.AUTOMATIC: PaymentStatus.SUCCEEDED,
    CaptureMethod.MANUAL: PaymentStatus.REQUIRES_CAPTURE,
}


#: The merchant's webhook event of a change into each payment status. The pending statuses
#: (processing, deferred, capture_pending, void_pending) have none: the answer of the call
#: says so.
PAYMENT_WEBHOOK_EVENTS: dict[str, str] = {
    PaymentStatus.SUCCEEDED: "payment.succeeded",
    PaymentStatus.REQUIRES_CAPTURE: "payment.requires_capture",
    PaymentStatus.DECLINED: "payment.declined",
    PaymentStatus.FAILED: "payment.failed",
    PaymentStatus.CANCELED: "payment.canceled",
    PaymentStatus.NEEDS_REVIEW: "payment.needs_review",
}


def payment_webhook_record(payment: Payment, now: datetime) -> None:
    """The outbox event of ``payment``'s change into its (new) status, if it has one."""
    event_type = PAYMENT_WEBHOOK_EVENTS.get(payment.status)
    if event_type is not None:
        event_record(
            merchant_id=payment.merchant_id,
            event_type=event_type,
            object_id=payment.id,
            obj=payment_document(payment),
            now=now,
        )


class InvalidTransition(Exception):
    """A status change that :data:`ALLOWED_TRANSITIONS` does not allow."""


class UnexpectedStatus(Exception):
    """The locked payment is not in one of the statuses the caller expected (it was resolved
    meanwhile, for example). ``payment`` is the locked payment, ``status`` its status."""

    def __init__(self, payment: Payment, expected: Collection[str]) -> None:
        self.payment = payment
        self.status = payment.status
        self.expected = frozenset(expected)
        super().__init__(f"payment {payment.pk} is {payment.status}, not {sorted(self.expected)}")


def assert_in_transaction() -> None:
    if not connection.in_atomic_block:
        raise RuntimeError("A row lock must be taken inside transaction.atomic().")


def payment_lock(pk: str, *, expect: Collection[str] | None = None) -> Payment:
    """Lock the payment ``pk`` (``FOR NO KEY UPDATE``) and return it, read after the lock.

    Inside a transaction only (``RuntimeError`` otherwise). With ``expect`` (statuses), raises
    :class:`UnexpectedStatus` when the payment is in none of them; the caller's transaction
    then rolls back, having written nothing. Raises ``Payment.DoesNotExist`` for an unknown id.
    """
    assert_in_transaction()
    payment = Payment.objects.select_for_update(no_key=True).get(pk=pk)
    if expect is not None and payment.status not in expect:
        raise UnexpectedStatus(payment, expect)
    return payment


def payment_lock_with_key(
    pk: str, *, expect: Collection[str] | None = None
) -> tuple[Payment, IdempotencyKey | None]:
    """Lock the payment (as :func:`payment_lock`), then its idempotency key (``FOR UPDATE``),
    in the documented order. The key is None when the payment has none (expired, released, or
    a payment created without one)."""
    payment = payment_lock(pk, expect=expect)
    if payment.idempotency_key_id is None:
        return payment, None
    return payment, IdempotencyKey.objects.select_for_update().get(pk=payment.idempotency_key_id)


def resolved_status(payment: Payment, to_status: str, changes: dict[str, Any]) -> str:
    """``to_status`` as the state machine applies it to ``payment`` (an approval of a manual
    payment is ``requires_capture``; of an automatic one, ``succeeded`` with everything
    captured, added to ``changes``). Raises :class:`InvalidTransition`."""
    if to_status == PaymentStatus.SUCCEEDED and payment.status in (
        PaymentStatus.PROCESSING,
        PaymentStatus.NEEDS_REVIEW,
    ):
        to_status = _APPROVED_STATUS[payment.capture_method]
        if to_status == PaymentStatus.SUCCEEDED:
            changes["amount_captured"] = payment.amount
    if to_status not in ALLOWED_TRANSITIONS[payment.status]:
        raise InvalidTransition(f"{payment.status} -> {to_status} is not allowed")
    return to_status


def payment_transition(
    *,
    payment: Payment,
    to_status: str,
    event_type: PaymentEventType,
    now: datetime,
    data: dict | None = None,
    **changes: Any,
) -> None:
    """Move ``payment`` to ``to_status``, apply ``changes`` (field name -> value) and append a
    :class:`~payments.models.PaymentEvent` of ``event_type`` with ``data``.

    Must run inside a transaction holding the payment's row lock (:func:`payment_lock`). Raises
    :class:`InvalidTransition` when :data:`ALLOWED_TRANSITIONS` forbids the move.

    The authorization's approval, wherever it is recorded (the create flow, reconciliation, an
    operator), is one rule here: ``succeeded`` asked for an unresolved payment means "approved",
    which for a ``manual`` payment is ``requires_capture`` (nothing captured) and for an
    ``automatic`` one ``succeeded`` with ``amount_captured = amount``.
    """
    to_status = resolved_status(payment, to_status, changes)
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
        request_id=current_request_id(),
    )
    payment_webhook_record(payment, now)


def payment_event_record(
    *, payment: Payment, event_type: PaymentEventType, now: datetime, data: dict
) -> None:
    """Append an event that does not change the status (an acquirer attempt, a merchant's
    retry, an operator's request). ``data`` is JSON: never secrets or card data."""
    PaymentEvent.objects.create(
        payment=payment,
        type=event_type,
        from_status=payment.status,
        to_status=payment.status,
        data=data,
        created_at=now,
        request_id=current_request_id(),
    )


def payment_answer_store(
    payment: Payment, *, key: IdempotencyKey | None, now: datetime
) -> StoredResponse:
    """Render the answer to ``POST /payments`` for what ``payment`` is now and store it for
    ``key`` (completing the key), so every replay of the key returns it byte for byte.

    ``key`` is the payment's locked key (:func:`payment_lock_with_key`); None stores nothing.
    Returns the rendered answer. Inside the transaction that holds both locks.
    """
    answer = render_payment_answer(payment)
    if key is not None:
        idempotency_key_complete(
            record=key,
            status_code=answer.status_code,
            headers=answer.headers,
            body=answer.body,
            now=now,
        )
    return answer
