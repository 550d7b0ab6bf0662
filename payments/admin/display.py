"""What the payment and refund admin pages share: their limits and explanations, the amount and
instant formats, what is known of a pending operation, and the attempt table (one row per
request the client sent, from the ``acquirer_attempt`` events).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from console.admin import CappedCountPaginator
from payments.core.money import format_minor_units
from payments.models import (
    OperationStatus,
    PaymentEvent,
    PaymentEventType,
    PaymentOperation,
    PaymentStatus,
)

#: A ``processing`` payment older than this is listed under "Processing, stuck".
STUCK_AFTER = timedelta(minutes=15)
#: At most this many payments per bulk "Reconcile now".
BULK_RECONCILE_LIMIT = 500
#: Events shown on a payment's page (the newest ones when there are more).
TIMELINE_LIMIT = 500
#: Operations (captures, voids, refunds) shown on a payment's page.
OPERATIONS_LIMIT = 200
#: Event types that record one call to the acquirer (rendered in the attempts table).
ATTEMPT_EVENT_TYPES = (
    PaymentEventType.ACQUIRER_ATTEMPT,
    PaymentEventType.RECONCILIATION_ATTEMPT,
    PaymentEventType.OPERATION_ATTEMPT,
    PaymentEventType.OPERATION_RECONCILIATION_ATTEMPT,
)
#: Event types that say what is known of an operation still unresolved (its last check, why it
#: was handed to a human), shown next to it.
OPERATION_KNOWN_EVENT_TYPES = (
    PaymentEventType.OPERATION_OUTCOME_UNKNOWN,
    PaymentEventType.OPERATION_RECONCILIATION_ATTEMPT,
    PaymentEventType.OPERATION_NEEDS_REVIEW,
)

#: What "Reconcile now" does, by status (shown on its page).
RECONCILE_EXPLANATIONS = {
    PaymentStatus.PROCESSING: (
        "Enqueues a reconciliation now (and makes the payment due for the next sweep, in case "
        "the task message is lost): the worker looks the payment up at the acquirer and "
        "re-sends it only with its own acquirer idempotency key, so it is never charged twice. "
        "A payment another worker is reconciling right now is left to that worker."
    ),
    PaymentStatus.NEEDS_REVIEW: (
        "Records your request and enqueues the reconciliation task. Automatic reconciliation "
        "gave this payment up (too old or too many attempts); the task looks it up at the "
        "acquirer once more, never re-sends it: found, it is resolved from the acquirer's "
        "record; otherwise it stays in needs_review: check the payment at the acquirer, then "
        "resolve it with one of the Resolve actions (see docs/operations.md)."
    ),
}

RECONCILE_PERMISSION = "payments.reconcile_payment"
RESOLVE_PERMISSION = "payments.resolve_payment"
#: "Refund" on a payment's page: the ``operator`` group (migration 0007), never ``support``.
REFUND_PERMISSION = "payments.refund_payment"
#: Reading the refunds list: whoever may view payments (``support`` and ``operator``).
REFUND_VIEW_PERMISSION = "payments.view_payment"

REFUND_EXPLANATION = (
    "Refunds this payment at the acquirer through the same service as POST "
    "/payments/{id}/refunds: the amount is checked under the payment's lock against what "
    "remains refundable (the captured amount minus every refund that has not failed, pending "
    "ones included), and the refund is sent with its own acquirer idempotency key. This form "
    "carries a one-time key: submitting it twice refunds once, and it expires an hour after the "
    "page was opened (ADMIN_REFUND_FORM_SECONDS), long before its key is forgotten. Your name "
    "and note are recorded in the payment's events."
)


def capped_count(queryset) -> int:
    """Rows of ``queryset``, counted up to ``CappedCountPaginator.cap + 1`` (more than the cap
    reads "cap+"): a banner never runs a full ``COUNT(*)``."""
    return queryset.order_by()[: CappedCountPaginator.cap + 1].count()


def fmt_amount(amount: int, currency: str) -> str:
    """``amount`` minor units as the currency's units: 1999 EUR -> "19.99 EUR"."""
    try:
        return f"{format_minor_units(amount, currency)} {currency}"
    except KeyError:  # a currency no longer in the table: show the minor units as stored
        return f"{amount} (minor units) {currency}"


def operation_known(operation: PaymentOperation, events: list[PaymentEvent]) -> str:
    """What is known of a pending or needs_review ``operation``: its reconciliation attempts
    and the last recorded check or escalation (from the payment's events)."""
    if operation.status not in (OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW):
        return ""
    known = [
        e
        for e in events
        if e.type in OPERATION_KNOWN_EVENT_TYPES and e.data.get("operation") == operation.id
    ]
    parts = [f"reconciliation attempts: {operation.reconciliation_attempts}"]
    if operation.next_check_at is not None:
        parts.append(f"next check {operation.next_check_at.isoformat(timespec='seconds')}")
    if known:
        last = known[-1]
        detail = last.data.get("reason") or last.data.get("result") or ""
        if last.data.get("detail"):
            detail = f"{detail}: {last.data['detail']}"
        if last.data.get("error"):
            detail = f"{detail} ({last.data['error']})"
        parts.append(f"last: {last.type} {detail}".rstrip())
    if operation.status == OperationStatus.NEEDS_REVIEW:
        parts.append(
            f"check it at the acquirer by our reference {operation.id} "
            f"(acquirer key {operation.acquirer_idempotency_key})"
        )
    return "; ".join(parts)


#: The attempts table's columns (``attempt_rows``).
ATTEMPT_COLUMNS = (
    "started (UTC)", "by", "acquirer", "operation", "attempt", "outcome", "HTTP status",
    "error class", "elapsed", "wait", "wait source", "retry budget", "rate gate", "breaker",
    "decision",
)  # fmt: skip

#: Who made an attempt event's call ("by" column): the request path, or reconciliation.
ATTEMPT_MADE_BY = {
    PaymentEventType.ACQUIRER_ATTEMPT: "request",
    PaymentEventType.OPERATION_ATTEMPT: "request",
    PaymentEventType.RECONCILIATION_ATTEMPT: "reconciliation",
    PaymentEventType.OPERATION_RECONCILIATION_ATTEMPT: "reconciliation",
}


def attempt_rows(event: PaymentEvent) -> list[tuple]:
    """The attempts table's rows of one attempt event: one per entry of its ``attempt_log``
    (an error's outcome reads ``error``, its class in "error class"), else one summary row
    (the call's outcome, status, error, elapsed and wait)."""
    data = event.data
    made_by = ATTEMPT_MADE_BY.get(event.type, event.type)
    acquirer = data.get("acquirer", "")
    operation = data.get("operation", "")
    log = data.get("attempt_log") or []
    if not log:
        status = data.get("status_code")
        return [
            (
                fmt_epoch(event.created_at.timestamp()),
                made_by,
                acquirer,
                operation,
                data.get("attempts", ""),
                data.get("outcome", data.get("result", "")),
                "" if status is None else status,
                data.get("error", ""),
                fmt_seconds(data.get("elapsed_seconds")),
                fmt_seconds(data.get("retry_after_seconds", data.get("next_check_in_seconds"))),
                data.get("wait_source", ""),
                "",
                "",
                "",
                "",
            )
        ]
    rows = []
    for step in log:
        started = step.get("started_at")
        decision = step.get("decision", "")
        if step.get("stop_reason"):
            decision = f"{decision} ({step['stop_reason']})"
        gate = step.get("gate_remaining")
        error = step.get("error") or ""
        rows.append(
            (
                fmt_epoch(started) if started is not None else "not sent",
                made_by,
                acquirer,
                operation,
                step.get("attempt", ""),
                "error" if error else step.get("outcome", ""),
                step.get("status_code", ""),
                error,
                fmt_seconds(step.get("elapsed")),
                fmt_seconds(step.get("wait", step.get("server_wait"))),
                step.get("wait_source", ""),
                fmt_budget(step.get("budget_retries")),
                "open" if not gate else f"closed {fmt_seconds(gate)}",
                step.get("breaker_state", ""),
                decision,
            )
        )
    return rows


def fmt_epoch(seconds: float) -> str:
    """``2026-12-01 12:09:07.123`` (UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_budget(retries) -> str:
    if retries is None:
        return ""
    return "empty" if retries <= 0 else f"{retries:g} left"


def fmt_instant(instant) -> str:
    """``2026-12-01 12:09:07``: a list's date column, short enough to fit at 1400 px."""
    return timezone.localtime(instant, UTC).strftime("%Y-%m-%d %H:%M:%S") if instant else ""


def fmt_seconds(value) -> str:
    return (
        f"{value:g} s" if isinstance(value, (int, float)) else ("" if value is None else str(value))
    )
