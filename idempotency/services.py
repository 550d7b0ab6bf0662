"""Claiming, completing, releasing and purging idempotency keys.

The life of a key (Brandur Leach's rocket-rides design, adapted):

1. **Claim** (:func:`idempotency_key_claim`, inside the caller's phase-1 transaction): INSERT
   the row with ``ON CONFLICT DO NOTHING``; the unique constraint on (merchant, key) decides the
   race (a concurrent claim waits only for the other phase-1 transaction to commit). On a
   conflict the existing row is locked and compared: another request -> 422, still running ->
   409 at once, completed -> replay, locked longer than the lock timeout (a crashed request)
   -> taken over.
2. The caller commits, then does its network call **outside any transaction**.
3. **Complete** (:func:`idempotency_key_complete`) stores the response to replay, or
   **release** (:func:`idempotency_key_release`) deletes the row when nothing happened, so the
   same key can be retried as a fresh request.

Expiry is decided when a key is read: an expired row counts as absent and is replaced. The
purge (:func:`idempotency_keys_purge_expired`) only reclaims space.

The hot path (:func:`idempotency_key_claim_at_once`, ADR 0026) does the common cases in one
statement and no transaction: a new key is inserted together with the caller's own rows (one
statement is atomic), and an existing key is read from the same statement's snapshot, enough to
answer a replay, a ``409`` or a ``422`` without a lock. Every other case (a key taken over, a
stored ``202`` to re-send, an expired key, a concurrent claim the snapshot missed) returns None
and the caller claims with :func:`idempotency_key_claim` under the row lock, as before.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Field, Model, Q

from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from idempotency.models import IdempotencyKey
from idempotency.prepared_cursor import prepared_cursor
from observability.trace_context import span_note

#: Response headers kept for replay; everything else is produced fresh on each answer.
REPLAYED_HEADERS = ("Content-Type", "Location", "Retry-After")


class ClaimOutcome(enum.Enum):
    """How a claim ended when it did not raise."""

    CREATED = "created"  #: a new key: run the request.
    TAKEN_OVER = "taken_over"  #: a key left in progress by a crashed request: resume it.
    COMPLETED = "completed"  #: the request already ran: replay the stored response.


@dataclass(frozen=True)
class Claim:
    """The result of :func:`idempotency_key_claim`: the locked row and what to do with it."""

    record: IdempotencyKey
    outcome: ClaimOutcome


def _assert_in_transaction() -> None:
    if not connection.in_atomic_block:
        raise RuntimeError("This function must run inside transaction.atomic().")


def idempotency_key_claim(
    *,
    merchant_id: int,
    key: str,
    method: str,
    route: str,
    fingerprint: str,
    now: datetime,
    retention: timedelta,
    lock_timeout: timedelta,
) -> Claim:
    """Claim ``key`` for ``merchant_id``; must run inside the caller's ``transaction.atomic()``.

    Returns a :class:`Claim` whose ``record`` is row-locked until the caller commits. Raises
    :class:`IdempotencyKeyReused` (422) when the stored fingerprint, method or route differ, and
    :class:`IdempotencyKeyInUse` (409) when another request holds the key and its lock is
    younger than ``lock_timeout``. Never waits for the running request: it only waits, briefly,
    for a concurrent claim's phase-1 transaction to commit.
    """
    _assert_in_transaction()
    for _ in range(3):  # a row that vanished between the conflict and the read: claim again
        record = _insert_unless_present(
            _new_record(merchant_id, key, method, route, fingerprint, now, retention)
        )
        if record is not None:
            return _claimed(record, ClaimOutcome.CREATED)
        record = (
            IdempotencyKey.objects.select_for_update()
            .filter(merchant_id=merchant_id, key=key)
            .first()
        )
        if record is not None:
            break
    else:  # pragma: no cover - three releases in a row between our statements
        raise _refused(IdempotencyKeyInUse())
    if record.expires_at <= now:
        # Expired: the key counts as absent. Replace the row (its old resource keeps existing).
        record.delete()
        return idempotency_key_claim(
            merchant_id=merchant_id,
            key=key,
            method=method,
            route=route,
            fingerprint=fingerprint,
            now=now,
            retention=retention,
            lock_timeout=lock_timeout,
        )
    if (record.request_fingerprint, record.method, record.route) != (fingerprint, method, route):
        raise _refused(IdempotencyKeyReused())
    if record.status == IdempotencyKey.Status.COMPLETED:
        return _claimed(record, ClaimOutcome.COMPLETED)
    if record.locked_at is not None and record.locked_at > now - lock_timeout:
        raise _refused(IdempotencyKeyInUse())
    idempotency_key_lock(record=record, now=now)
    return _claimed(record, ClaimOutcome.TAKEN_OVER)


#: The ``idempotency`` field of the request's log lines (observability/request_context.py), by
#: claim.
LOG_OUTCOMES = {
    ClaimOutcome.CREATED: "new",
    ClaimOutcome.TAKEN_OVER: "taken_over",
    ClaimOutcome.COMPLETED: "replay",
    IdempotencyKeyInUse: "in_use",
    IdempotencyKeyReused: "reused",
}


#: The span attribute of the claim's outcome (ADR 0044), the values of :data:`LOG_OUTCOMES`.
SPAN_OUTCOME = "payments.idempotency.outcome"


def _claimed(record: IdempotencyKey, outcome: ClaimOutcome) -> Claim:
    """The claim's result, its outcome bound for the request's log lines and put on the
    running span."""
    structlog.contextvars.bind_contextvars(idempotency=LOG_OUTCOMES[outcome])
    span_note({SPAN_OUTCOME: LOG_OUTCOMES[outcome]})
    return Claim(record=record, outcome=outcome)


def _refused(error: IdempotencyKeyInUse | IdempotencyKeyReused) -> Exception:
    """``error``, its outcome (``in_use``, ``reused``) bound for the request's log lines and
    put on the running span."""
    structlog.contextvars.bind_contextvars(idempotency=LOG_OUTCOMES[type(error)])
    span_note({SPAN_OUTCOME: LOG_OUTCOMES[type(error)]})
    return error


@functools.cache
def _insert_columns(model: type[Model]) -> tuple[tuple[Field, ...], tuple[str, ...]]:
    """``model``'s concrete fields in their order and their quoted columns, computed once."""
    fields = tuple(model._meta.concrete_fields)
    quote = connections[DEFAULT_DB_ALIAS].ops.quote_name
    return fields, tuple(quote(field.column) for field in fields)


def insert_parts(
    record: object, *, expressions: Mapping[str, str] | None = None
) -> tuple[str, str, list[object]]:
    """The parts of an ``INSERT`` of the unsaved model instance ``record``: the quoted column
    list, the value list (``%s`` placeholders, or the SQL of ``expressions`` by attribute
    name, such as a column of a CTE) and the parameters, every concrete field but an automatic
    primary key, prepared as the ORM prepares them for a save."""
    expressions = expressions or {}
    db = connections[DEFAULT_DB_ALIAS]  # once: each ``connection.x`` goes through a proxy
    columns, values, params = [], [], []
    for field, column in zip(*_insert_columns(type(record)), strict=True):
        value = getattr(record, field.attname)
        if field.primary_key and value is None:
            continue  # an automatic id: the database's sequence
        columns.append(column)
        if field.attname in expressions:
            values.append(expressions[field.attname])
        else:
            values.append("%s")
            params.append(field.get_db_prep_save(value, db))
    return ", ".join(columns), ", ".join(values), params


def insert_row_parts(
    model: type[Model], row: Mapping[str, object]
) -> tuple[str, str, list[object]]:
    """:func:`insert_parts` for a row of ``model`` given as attribute name -> value, without a
    model instance (whose ``__init__`` costs more than the insert's parameters): ``row`` holds
    every concrete field but an automatic primary key (``KeyError`` names a missing one), used
    as given (no field default applied) and prepared as the ORM prepares them for a save."""
    db = connections[DEFAULT_DB_ALIAS]
    columns, params = [], []
    for field, column in zip(*_insert_columns(model), strict=True):
        if field.primary_key and field.db_returning and field.attname not in row:
            continue  # an automatic id: the database's sequence
        columns.append(column)
        params.append(field.get_db_prep_save(row[field.attname], db))
    return ", ".join(columns), ", ".join(["%s"] * len(params)), params


def idempotency_key_claim_at_once(
    *,
    merchant_id: int,
    key: str,
    method: str,
    route: str,
    fingerprint: str,
    now: datetime,
    retention: timedelta,
    lock_timeout: timedelta,
    then: Sequence[tuple[str, Sequence[object]]] = (),
    rows_model: type[Model],
    pending_status: str,
) -> Claim | None:
    """Claim ``key`` in one statement, outside any transaction (autocommit), with the caller's
    ``then``: CTE bodies (``name AS (INSERT ...)``, parameters) that read the new key's id from
    the CTE ``claimed_key(id)`` and so run only when the key is new, in the same atomic
    statement. ``rows_model``: the model whose ``idempotency_key_id`` row (the payment) tells
    whether a completed key's answer is final (its status is not ``pending_status``).

    Returns a :class:`Claim`: ``CREATED`` (the record saved, the caller's rows with it) or
    ``COMPLETED`` (a final answer to replay; the record read, not locked). Raises
    :class:`IdempotencyKeyReused` (422) and :class:`IdempotencyKeyInUse` (409, a lock younger
    than ``lock_timeout``) as :func:`idempotency_key_claim` does. Returns None for every other
    case (taken over, a stored answer of a pending row, expired, or a key committed by a
    concurrent claim after this statement's snapshot): claim with :func:`idempotency_key_claim`.
    """
    db = connections[DEFAULT_DB_ALIAS]  # once: each ``connection.x`` is a thread-local look-up
    if db.in_atomic_block:
        raise RuntimeError("The one-statement claim runs outside transaction.atomic().")
    record = _new_record(merchant_id, key, method, route, fingerprint, now, retention)
    qn = db.ops.quote_name
    table = qn(IdempotencyKey._meta.db_table)
    rows_table = qn(rows_model._meta.db_table)
    columns, values, params = insert_parts(record)
    ctes = [
        f"claimed_key AS (INSERT INTO {table} ({columns}) VALUES ({values}) "  # noqa: S608
        "ON CONFLICT (merchant_id, key) DO NOTHING RETURNING id)"
    ]
    for sql, extra in then:
        ctes.append(sql)
        params.extend(extra)
    params.extend([merchant_id, key])
    sql = (
        f"WITH {', '.join(ctes)} "  # noqa: S608
        "SELECT true, id, NULL::varchar, NULL::varchar, NULL::varchar, NULL::varchar, "
        "NULL::timestamptz, NULL::timestamptz, NULL::integer, NULL::jsonb, NULL::bytea, "
        "NULL::varchar FROM claimed_key UNION ALL "
        "SELECT false, o.id, o.status, o.request_fingerprint, o.method, o.route, o.locked_at, "
        "o.expires_at, o.response_status, o.response_headers, o.response_body, r.status "
        f"FROM {table} o LEFT JOIN {rows_table} r ON r.idempotency_key_id = o.id "
        "WHERE o.merchant_id = %s AND o.key = %s AND NOT EXISTS (SELECT FROM claimed_key)"
    )
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None  # a concurrent claim committed after our snapshot: claim under the lock
    created, pk, status, stored_fingerprint, stored_method, stored_route = row[:6]
    locked_at, expires_at, response_status, headers, body, row_status = row[6:]
    record.pk = pk
    record._state.adding = False
    record._state.db = db.alias
    if created:
        return _claimed(record, ClaimOutcome.CREATED)
    if expires_at <= now:
        return None  # expired: replaced under the lock
    if (stored_fingerprint, stored_method, stored_route) != (fingerprint, method, route):
        raise _refused(IdempotencyKeyReused())
    if status == IdempotencyKey.Status.COMPLETED:
        if row_status == pending_status:
            return None  # a stored 202: re-sent under the lock
        record.status = status
        record.locked_at = None
        record.response_status = response_status
        record.response_headers = json.loads(headers) if isinstance(headers, str) else headers
        record.response_body = bytes(body) if body is not None else None
        record.expires_at = expires_at
        return _claimed(record, ClaimOutcome.COMPLETED)
    if locked_at is not None and locked_at > now - lock_timeout:
        raise _refused(IdempotencyKeyInUse())
    return None  # left in progress by a crashed request: taken over under the lock


def _new_record(
    merchant_id: int,
    key: str,
    method: str,
    route: str,
    fingerprint: str,
    now: datetime,
    retention: timedelta,
) -> IdempotencyKey:
    """The unsaved row of a new claim: in progress, locked at ``now``, kept for ``retention``."""
    return IdempotencyKey(
        merchant_id=merchant_id,
        key=key,
        method=method,
        route=route,
        request_fingerprint=fingerprint,
        status=IdempotencyKey.Status.IN_PROGRESS,
        locked_at=now,
        created_at=now,
        expires_at=now + retention,
    )


def _insert_unless_present(record: IdempotencyKey) -> IdempotencyKey | None:
    """INSERT ``record`` with ``ON CONFLICT (merchant_id, key) DO NOTHING``; return it saved, or
    None when the key exists. No unique violation is raised or logged by PostgreSQL, and the
    caller's transaction is never aborted (so no savepoint is needed)."""
    columns, placeholders, values = insert_parts(record)
    table = connection.ops.quote_name(IdempotencyKey._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) "  # noqa: S608
            f"VALUES ({placeholders}) ON CONFLICT (merchant_id, key) DO NOTHING RETURNING id",
            values,
        )
        row = cursor.fetchone()
    if row is None:
        return None
    record.pk = row[0]
    record._state.adding = False
    record._state.db = connection.alias
    return record


def idempotency_key_lock(*, record: IdempotencyKey, now: datetime) -> None:
    """Mark ``record`` in progress, locked at ``now`` (re-running a claimed or completed key).

    Must run inside the transaction that row-locked ``record`` (the claim's).
    """
    _assert_in_transaction()
    record.status = IdempotencyKey.Status.IN_PROGRESS
    record.locked_at = now
    record.save(update_fields=["status", "locked_at"])


def idempotency_key_complete(
    *,
    record: IdempotencyKey,
    status_code: int,
    headers: Mapping[str, str],
    body: bytes,
    now: datetime,
) -> None:
    """Store the response to replay and mark the key completed.

    Only :data:`REPLAYED_HEADERS` of ``headers`` are kept. Called again later (for example when
    reconciliation resolves an outcome that was unknown), it replaces the stored response.
    """
    record.status = IdempotencyKey.Status.COMPLETED
    record.locked_at = None
    record.response_status = status_code
    record.response_headers = {k: v for k, v in headers.items() if k in REPLAYED_HEADERS}
    record.response_body = bytes(body)
    record.completed_at = now
    record.save(
        update_fields=[
            "status",
            "locked_at",
            "response_status",
            "response_headers",
            "response_body",
            "completed_at",
        ]
    )


def idempotency_key_complete_sql(
    *, key_id: str, status_code: int, headers: Mapping[str, str], body: bytes, now: datetime
) -> tuple[str, list[object]]:
    """The one-statement form of :func:`idempotency_key_complete`, for a caller's
    data-modifying CTE (``completed_key AS (<sql>)``): the ``UPDATE`` of the key whose id the
    SQL expression ``key_id`` gives (a sub-select of a CTE of the same statement, say), with
    its parameters. The same columns and values as :func:`idempotency_key_complete`: the
    response to replay (only :data:`REPLAYED_HEADERS` of ``headers``), ``completed``, the
    lock cleared. The caller's statement runs inside its transaction, after taking the locks
    the caller's lock order asks for."""
    db = connections[DEFAULT_DB_ALIAS]  # once: each ``connection.x`` is a thread-local look-up
    qn = db.ops.quote_name
    values = {
        "status": IdempotencyKey.Status.COMPLETED,
        "locked_at": None,
        "response_status": status_code,
        "response_headers": {k: v for k, v in headers.items() if k in REPLAYED_HEADERS},
        "response_body": bytes(body),
        "completed_at": now,
    }
    fields = [IdempotencyKey._meta.get_field(name) for name in values]
    sql = (
        f"UPDATE {qn(IdempotencyKey._meta.db_table)} SET "  # noqa: S608
        + ", ".join(f"{qn(field.column)} = %s" for field in fields)
        + f" WHERE id = ({key_id})"
    )
    params = [
        field.get_db_prep_save(value, db)
        for field, value in zip(fields, values.values(), strict=True)
    ]
    return sql, params


def idempotency_key_release(*, record: IdempotencyKey) -> None:
    """Delete the key: nothing was done under it, so the same key may run again as new."""
    IdempotencyKey.objects.filter(pk=record.pk).delete()


def idempotency_keys_purge_expired(
    *, now: datetime, batch_size: int = 1000, keep: Q | None = None
) -> int:
    """Delete keys whose ``expires_at`` is at or before ``now``; return how many were deleted.

    Works in batches of ``batch_size`` primary keys selected through the ``expires_at`` index,
    each batch its own short transaction. Rows matching ``keep`` (for example keys whose payment
    is still unresolved) are never deleted.
    """
    deleted_total = 0
    while True:
        candidates = IdempotencyKey.objects.filter(expires_at__lte=now)
        if keep is not None:
            candidates = candidates.exclude(keep)
        batch = list(candidates.order_by("expires_at").values_list("pk", flat=True)[:batch_size])
        if not batch:
            return deleted_total
        with transaction.atomic():
            deleted, _ = IdempotencyKey.objects.filter(pk__in=batch, expires_at__lte=now).delete()
        deleted_total += deleted
        if len(batch) < batch_size:
            return deleted_total
