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
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from django.db import connection, transaction
from django.db.models import Q

from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from idempotency.models import IdempotencyKey

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
            IdempotencyKey(
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


#: The ``idempotency`` field of the request's log lines (config/request_context.py), by claim.
LOG_OUTCOMES = {
    ClaimOutcome.CREATED: "new",
    ClaimOutcome.TAKEN_OVER: "taken_over",
    ClaimOutcome.COMPLETED: "replay",
    IdempotencyKeyInUse: "in_use",
    IdempotencyKeyReused: "reused",
}


def _claimed(record: IdempotencyKey, outcome: ClaimOutcome) -> Claim:
    """The claim's result, its outcome bound for the request's log lines."""
    structlog.contextvars.bind_contextvars(idempotency=LOG_OUTCOMES[outcome])
    return Claim(record=record, outcome=outcome)


def _refused(error: IdempotencyKeyInUse | IdempotencyKeyReused) -> Exception:
    """``error``, its outcome (``in_use``, ``reused``) bound for the request's log lines."""
    structlog.contextvars.bind_contextvars(idempotency=LOG_OUTCOMES[type(error)])
    return error


def _insert_unless_present(record: IdempotencyKey) -> IdempotencyKey | None:
    """INSERT ``record`` with ``ON CONFLICT (merchant_id, key) DO NOTHING``; return it saved, or
    None when the key exists. No unique violation is raised or logged by PostgreSQL, and the
    caller's transaction is never aborted (so no savepoint is needed)."""
    meta = IdempotencyKey._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    values = [f.get_db_prep_save(getattr(record, f.attname), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({columns}) "  # noqa: S608
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
