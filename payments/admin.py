"""The operations console for payments: find stuck payments, read what the acquirer answered,
and act on them. Nobody edits an amount or a status by hand.

* The list and the detail page are read-only. Every status change goes through
  ``payments.operations`` (and so through the state machine), from an action page that asks for
  a note; the operator and the note are stored as a payment event.
* Actions: "Reconcile now" (``payments.reconcile_payment`` permission, also a bulk action for
  up to :data:`BULK_RECONCILE_LIMIT` payments) and "Resolve as succeeded / declined / failed
  after manual check" (``payments.resolve_payment``, only for ``needs_review``). The ``support``
  group may only look; the ``operator`` group has both permissions (data migration 0004).
* Built for millions of rows: no full COUNT (capped paginator), no facet counts, filters that
  each have an index, exact searches resolved through indexes (never ``UPPER(...) LIKE``).
* A payment's page lists its captures, voids and refunds (each with status, amounts in the
  currency's units, acquirer reference, failure code, and what reconciliation knows of a pending
  or ``needs_review`` one). "Refund" (``payments.refund_payment``, ``operator`` only, migration
  0007) issues a refund through the API's own service
  (``payments.lifecycle_services.refund_create``, the operator and note as its ``audit``) under
  a one-time idempotency key rendered with the form, so a double submit refunds once.
* :class:`RefundAdmin`: the read-only refunds list (``/admin/payments/refund/``), built like the
  payments list (capped count, index-backed filters, exact searches).
* The list warns of a circuit breaker that is not closed (``payments.acquirer.selectors``) and
  links the acquirer resilience page (``/admin/payments/resilience/``,
  :mod:`payments.resilience_admin`). The action forms are :mod:`payments.forms`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets, quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import BigIntegerField, CharField, Q, Value
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from console.admin import CappedCountPaginator, ReadOnlyAdminMixin
from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from idempotency.models import IdempotencyKey
from payments.acquirer.selectors import acquirer_client_or_none, breakers_not_closed
from payments.forms import NoteForm, RefundForm, ResolveForm
from payments.lifecycle import OperationConflict, refundable_amount
from payments.lifecycle_services import refund_create
from payments.models import (
    OperationKind,
    OperationStatus,
    Payment,
    PaymentEvent,
    PaymentEventType,
    PaymentOperation,
    PaymentStatus,
    Refund,
)
from payments.money import CURRENCY_EXPONENTS, format_minor_units
from payments.operations import (
    RECONCILABLE_STATUSES,
    RESOLUTIONS,
    OperationRefused,
    admin_refund_key,
    clean_note,
    payment_reconcile_request,
    payment_resolve,
)
from payments.responses import Answered, Replayed, Unavailable

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
    "carries a one-time key: submitting it twice refunds once. Your name and note are recorded "
    "in the payment's events."
)


class StatusListFilter(admin.SimpleListFilter):
    """Status, with the ones that need a human first (``needs_review``, stuck ``processing``)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return (
            (PaymentStatus.NEEDS_REVIEW, "⚠ Needs review"),
            ("stuck", f"⚠ Processing, stuck (over {int(STUCK_AFTER.total_seconds() // 60)} min)"),
            ("operation_needs_review", "⚠ A capture, void or refund needs review"),
            (PaymentStatus.PROCESSING, "Processing"),
            (PaymentStatus.DEFERRED, "Deferred (not sent yet)"),
            (PaymentStatus.SUCCEEDED, "Succeeded"),
            (PaymentStatus.DECLINED, "Declined"),
            (PaymentStatus.FAILED, "Failed"),
            (PaymentStatus.REQUIRES_CAPTURE, "Requires capture"),
            (PaymentStatus.CAPTURE_PENDING, "Capture pending"),
            (PaymentStatus.VOID_PENDING, "Void pending"),
            (PaymentStatus.CANCELED, "Canceled"),
        )

    def queryset(self, request, queryset):
        value = self.value()
        if value == "stuck":
            return queryset.filter(
                status=PaymentStatus.PROCESSING, created_at__lt=timezone.now() - STUCK_AFTER
            )
        if value == "operation_needs_review":  # the partial index operation_needs_review
            return queryset.filter(
                pk__in=PaymentOperation.objects.filter(status=OperationStatus.NEEDS_REVIEW).values(
                    "payment_id"
                )
            )
        if value in PaymentStatus.values:
            return queryset.filter(status=value)
        return queryset


class CurrencyListFilter(admin.SimpleListFilter):
    """ISO 4217 currency, from the service's table (no ``SELECT DISTINCT`` over payments)."""

    title = "currency"
    parameter_name = "currency"

    def lookups(self, request, model_admin):
        return [(code, code) for code in sorted(CURRENCY_EXPONENTS)]

    def queryset(self, request, queryset):
        if self.value() in CURRENCY_EXPONENTS:
            return queryset.filter(currency=self.value())
        return queryset


def _capped_count(queryset) -> int:
    """Rows of ``queryset``, counted up to ``CappedCountPaginator.cap + 1`` (more than the cap
    reads "cap+"): a banner never runs a full ``COUNT(*)``."""
    return queryset.order_by()[: CappedCountPaginator.cap + 1].count()


def _fmt_amount(amount: int, currency: str) -> str:
    """``amount`` minor units as the currency's units: 1999 EUR -> "19.99 EUR"."""
    try:
        return f"{format_minor_units(amount, currency)} {currency}"
    except KeyError:  # a currency no longer in the table: show the minor units as stored
        return f"{amount} (minor units) {currency}"


def _operation_known(operation: PaymentOperation, events: list[PaymentEvent]) -> str:
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


#: The attempts table's columns (``_attempt_rows``).
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


def _attempt_rows(event: PaymentEvent) -> list[tuple]:
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
                _fmt_epoch(event.created_at.timestamp()),
                made_by,
                acquirer,
                operation,
                data.get("attempts", ""),
                data.get("outcome", data.get("result", "")),
                "" if status is None else status,
                data.get("error", ""),
                _fmt_seconds(data.get("elapsed_seconds")),
                _fmt_seconds(data.get("retry_after_seconds", data.get("next_check_in_seconds"))),
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
                _fmt_epoch(started) if started is not None else "not sent",
                made_by,
                acquirer,
                operation,
                step.get("attempt", ""),
                "error" if error else step.get("outcome", ""),
                step.get("status_code", ""),
                error,
                _fmt_seconds(step.get("elapsed")),
                _fmt_seconds(step.get("wait", step.get("server_wait"))),
                step.get("wait_source", ""),
                _fmt_budget(step.get("budget_retries")),
                "open" if not gate else f"closed {_fmt_seconds(gate)}",
                step.get("breaker_state", ""),
                decision,
            )
        )
    return rows


def _fmt_epoch(seconds: float) -> str:
    """``2026-12-01 12:09:07.123`` (UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _fmt_budget(retries) -> str:
    if retries is None:
        return ""
    return "empty" if retries <= 0 else f"{retries:g} left"


def _fmt_instant(instant) -> str:
    """``2026-12-01 12:09:07``: a list's date column, short enough to fit at 1400 px."""
    return timezone.localtime(instant, UTC).strftime("%Y-%m-%d %H:%M:%S") if instant else ""


def _fmt_seconds(value) -> str:
    return (
        f"{value:g} s" if isinstance(value, (int, float)) else ("" if value is None else str(value))
    )


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "merchant",
        "display_amount",
        "status",
        "code",
        "reference",
        "created",
        "updated",
    )
    list_filter = (
        StatusListFilter,
        "merchant",
        CurrencyListFilter,
        ("created_at", admin.DateFieldListFilter),
    )
    # Documentation only: get_search_results resolves a term through these fields' indexes.
    search_fields = (
        "id__exact",
        "reference__exact",
        "acquirer_reference__exact",
        "idempotency_key__key__exact",
        "events__request_id__exact",
    )
    search_help_text = (
        "Payment id (any case), or the exact reference, acquirer reference, idempotency key or "
        "request id (case-sensitive)."
    )
    list_select_related = ("merchant",)
    ordering = ("-created_at", "-id")
    sortable_by = ("created",)
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = CappedCountPaginator
    list_per_page = 50
    actions = ["reconcile_selected"]
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "merchant",
                    "status",
                    "display_amount",
                    "currency",
                    "capture_method",
                    "display_amount_captured",
                    "display_amount_refunded",
                    "payment_method",
                    "reference",
                    "description",
                )
            },
        ),
        (
            "At the acquirer",
            {
                "fields": (
                    "acquirer",
                    "acquirer_reference",
                    "decline_code",
                    "failure_code",
                    "acquirer_idempotency_key",
                    "idempotency_key_link",
                )
            },
        ),
        (
            "Reconciliation",
            {"fields": ("next_check_at", "reconciliation_attempts", "reconciliation_lease_until")},
        ),
        (
            "Deferred submission",
            {"fields": ("allow_deferred", "not_before", "deferred_attempts")},
        ),
        ("Times", {"fields": ("created_at", "updated_at")}),
        ("Captures, voids and refunds", {"fields": ("operations_table",)}),
        ("Acquirer attempts", {"fields": ("attempts_table",)}),
        ("Event timeline", {"fields": ("timeline_table",)}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)

    # --- permissions: read-only everywhere (the mixin); actions need their own permission ---

    def has_reconcile_permission(self, request) -> bool:
        return request.user.has_perm(RECONCILE_PERMISSION)

    def has_resolve_permission(self, request) -> bool:
        return request.user.has_perm(RESOLVE_PERMISSION)

    def has_refund_permission(self, request) -> bool:
        return request.user.has_perm(REFUND_PERMISSION)

    # --- list ------------------------------------------------------------------------------

    @admin.display(description="amount")
    def display_amount(self, payment: Payment) -> str:
        return _fmt_amount(payment.amount, payment.currency)

    @admin.display(description="amount captured")
    def display_amount_captured(self, payment: Payment) -> str:
        return _fmt_amount(payment.amount_captured, payment.currency)

    @admin.display(description="amount refunded")
    def display_amount_refunded(self, payment: Payment) -> str:
        return _fmt_amount(payment.amount_refunded, payment.currency)

    @admin.display(description="decline / failure code")
    def code(self, payment: Payment) -> str:
        return payment.decline_code or payment.failure_code or ""

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, payment: Payment) -> str:
        return _fmt_instant(payment.created_at)

    @admin.display(description="updated (UTC)")
    def updated(self, payment: Payment) -> str:
        return _fmt_instant(payment.updated_at)

    def get_search_results(self, request, queryset, search_term):
        """Exact matches on the id, reference, acquirer reference, idempotency key or the
        request id of one of its events (a ``Request-Id`` an operator found in a log line).

        One OR of equalities that PostgreSQL answers with a BitmapOr of index scans; the
        idempotency key and the request id are resolved first (their own indexes), so no join
        is needed. Our ids are lower-case (``new_payment_id``), so the id is matched in any case
        through the primary key; the merchant's reference and key, the acquirer's reference and
        the request id are matched as typed.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        # One query for both: (key id, None) rows and (None, payment id) rows.
        keys = IdempotencyKey.objects.filter(key=term).annotate(none=Value(None, CharField()))
        events = PaymentEvent.objects.filter(request_id=term).annotate(
            none=Value(None, BigIntegerField())
        )
        found = list(
            keys.values_list("pk", "none")[:100].union(
                events.values_list("none", "payment_id")[:100], all=True
            )
        )
        match = Q(id=term.lower()) | Q(reference=term) | Q(acquirer_reference=term)
        key_ids = [key_id for key_id, _ in found if key_id is not None]
        requested = [payment_id for _, payment_id in found if payment_id is not None]
        if key_ids:
            match |= Q(idempotency_key_id__in=key_ids)
        if requested:
            match |= Q(id__in=requested)
        return queryset.filter(match), False

    def changelist_view(self, request, extra_context=None):
        needs_review = _capped_count(Payment.objects.filter(status=PaymentStatus.NEEDS_REVIEW))
        operations_review = _capped_count(
            PaymentOperation.objects.filter(status=OperationStatus.NEEDS_REVIEW)
        )
        extra_context = {
            **(extra_context or {}),
            "needs_review_count": needs_review,
            "needs_review_capped": needs_review > CappedCountPaginator.cap,
            "operations_review_count": operations_review,
            "operations_review_capped": operations_review > CappedCountPaginator.cap,
            "breakers_not_closed": breakers_not_closed(),
        }
        return super().changelist_view(request, extra_context=extra_context)

    # --- detail ----------------------------------------------------------------------------

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("merchant", "idempotency_key")

    @admin.display(description="idempotency key")
    def idempotency_key_link(self, payment: Payment) -> str:
        key = payment.idempotency_key
        if key is None:
            return "- (expired or released)"
        url = reverse("admin:idempotency_idempotencykey_change", args=[key.pk])
        return format_html('<a href="{}">{}</a>', url, key.key)

    def _events(self, payment: Payment) -> list[PaymentEvent]:
        cache = getattr(payment, "_admin_events", None)
        if cache is None:
            newest = list(payment.events.order_by("-created_at", "-id")[:TIMELINE_LIMIT])
            cache = payment._admin_events = newest[::-1]
        return cache

    def _operations(self, payment: Payment) -> list[PaymentOperation]:
        cache = getattr(payment, "_admin_operations", None)
        if cache is None:
            cache = payment._admin_operations = list(
                payment.operations.order_by("created_at", "id")[:OPERATIONS_LIMIT]
            )
        return cache

    @admin.display(description="operations")
    def operations_table(self, payment: Payment) -> str:
        """Each capture, void and refund, oldest first: status, amount, acquirer reference,
        failure code, and what is known of a pending or needs_review one."""
        operations = self._operations(payment)
        if not operations:
            return "No capture, void or refund."
        events = self._events(payment)
        body = format_html_join(
            "",
            '<tr class="operation-{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    op.status,
                    op.created_at.isoformat(timespec="milliseconds"),
                    op.kind,
                    op.id,
                    ("⚠ " if op.status == OperationStatus.NEEDS_REVIEW else "") + op.status,
                    _fmt_amount(op.amount, payment.currency),
                    op.reason or "",
                    op.acquirer_reference or "",
                    op.failure_code or "",
                    op.acquirer_idempotency_key,
                    _operation_known(op, events),
                )
                for op in operations
            ),
        )
        return format_html(
            '<table class="payment-operations"><thead><tr><th>at</th><th>kind</th><th>id</th>'
            "<th>status</th><th>amount</th><th>reason</th><th>acquirer reference</th>"
            "<th>failure code</th><th>acquirer idempotency key</th><th>what is known</th>"
            "</tr></thead><tbody>{}</tbody></table>",
            body,
        )

    @admin.display(description="attempts")
    def attempts_table(self, payment: Payment) -> str:
        """Each request to the acquirer, one row each: the calls' attempt logs (start, outcome,
        HTTP status, error class, elapsed, the wait chosen and its source, the retry budget,
        the rate gate, the decision), or one summary row for an event recorded without one
        (a reconciliation's, or older ones)."""
        rows = [
            row
            for e in self._events(payment)
            if e.type in ATTEMPT_EVENT_TYPES
            for row in _attempt_rows(e)
        ]
        if not rows:
            return "No acquirer attempt recorded."
        body = format_html_join("", "<tr>" + "<td>{}</td>" * len(ATTEMPT_COLUMNS) + "</tr>", rows)
        head = format_html_join("", "<th>{}</th>", ((name,) for name in ATTEMPT_COLUMNS))
        return format_html(
            '<div class="payment-attempts-scroll"><table class="payment-attempts"><thead><tr>{}'
            "</tr></thead><tbody>{}</tbody></table></div>",
            head,
            body,
        )

    @admin.display(description="events")
    def timeline_table(self, payment: Payment) -> str:
        """Every event, oldest first: type, status change, operator and the recorded data."""
        events = self._events(payment)
        if not events:
            return "No event."
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            '<td><pre style="white-space: pre-wrap; margin: 0">{}</pre></td></tr>',
            (
                (
                    e.created_at.isoformat(timespec="milliseconds"),
                    e.type,
                    f"{e.from_status} → {e.to_status}" if e.from_status != e.to_status else "",
                    e.data.get("operator", ""),
                    e.request_id or "",
                    json.dumps(e.data, indent=1, sort_keys=True, ensure_ascii=False)
                    if e.data
                    else "",
                )
                for e in events
            ),
        )
        return format_html(
            '<table class="payment-timeline"><thead><tr><th>at</th><th>event</th>'
            "<th>status</th><th>operator</th><th>request id</th><th>data</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            body,
        )

    def get_object(self, request, object_id, from_field=None):
        """The payment, fetched once per request (the change view asks twice)."""
        cached = getattr(request, "_payment_admin_object", None)
        if cached is not None and str(cached.pk) == str(object_id) and from_field is None:
            return cached
        payment = super().get_object(request, object_id, from_field)
        if from_field is None:
            request._payment_admin_object = payment
        return payment

    def change_view(self, request, object_id, form_url="", extra_context=None):
        payment = self.get_object(request, unquote(object_id))
        extra_context = {**(extra_context or {}), **self._action_links(request, payment)}
        return super().change_view(request, object_id, form_url, extra_context=extra_context)

    def _action_links(self, request, payment: Payment | None) -> dict:
        if payment is None:
            return {}
        links = []
        if payment.status in RECONCILABLE_STATUSES and self.has_reconcile_permission(request):
            links.append(
                (
                    "Reconcile now",
                    reverse("admin:payments_payment_reconcile", args=[quote(payment.pk)]),
                )
            )
        if payment.status == PaymentStatus.NEEDS_REVIEW and self.has_resolve_permission(request):
            for status in (PaymentStatus.SUCCEEDED, PaymentStatus.DECLINED, PaymentStatus.FAILED):
                links.append(
                    (
                        f"Resolve as {status}",
                        reverse("admin:payments_payment_resolve", args=[quote(payment.pk), status]),
                    )
                )
        if payment.status == PaymentStatus.SUCCEEDED and self.has_refund_permission(request):
            links.append(
                ("Refund", reverse("admin:payments_payment_refund", args=[quote(payment.pk)]))
            )
        return {"payment_actions": links}

    # --- actions ---------------------------------------------------------------------------

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/reconcile/",
                wrap(self.reconcile_view),
                name="payments_payment_reconcile",
            ),
            path(
                "<path:object_id>/resolve/<str:to_status>/",
                wrap(self.resolve_view),
                name="payments_payment_resolve",
            ),
            path(
                "<path:object_id>/refund/",
                wrap(self.refund_view),
                name="payments_payment_refund",
            ),
            *super().get_urls(),
        ]

    def _payment_or_404(self, request, object_id: str) -> Payment:
        if not self.has_view_permission(request):
            raise PermissionDenied
        payment = self.get_object(request, unquote(object_id))
        if payment is None:
            raise Http404("No such payment.")
        return payment

    def _change_url(self, payment: Payment) -> str:
        return reverse("admin:payments_payment_change", args=[quote(payment.pk)])

    def _render_action(self, request, *, title: str, form, payments, explanation: str, extra=None):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "form": form,
            "payments": payments,
            "explanation": explanation,
            **(extra or {}),
        }
        return TemplateResponse(request, "admin/payments/payment/action_form.html", context)

    def reconcile_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """ "Reconcile now" for one payment: a note, then the task is enqueued on commit."""
        payment = self._payment_or_404(request, object_id)
        if not self.has_reconcile_permission(request):
            raise PermissionDenied
        form = NoteForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                payment_reconcile_request(
                    payment_id=payment.pk,
                    operator=request.user.get_username(),
                    note=form.cleaned_data["note"],
                )
            except OperationRefused as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.log_change(request, payment, "Reconcile now: " + form.cleaned_data["note"])
                if payment.status == PaymentStatus.PROCESSING:
                    done = f"Reconciliation of {payment.pk} enqueued; its outcome appears here."
                else:
                    done = (
                        f"Recorded and enqueued: {payment.pk} is in needs_review, so the worker "
                        "looks it up at the acquirer (never re-sends it). Found: it is resolved. "
                        "Not found: check it at the acquirer, then resolve it."
                    )
                self.message_user(request, done, messages.SUCCESS)
            return HttpResponseRedirect(self._change_url(payment))
        return self._render_action(
            request,
            title=f"Reconcile {payment.pk} now",
            form=form,
            payments=[payment],
            explanation=RECONCILE_EXPLANATIONS[payment.status],
        )

    def resolve_view(self, request: HttpRequest, object_id: str, to_status: str) -> HttpResponse:
        """ "Resolve as ..." for one ``needs_review`` payment, after a manual check."""
        payment = self._payment_or_404(request, object_id)
        if not self.has_resolve_permission(request):
            raise PermissionDenied
        if to_status not in RESOLUTIONS:
            raise Http404("No such resolution.")
        form = ResolveForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                payment_resolve(
                    payment_id=payment.pk,
                    to_status=to_status,
                    operator=request.user.get_username(),
                    note=form.cleaned_data["note"],
                    acquirer_reference=form.cleaned_data["acquirer_reference"],
                    code=form.cleaned_data["code"],
                )
            except OperationRefused as exc:
                form.add_error(None, str(exc))
            else:
                self.log_change(
                    request, payment, f"Resolved as {to_status}: " + form.cleaned_data["note"]
                )
                self.message_user(
                    request, f"Payment {payment.pk} resolved as {to_status}.", messages.SUCCESS
                )
                return HttpResponseRedirect(self._change_url(payment))
        if payment.status != PaymentStatus.NEEDS_REVIEW and request.method == "GET":
            self.message_user(
                request,
                f"Only a payment in needs_review can be resolved; {payment.pk} is "
                f"{payment.status}.",
                messages.ERROR,
            )
            return HttpResponseRedirect(self._change_url(payment))
        return self._render_action(
            request,
            title=f"Resolve {payment.pk} as {to_status}",
            form=form,
            payments=[payment],
            explanation=(
                f"Only after checking at the acquirer that this payment is {to_status}. The "
                "status changes through the state machine, the merchant's idempotency key "
                "then replays the final answer, and your name and note are recorded."
            ),
        )

    def refund_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """ "Refund" for one ``succeeded`` payment: amount (default what remains refundable),
        reason and a required note, then ``refund_create`` (the API's service) for the
        payment's merchant under the form's one-time key, the operator and note recorded by it
        as an ``operator_refund_requested`` event; every outcome becomes a message."""
        payment = self._payment_or_404(request, object_id)
        if not self.has_refund_permission(request):
            raise PermissionDenied
        form = RefundForm(
            request.POST or None,
            initial={"idempotency_key": admin_refund_key()},
            currency=payment.currency,
            refundable=max(0, refundable_amount(payment)),
        )
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            client = acquirer_client_or_none()
            try:
                operator = request.user.get_username()
                note = clean_note(operator=operator, note=data["note"])
                if client is None:
                    raise OperationRefused(  # noqa: TRY301 - one handler turns refusals into messages
                        "The acquirer client cannot be built (see the logs); nothing was sent."
                    )
                result = refund_create(
                    merchant=payment.merchant,
                    payment_id=payment.pk,
                    idempotency_key=data["idempotency_key"],
                    amount=data["amount"],
                    reason=data["reason"],
                    client=client,
                    audit={"operator": operator, "note": note, "how": "admin"},
                )
            except OperationRefused as exc:
                form.add_error(None, str(exc))
            except OperationConflict as exc:
                self.message_user(
                    request, f"Not refunded ({exc.code}): {exc.detail}", messages.ERROR
                )
                return HttpResponseRedirect(self._change_url(payment))
            except IdempotencyKeyInUse:
                self.message_user(
                    request,
                    "This refund form was already submitted and its refund is still being "
                    "sent; nothing more was refunded. Its outcome appears below.",
                    messages.WARNING,
                )
                return HttpResponseRedirect(self._change_url(payment))
            except IdempotencyKeyReused:
                self.message_user(
                    request,
                    "This refund form was already submitted with other values; nothing more "
                    "was refunded. Open the refund page again for another refund.",
                    messages.ERROR,
                )
                return HttpResponseRedirect(self._change_url(payment))
            else:
                level, text = _refund_message(payment, result)
                if not isinstance(result, Replayed):
                    self.log_change(request, payment, "Refund: " + data["note"])
                self.message_user(request, text, level)
                return HttpResponseRedirect(self._change_url(payment))
        if payment.status != PaymentStatus.SUCCEEDED and request.method == "GET":
            self.message_user(
                request,
                f"Only a succeeded payment can be refunded; {payment.pk} is {payment.status}.",
                messages.ERROR,
            )
            return HttpResponseRedirect(self._change_url(payment))
        return self._render_action(
            request,
            title=f"Refund {payment.pk}",
            form=form,
            payments=[payment],
            explanation=REFUND_EXPLANATION,
        )

    @admin.action(description="Reconcile now", permissions=["reconcile"])
    def reconcile_selected(self, request, queryset):
        """Bulk "Reconcile now": an intermediate page asks for the note, then enqueues each."""
        selected = list(
            queryset.filter(status__in=RECONCILABLE_STATUSES)
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)[: BULK_RECONCILE_LIMIT + 1]
        )
        if len(selected) > BULK_RECONCILE_LIMIT:
            self.message_user(
                request,
                f"Select at most {BULK_RECONCILE_LIMIT} unresolved payments at once.",
                messages.ERROR,
            )
            return None
        if not selected:
            self.message_user(
                request, "None of the selected payments is unresolved.", messages.WARNING
            )
            return None
        form = NoteForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            done = 0
            for payment_id in selected:
                try:
                    payment_reconcile_request(
                        payment_id=payment_id,
                        operator=request.user.get_username(),
                        note=form.cleaned_data["note"],
                    )
                except OperationRefused:
                    continue  # resolved meanwhile
                done += 1
            self.message_user(
                request, f"Reconciliation enqueued for {done} payment(s).", messages.SUCCESS
            )
            return None
        return self._render_action(
            request,
            title=f"Reconcile {len(selected)} payment(s) now",
            form=form,
            payments=selected,
            explanation=(
                "Enqueues a reconciliation for each selected payment that is still processing "
                "or in needs_review; resolved ones are skipped."
            ),
            extra={"bulk_action": "reconcile_selected"},
        )


def _refund_message(payment: Payment, result: Answered | Unavailable | Replayed) -> tuple[int, str]:
    """The admin message (level, text) for the outcome of an admin refund: the API's 201
    succeeded / failed, 202 pending, 502 refused, 503 unavailable, or a replay (the form was
    already submitted)."""
    if isinstance(result, Unavailable):
        wait = f" (the acquirer asks to wait {result.retry_after} s)" if result.retry_after else ""
        return messages.ERROR, (
            "The acquirer could not be reached: the refund was not sent and nothing was "
            f"refunded{wait}. Try again later."
        )
    record = result.record if isinstance(result, Replayed) else None
    if record is not None:
        operation = PaymentOperation.objects.filter(idempotency_key=record).first()
        shown = f"refund {operation.id} is {operation.status}" if operation else "its refund"
        return messages.WARNING, (
            f"This refund form was already submitted ({shown}); nothing more was refunded."
        )
    body = json.loads(result.response.body)
    refund_id = body.get("id") or body.get("refund_id", "")
    operation = PaymentOperation.objects.filter(pk=refund_id).first()
    amount = _fmt_amount(operation.amount, payment.currency) if operation else ""
    status_code = result.response.status_code
    if status_code == 202:
        return messages.WARNING, (
            f"Refund {refund_id} of {amount} was sent, but the acquirer's answer is not known "
            "yet: it is pending, and reconciliation resolves it (it may already be applied). "
            "Do not refund again; its outcome appears below."
        )
    if status_code == 502:
        return messages.ERROR, (
            f"The acquirer refused refund {refund_id}; it was not applied and nothing was refunded."
        )
    if operation is not None and operation.status == OperationStatus.FAILED:
        return messages.ERROR, (
            f"The acquirer declined refund {refund_id} of {amount} "
            f"({operation.failure_code or 'no code'}); nothing was refunded."
        )
    reference = operation.acquirer_reference if operation else ""
    return messages.SUCCESS, (
        f"Refund {refund_id} of {amount} succeeded at the acquirer (reference {reference})."
    )


class RefundStatusListFilter(admin.SimpleListFilter):
    """A refund's status, ``needs_review`` and ``pending`` first (index operation_kind_status)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return (
            (OperationStatus.NEEDS_REVIEW, "⚠ Needs review"),
            (OperationStatus.PENDING, "Pending"),
            (OperationStatus.SUCCEEDED, "Succeeded"),
            (OperationStatus.FAILED, "Failed"),
        )

    def queryset(self, request, queryset):
        if self.value() in OperationStatus.values:
            return queryset.filter(status=self.value())
        return queryset


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The refunds list (``/admin/payments/refund/``), read-only, for whoever may view payments.

    Built for millions of rows like the payments list: a capped count, no facets, filters with
    an index each (status: ``operation_kind_status``; created: ``operation_kind_created``),
    exact searches by refund id, payment id or acquirer reference. Refunds are issued from the
    payment's page ("Refund"), never here.
    """

    list_display = (
        "id",
        "payment_link",
        "display_amount",
        "status",
        "reason",
        "failure_code",
        "acquirer_reference",
        "created_at",
        "updated_at",
    )
    list_filter = (RefundStatusListFilter, ("created_at", admin.DateFieldListFilter))
    # Documentation only: get_search_results resolves a term through these fields' indexes.
    search_fields = ("id__exact", "payment__id__exact", "acquirer_reference__exact")
    search_help_text = (
        "Refund id (re_...) or payment id (pay_...) in any case, or the exact acquirer reference."
    )
    list_select_related = ("payment",)
    ordering = ("-created_at", "-id")
    sortable_by = ("created_at",)
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = CappedCountPaginator
    list_per_page = 50
    actions = None
    fields = (
        "id",
        "payment_link",
        "status",
        "display_amount",
        "reason",
        "failure_code",
        "acquirer_reference",
        "acquirer_idempotency_key",
        "idempotency_key",
        "what_is_known",
        "next_check_at",
        "reconciliation_attempts",
        "reconciliation_lease_until",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.has_perm(REFUND_VIEW_PERMISSION)

    def has_module_permission(self, request) -> bool:
        return self.has_view_permission(request)

    @admin.display(description="payment")
    def payment_link(self, refund: PaymentOperation) -> str:
        url = reverse("admin:payments_payment_change", args=[quote(refund.payment_id)])
        return format_html('<a href="{}">{}</a>', url, refund.payment_id)

    @admin.display(description="amount")
    def display_amount(self, refund: PaymentOperation) -> str:
        return _fmt_amount(refund.amount, refund.payment.currency)

    @admin.display(description="what is known (pending or needs review)")
    def what_is_known(self, refund: PaymentOperation) -> str:
        if refund.status not in (OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW):
            return "-"
        events = list(
            refund.payment.events.filter(
                type__in=OPERATION_KNOWN_EVENT_TYPES, data__operation=refund.id
            ).order_by("-created_at", "-id")[:TIMELINE_LIMIT]
        )[::-1]
        return _operation_known(refund, events)

    def get_queryset(self, request):
        return super().get_queryset(request).filter(kind=OperationKind.REFUND)

    def get_search_results(self, request, queryset, search_term):
        """Exact matches on the refund id, the payment id or the acquirer reference: one OR of
        equalities, each answered by an index (the primary key, the payment foreign key,
        ``operation_acquirer_reference``). Our ids are lower-case: matched in any case."""
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(id=term.lower()) | Q(payment_id=term.lower()) | Q(acquirer_reference=term)
        return queryset.filter(match), False

    def changelist_view(self, request, extra_context=None):
        needs_review = _capped_count(Refund.objects.filter(status=OperationStatus.NEEDS_REVIEW))
        extra_context = {
            **(extra_context or {}),
            "needs_review_count": needs_review,
            "needs_review_capped": needs_review > CappedCountPaginator.cap,
        }
        return super().changelist_view(request, extra_context=extra_context)
