"""Phase 1 of the create flow: claim the key and create the payment, the common cases in one
statement (raw SQL: :func:`payment_record_create` inserts the payment and its
``payment_created`` event as the ORM would).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from idempotency.fingerprint import request_fingerprint
from idempotency.models import IdempotencyKey
from idempotency.services import (
    ClaimOutcome,
    idempotency_key_claim_at_once,
    insert_parts,
    insert_row_parts,
)
from merchants.models import Merchant
from observability.request_context import current_request_id
from observability.trace_context import current_traceparent
from payments.acquirer.client import default_acquirer_name
from payments.acquirer.routing import acquirer_idempotency_key
from payments.authorization.key_claim import claim_refused, key_claim
from payments.core.answers import Replayed
from payments.core.payment_states import payment_event_record
from payments.models import (
    CaptureMethod,
    Payment,
    PaymentEvent,
    PaymentEventType,
    PaymentStatus,
    new_payment_id,
    new_return_token,
)

#: The route of the create flow, in the idempotency key's fingerprint.
PAYMENTS_ROUTE = "/payments"


@dataclass(frozen=True)
class Claimed:
    """Phase 1's result when the acquirer must be called: the payment, and whether this is its
    first attempt."""

    payment: Payment
    first_attempt: bool


def payment_claim(
    *, merchant: Merchant, idempotency_key: str, body: dict, now: datetime, acquirer: str
) -> Replayed | Claimed:
    """Phase 1: claim the key and create the payment (or resume the one it already has).

    The common cases in one statement (``idempotency_key_claim_at_once``): a new key with its
    payment and ``payment_created`` event, or the replay of a final answer (the 409 and 422
    refusals raise from it too). Everything else in one transaction under the key's row lock.
    """
    lock_timeout = timedelta(seconds=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS)
    payment = _payment_new(
        merchant=merchant, body=body, now=now, check_at=now + lock_timeout, acquirer=acquirer
    )
    try:
        fast = idempotency_key_claim_at_once(
            merchant_id=merchant.pk,
            key=idempotency_key,
            method="POST",
            route=PAYMENTS_ROUTE,
            fingerprint=request_fingerprint("POST", PAYMENTS_ROUTE, body),
            now=now,
            retention=timedelta(seconds=settings.IDEMPOTENCY_KEY_RETENTION_SECONDS),
            lock_timeout=lock_timeout,
            then=_creation_inserts(payment, now=now, source="claimed_key"),
            rows_model=Payment,
            pending_status=PaymentStatus.PROCESSING,
        )
    except (IdempotencyKeyInUse, IdempotencyKeyReused) as exc:
        claim_refused(exc)
        raise
    if fast is not None:
        if fast.outcome is ClaimOutcome.COMPLETED:
            return Replayed(fast.record)
        payment.idempotency_key_id = fast.record.pk
        payment._state.adding = False
        payment._state.db = connection.alias
        return Claimed(payment, first_attempt=True)
    with transaction.atomic():
        claimed = key_claim(
            merchant=merchant,
            idempotency_key=idempotency_key,
            route=PAYMENTS_ROUTE,
            body=body,
            now=now,
            rows=Payment.objects.all(),
            pending_status=PaymentStatus.PROCESSING,
        )
        if isinstance(claimed, Replayed):
            return claimed
        resumed = claimed.row
        if resumed is None:
            # If this request dies before phase 2, reconciliation finds the payment then.
            resumed = payment_record_create(
                merchant=merchant,
                body=body,
                key=claimed.record,
                now=now,
                check_at=claimed.check_at,
                acquirer=acquirer,
            )
        else:
            payment_event_record(
                payment=resumed, event_type=claimed.resumed, now=now, data={"resumed": True}
            )
        return Claimed(resumed, first_attempt=claimed.first_attempt)


def _payment_new(
    *, merchant: Merchant, body: dict, now: datetime, check_at: datetime, acquirer: str = ""
) -> Payment:
    """The unsaved ``processing`` payment for the validated ``body``, at ``acquirer`` (a
    configured name; empty: the first in routing order), named before anything is sent, with
    that acquirer's first acquirer idempotency key (``authorize-<id>``), the running span's
    ``traceparent`` (ADR 0044) and, with a ``return_url``, its return token (ADR 0049); its
    idempotency key is set by the caller."""
    payment_id = new_payment_id()
    return Payment(
        id=payment_id,
        merchant=merchant,
        amount=body["amount"],
        currency=body["currency"],
        payment_method=body["payment_method"],
        reference=body.get("reference"),
        description=body.get("description"),
        capture_method=body.get("capture_method", CaptureMethod.AUTOMATIC),
        allow_deferred=body.get("allow_deferred", False),
        return_url=body.get("return_url"),
        return_token=new_return_token() if body.get("return_url") else None,
        status=PaymentStatus.PROCESSING,
        acquirer_idempotency_key=acquirer_idempotency_key(payment_id, acquirer, first=True),
        acquirer=acquirer or default_acquirer_name(),
        created_at=now,
        updated_at=now,
        next_check_at=check_at,
        trace_context=current_traceparent(),
    )


def _creation_inserts(
    payment: Payment, *, now: datetime, source: str | None
) -> list[tuple[str, list[object]]]:
    """CTE bodies inserting ``payment`` and its ``payment_created`` event in one statement.
    ``source``: a CTE ``(id)`` whose row gives the payment's idempotency key id (and without
    whose row nothing is inserted), or None for the payment's own ``idempotency_key_id``."""
    event = {
        "payment_id": payment.id,
        "type": PaymentEventType.PAYMENT_CREATED,
        "from_status": payment.status,
        "to_status": payment.status,
        "data": {},
        "created_at": now,
        "request_id": current_request_id(),
    }
    qn = connections[DEFAULT_DB_ALIAS].ops.quote_name
    key_column = {"idempotency_key_id": f"{source}.id"} if source else None
    columns, values, params = insert_parts(payment, expressions=key_column)
    event_columns, event_values, event_params = insert_row_parts(PaymentEvent, event)
    rows = f" FROM {source}" if source else ""
    return [
        (
            f"created_payment AS (INSERT INTO {qn(Payment._meta.db_table)} ({columns}) "
            f"SELECT {values}{rows} RETURNING id)",
            params,
        ),
        (
            f"created_event AS (INSERT INTO {qn(PaymentEvent._meta.db_table)} "  # noqa: S608
            f"({event_columns}) SELECT {event_values} FROM created_payment)",
            event_params,
        ),
    ]


def payment_record_create(
    *,
    merchant: Merchant,
    body: dict,
    key: IdempotencyKey | None,
    now: datetime,
    check_at: datetime,
    acquirer: str = "",
) -> Payment:
    """Insert a ``processing`` payment for the validated ``body`` (amount, currency,
    payment_method, optional reference and description) with its ``payment_created`` event
    and its own acquirer idempotency key, at ``acquirer`` (a configured name; empty: the first
    in routing order), in one statement. ``check_at``: when reconciliation looks at it if the
    request dies before phase 2. Inside the caller's transaction."""
    payment = _payment_new(
        merchant=merchant, body=body, now=now, check_at=check_at, acquirer=acquirer
    )
    payment.idempotency_key = key
    ctes = _creation_inserts(payment, now=now, source=None)
    db = connections[DEFAULT_DB_ALIAS]
    with db.cursor() as cursor:
        cursor.execute(
            f"WITH {', '.join(sql for sql, _ in ctes)} SELECT id FROM created_payment",  # noqa: S608
            [param for _, params in ctes for param in params],
        )
    payment._state.adding = False
    payment._state.db = db.alias
    return payment
