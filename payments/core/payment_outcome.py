"""The create flow's phase 2 for a known outcome in one statement: the payment's update, both
events and the key's answer (ADR 0026).

:func:`payment_outcome_record` is the hand-written SQL twin of
:func:`~payments.core.payment_states.payment_transition` plus
:func:`~payments.core.payment_states.payment_answer_store` for that one case, taking the same
locks in the same order as :func:`~payments.core.payment_states.payment_lock_with_key`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from config.request_context import current_request_id
from idempotency.models import IdempotencyKey
from idempotency.prepared_cursor import prepared_cursor
from idempotency.services import (
    REPLAYED_HEADERS,
    insert_row_parts,
)
from payments.core.answers import StoredResponse, render_payment_answer
from payments.core.payment_states import (
    assert_in_transaction,
    payment_webhook_record,
    resolved_status,
)
from payments.models import (
    Payment,
    PaymentEvent,
    PaymentEventType,
)


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
    payment_webhook_record(payment, now)
    return payment, answer
