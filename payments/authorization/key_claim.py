"""The idempotency key claim every POST shares (``/payments`` and the capture, void and refund
POSTs): :func:`key_claim` locks the merchant's key and finds the row it already has;
:func:`key_replayable` says whether a key already holds an answer; :func:`claim_refused` counts
a refused claim (409 in flight, 422 reused).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from django.conf import settings
from django.db import models
from django.db.models import QuerySet

from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from idempotency.fingerprint import request_fingerprint
from idempotency.models import IdempotencyKey
from idempotency.services import (
    ClaimOutcome,
    idempotency_key_claim,
    idempotency_key_lock,
)
from merchants.models import Merchant
from payments.core.answers import Replayed
from payments.models import (
    PaymentEventType,
)
from payments.monitoring.metrics import record_idempotency_key_in_use, record_idempotency_key_reused

Row = TypeVar("Row", bound=models.Model)

_CLAIM_REFUSALS: dict[type[Exception], Callable[[], None]] = {
    IdempotencyKeyInUse: record_idempotency_key_in_use,  # 409
    IdempotencyKeyReused: record_idempotency_key_reused,  # 422
}


def key_replayable(merchant: Merchant, key: str, now: datetime) -> bool:
    """Whether ``key`` already holds an answer (a replay needs no acquirer). A read, no lock."""
    return IdempotencyKey.objects.filter(
        merchant=merchant, key=key, status=IdempotencyKey.Status.COMPLETED, expires_at__gt=now
    ).exists()


@dataclass(frozen=True)
class KeyClaimed(Generic[Row]):
    """What :func:`key_claim` found: the locked key ``record``; the ``row`` it already has
    (None: create it, due for a check at ``check_at`` should the request die); whether this is
    the first attempt (only a new key can prove nothing was ever applied); and, for a resumed
    row, the event saying how (``merchant_retry`` of a 202, or ``key_taken_over`` after a
    crash)."""

    record: IdempotencyKey
    row: Row | None
    first_attempt: bool
    resumed: PaymentEventType
    check_at: datetime


def key_claim(
    *,
    merchant: Merchant,
    idempotency_key: str,
    route: str,
    body: dict,
    now: datetime,
    rows: QuerySet[Row],
    pending_status: str,
) -> Replayed | KeyClaimed[Row]:
    """Phase 1's claim of the merchant's ``idempotency_key`` for ``POST route`` with ``body``
    (the fingerprint), inside the caller's transaction, and the row of ``rows`` (payments,
    operations) it already has.

    Returns :class:`Replayed` when the key holds a final answer (its row is not
    ``pending_status``); for a stored 202 the key is locked again, so the request re-sends with
    the same acquirer idempotency key. Raises ``IdempotencyKeyReused`` (422) and
    ``IdempotencyKeyInUse`` (409), each counted (:func:`claim_refused`).
    """
    lock_timeout = timedelta(seconds=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS)
    try:
        claim = idempotency_key_claim(
            merchant_id=merchant.pk,
            key=idempotency_key,
            method="POST",
            route=route,
            fingerprint=request_fingerprint("POST", route, body),
            now=now,
            retention=timedelta(seconds=settings.IDEMPOTENCY_KEY_RETENTION_SECONDS),
            lock_timeout=lock_timeout,
        )
    except (IdempotencyKeyInUse, IdempotencyKeyReused) as exc:
        claim_refused(exc)
        raise
    record = claim.record
    row = rows.filter(idempotency_key=record).first()
    resumed = PaymentEventType.KEY_TAKEN_OVER
    if claim.outcome is ClaimOutcome.COMPLETED:
        if row is None or row.status != pending_status:  # type: ignore[attr-defined]
            return Replayed(record)
        # An allow_deferred payment is sent by us only (the request, the deferred sweep,
        # reconciliation): a retry with its key answers what is true now.
        if getattr(row, "allow_deferred", False):
            return Replayed(record)
        # The stored answer is a 202: re-send with the same acquirer idempotency key.
        idempotency_key_lock(record=record, now=now)
        resumed = PaymentEventType.MERCHANT_RETRY
    return KeyClaimed(
        record=record,
        row=row,
        first_attempt=claim.outcome is ClaimOutcome.CREATED,
        resumed=resumed,
        check_at=now + lock_timeout,
    )


def claim_refused(exc: IdempotencyKeyInUse | IdempotencyKeyReused) -> None:
    """Count a refused claim (409 in flight, 422 reused) in the idempotency metrics."""
    _CLAIM_REFUSALS[type(exc)]()
