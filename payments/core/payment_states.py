"""The payment state machine: transitions, events, the stored answer, and the row locks.

Every write that changes a payment stands on this module: the create flow
(``payments.authorization.create``), reconciliation (``payments.reconciliation.payments``) and
the operators' actions (``payments.admin.operator_actions``). Nothing here calls the acquirer or
enqueues a task.

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
  the same order as :func:`payment_lock_with_key` (ADR 0026): the SQL form of
  :func:`payment_transition` and :func:`payment_answer_store`, beside them, so one module
  writes the rule both ways (the key's columns through ``idempotency_key_complete_sql``).
* :func:`payment_lock` and :func:`payment_lock_with_key`: the only row locks taken on
  ``Payment`` (besides reconciliation's ``SKIP LOCKED`` claims).
* The operations after the authorization (captures, voids, refunds) have their own state
  machine: :mod:`payments.core.operation_states`.

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

from django.db import DEFAULT_DB_ALIAS, connection, connections

from idempotency.models import IdempotencyKey
from idempotency.prepared_cursor import prepared_cursor
from idempotency.services import (
    idempotency_key_complete,
    idempotency_key_complete_sql,
    insert_row_parts,
)
from observability.request_context import current_request_id
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
    "payment_outcome_record",
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
            PaymentStatus.REQUIRES_ACTION,  # the acquirer holds it for the shopper (ADR 0049)
        }
    ),
    # Held for the shopper (3-D Secure): the acquirer's outcome once the shopper acted (looked
    # up on the shopper's return, a notification, or the expiry sweep), or canceled (voided)
    # when the action expired (payments/reconciliation/actions.py).
    PaymentStatus.REQUIRES_ACTION: frozenset(
        {
            PaymentStatus.SUCCEEDED,
            PaymentStatus.REQUIRES_CAPTURE,
            PaymentStatus.DECLINED,
            PaymentStatus.FAILED,
            PaymentStatus.CANCELED,
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
#: says so. ``requires_action`` has one: the merchant may learn of it from a reconciliation.
PAYMENT_WEBHOOK_EVENTS: dict[str, str] = {
    PaymentStatus.SUCCEEDED: "payment.succeeded",
    PaymentStatus.REQUIRES_CAPTURE: "payment.requires_capture",
    PaymentStatus.DECLINED: "payment.declined",
    PaymentStatus.FAILED: "payment.failed",
    PaymentStatus.CANCELED: "payment.canceled",
    PaymentStatus.NEEDS_REVIEW: "payment.needs_review",
    PaymentStatus.REQUIRES_ACTION: "payment.requires_action",
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
    """Raise ``RuntimeError`` outside ``transaction.atomic()``: a row lock or a write of the
    state machines belongs inside the caller's transaction."""
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
        PaymentStatus.REQUIRES_ACTION,
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


def payment_outcome_record(
    payment: Payment,
    *,
    attempt_data: dict,
    to_status: str,
    event_type: PaymentEventType,
    now: datetime,
    changes: dict[str, Any],
) -> tuple[Payment, StoredResponse] | None:
    """Phase 2 of the create flow in one statement, for ``payment`` as phase 1 left it (a
    ``processing`` payment, changed here in memory: pass a copy). The one-statement SQL form of
    :func:`payment_transition` (with :func:`payment_event_record` of the attempt before it)
    followed by :func:`payment_answer_store`, for this one case; the key's columns are
    written by the idempotency app (``idempotency_key_complete_sql``, the SQL form of
    ``idempotency_key_complete``).

    While the row is still ``processing``: the transition to ``to_status`` with ``changes``
    (:func:`payment_transition`'s rules), the ``acquirer_attempt`` event (``attempt_data``)
    and the transition's ``event_type``, in that order, and the answer stored for the
    payment's idempotency key, all in one ``UPDATE ... RETURNING`` with data-modifying CTEs:
    the key's update reads the payment's returned row, so the payment row is locked before
    the key's, the lock order of :func:`payment_lock_with_key`. Then the webhook outbox event.
    Returns the payment and its stored answer, or None when the row was no longer
    ``processing`` (resolved meanwhile: nothing written; take the locks and read it). Inside
    the caller's transaction; raises :class:`InvalidTransition` as
    :func:`payment_transition` does.
    """
    assert_in_transaction()
    db = connections[DEFAULT_DB_ALIAS]  # once: each ``connection.x`` is a thread-local look-up
    from_status = payment.status
    to_status = resolved_status(payment, to_status, changes)
    payment.status = to_status
    for name, value in changes.items():
        setattr(payment, name, value)
    payment.updated_at = now
    answer = render_payment_answer(payment)
    qn = db.ops.quote_name
    fields = [Payment._meta.get_field(name) for name in ("status", "updated_at", *changes)]
    assignments = ", ".join(f"{qn(field.column)} = %s" for field in fields)
    params: list[object] = [
        field.get_db_prep_save(getattr(payment, field.attname), db) for field in fields
    ]
    params += [payment.pk, from_status]
    request_id = current_request_id()
    rows, names = [], ""
    for n, (kind, data, status_before) in enumerate(
        ((PaymentEventType.ACQUIRER_ATTEMPT, attempt_data, from_status), (event_type, {}, None))
    ):
        event = {
            "payment_id": payment.pk,
            "type": kind,
            "from_status": status_before or from_status,
            "to_status": from_status if status_before else to_status,
            "data": data,
            "created_at": now,
            "request_id": request_id,
        }
        columns, values, event_params = insert_row_parts(PaymentEvent, event)
        rows.append(f"({n}, {values})")
        params += event_params
        names = columns
    aliases = ", ".join(f"c{i}" for i in range(names.count(",") + 1))
    key_sql, key_params = idempotency_key_complete_sql(
        key_id="SELECT idempotency_key_id FROM updated_payment",
        status_code=answer.status_code,
        headers=answer.headers,
        body=answer.body,
        now=now,
    )
    params += key_params
    sql = (
        f"WITH updated_payment AS (UPDATE {qn(Payment._meta.db_table)} SET {assignments} "  # noqa: S608
        "WHERE id = %s AND status = %s RETURNING id, idempotency_key_id), "
        f"events AS (INSERT INTO {qn(PaymentEvent._meta.db_table)} ({names}) "
        f"SELECT {aliases} FROM (VALUES {', '.join(rows)}) AS v(n, {aliases}) "
        "CROSS JOIN updated_payment ORDER BY v.n), "
        f"completed_key AS ({key_sql}) "
        "SELECT id FROM updated_payment"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        if cursor.fetchone() is None:
            return None
    payment_webhook_record(payment, now)
    return payment, answer
