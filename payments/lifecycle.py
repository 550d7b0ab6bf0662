"""The payment state machine: transitions, events, the stored answer, and the row locks.

Every write that changes a payment stands on this module: the create flow
(``payments.services``), reconciliation (``payments.reconciliation``) and the operators'
actions (``payments.operations``). Nothing here calls the acquirer or enqueues a task.

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

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Sum

from idempotency.models import IdempotencyKey
from idempotency.prepared_cursor import prepared_cursor
from idempotency.services import (
    REPLAYED_HEADERS,
    idempotency_key_complete,
    idempotency_key_release,
    insert_row_parts,
)
from observability.request_context import current_request_id
from payments.acquirer.authorize import AcquirerAttempt, AuthorizationOutcome
from payments.models import (
    CaptureMethod,
    OperationKind,
    OperationStatus,
    Payment,
    PaymentEvent,
    PaymentEventType,
    PaymentOperation,
    PaymentStatus,
    new_operation_id,
)
from payments.responses import (
    StoredResponse,
    payment_document,
    render_operation_answer,
    render_payment_answer,
)
from payments.serializers import RefundSerializer
from webhooks.outbox import event_record

__all__ = [
    "ALLOWED_TRANSITIONS",
    "OPERATION_OUTCOMES",
    "OPERATION_TRANSITIONS",
    "PAYMENT_WEBHOOK_EVENTS",
    "REFUND_WEBHOOK_EVENTS",
    "InvalidTransition",
    "OperationConflict",
    "OperationRecorded",
    "UnexpectedStatus",
    "capturable_amount",
    "operation_answer_store",
    "operation_attempt_record",
    "operation_check",
    "operation_lock_with_key",
    "operation_open",
    "operation_settle",
    "payment_answer_store",
    "payment_event_record",
    "payment_lock",
    "payment_lock_with_key",
    "payment_outcome_record",
    "payment_transition",
    "refundable_amount",
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
    # Not sent anywhere yet (payments/deferred.py): the sweep submits it, or it expires.
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

#: The event of a refund's change into each of its statuses (a capture's or a void's own status
#: is not the merchant's: the payment's change is).
REFUND_WEBHOOK_EVENTS: dict[str, str] = {
    OperationStatus.SUCCEEDED: "refund.succeeded",
    OperationStatus.FAILED: "refund.failed",
    OperationStatus.NEEDS_REVIEW: "refund.needs_review",
}


def _payment_webhook(payment: Payment, now: datetime) -> None:
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


def _resolved_status(payment: Payment, to_status: str, changes: dict[str, Any]) -> str:
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
    to_status = _resolved_status(payment, to_status, changes)
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
    _payment_webhook(payment, now)


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
    ``processing`` payment, changed here in memory: pass a copy).

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
    _assert_in_transaction()
    db = connections[DEFAULT_DB_ALIAS]  # once: each ``connection.x`` is a thread-local look-up
    from_status = payment.status
    to_status = _resolved_status(payment, to_status, changes)
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
    key_fields = [
        IdempotencyKey._meta.get_field(name)
        for name in ("response_status", "response_headers", "response_body", "completed_at")
    ]
    key_values = [
        answer.status_code,
        {k: v for k, v in answer.headers.items() if k in REPLAYED_HEADERS},
        answer.body,
        now,
    ]
    params += [f.get_db_prep_save(v, db) for f, v in zip(key_fields, key_values, strict=True)]
    params.append(IdempotencyKey.Status.COMPLETED)
    key_table = qn(IdempotencyKey._meta.db_table)
    sql = (
        f"WITH updated_payment AS (UPDATE {qn(Payment._meta.db_table)} SET {assignments} "  # noqa: S608
        "WHERE id = %s AND status = %s RETURNING id, idempotency_key_id), "
        f"events AS (INSERT INTO {qn(PaymentEvent._meta.db_table)} ({names}) "
        f"SELECT {aliases} FROM (VALUES {', '.join(rows)}) AS v(n, {aliases}) "
        "CROSS JOIN updated_payment ORDER BY v.n), "
        f"completed_key AS (UPDATE {key_table} SET "
        + ", ".join(f"{qn(f.column)} = %s" for f in key_fields)
        + ", status = %s, locked_at = NULL "
        "WHERE id = (SELECT idempotency_key_id FROM updated_payment)) "
        "SELECT id FROM updated_payment"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        if cursor.fetchone() is None:
            return None
    _payment_webhook(payment, now)
    return payment, answer


# --- Operations after the authorization: captures, voids, refunds ----------------------------


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
    _assert_in_transaction()
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
    (:func:`~payments.responses.render_operation_answer`) and store it for ``key`` (None
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
#: Missing, :attr:`AuthorizationOutcome.UNKNOWN`: the operation stays ``pending``, reconciled.
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
    outcome an ``operation_outcome_unknown`` event, ``next_check_at = check_at`` and
    ``on_unknown(operation)`` (the caller enqueues its task on commit). A not-applied outcome
    of a resumed operation counts as unknown (an earlier attempt may have been applied).
    Certainly not applied: the key is released, nothing stored. Otherwise the answer is stored
    for the key.
    """
    _assert_in_transaction()
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
        payment_event_record(
            payment=payment,
            event_type=PaymentEventType.OPERATION_OUTCOME_UNKNOWN,
            now=now,
            data={"operation": operation.id, "kind": operation.kind},
        )
        operation.next_check_at = check_at
        operation.save(update_fields=["next_check_at"])
        if on_unknown is not None:
            on_unknown(operation)
    response = operation_answer_store(payment, operation, key=key, now=now)
    return OperationRecorded(payment, operation, response, unknown=unknown)
