"""The payment state machine: transitions, events, the stored answer, and the row locks.

Every write that changes a payment stands on this module: the create flow
(``payments.services``), reconciliation (``payments.reconciliation``) and the operators'
actions (``payments.operations``). Nothing here calls the acquirer or enqueues a task.

* :data:`ALLOWED_TRANSITIONS` and :func:`payment_transition`: the only way a status changes,
  each change with its :class:`~payments.models.PaymentEvent`.
* :func:`payment_event_record`: an event that does not change the status.
* :func:`payment_answer_store`: the answer a replay of the merchant's idempotency key returns,
  rendered from what is true now and stored with the key.
* :func:`payment_lock` and :func:`payment_lock_with_key`: the only row locks taken on
  ``Payment`` (besides reconciliation's ``SKIP LOCKED`` claims).

Lock order, everywhere: **the payment, then its idempotency key.** The payment row is locked
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

from idempotency.models import IdempotencyKey
from idempotency.services import idempotency_key_complete
from payments.models import Payment, PaymentEvent, PaymentEventType, PaymentStatus
from payments.responses import StoredResponse, render_payment_answer

__all__ = [
    "ALLOWED_TRANSITIONS",
    "InvalidTransition",
    "UnexpectedStatus",
    "payment_answer_store",
    "payment_event_record",
    "payment_lock",
    "payment_lock_with_key",
    "payment_transition",
]

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
    """A status change that :data:`ALLOWED_TRANSITIONS` does not allow."""


class UnexpectedStatus(Exception):
    """The locked payment is not in one of the statuses the caller expected (it was resolved
    meanwhile, for example). ``payment`` is the locked payment, ``status`` its status."""

    def __init__(self, payment: Payment, expected: Collection[str]) -> None:
        self.payment = payment
        self.status = payment.status
        self.expected = frozenset(expected)
        super().__init__(f"payment {payment.pk} is {payment.status}, not {sorted(self.expected)}")


def _assert_in_transaction() -> None:
    if not connection.in_atomic_block:
        raise RuntimeError("A row lock must be taken inside transaction.atomic().")


def payment_lock(pk: str, *, expect: Collection[str] | None = None) -> Payment:
    """Lock the payment ``pk`` (``FOR NO KEY UPDATE``) and return it, read after the lock.

    Inside a transaction only (``RuntimeError`` otherwise). With ``expect`` (statuses), raises
    :class:`UnexpectedStatus` when the payment is in none of them; the caller's transaction
    then rolls back, having written nothing. Raises ``Payment.DoesNotExist`` for an unknown id.
    """
    _assert_in_transaction()
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
