"""The operations console for payments: find stuck payments, read what the acquirer answered,
and act on them. Nobody edits an amount or a status by hand.

* The list and the detail page are read-only. Every status change goes through
  ``payments.admin.operator_actions`` (and so through the state machine), from an action page that
  asks for
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
  (``payments.operations.flows.refund_create``, the operator and note as its ``audit``) under
  a one-time idempotency key rendered with the form, so a double submit refunds once.
* :class:`RefundAdmin`: the read-only refunds list (``/admin/payments/refund/``), built like the
  payments list (capped count, index-backed filters, exact searches).
* The list warns of a circuit breaker that is not closed (``payments.acquirer.selectors``) and
  links the acquirer resilience page (``/admin/payments/resilience/``,
  :mod:`payments.admin.resilience`). The action forms are :mod:`payments.admin.forms`.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets, quote, unquote
from django.db.models import BigIntegerField, CharField, Q, Value
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from console.admin import CappedCountPaginator, ReadOnlyAdminMixin
from idempotency.models import IdempotencyKey
from payments.acquirer.selectors import breakers_not_closed
from payments.admin.display import (
    ATTEMPT_COLUMNS,
    ATTEMPT_EVENT_TYPES,
    OPERATIONS_LIMIT,
    RECONCILE_PERMISSION,
    REFUND_PERMISSION,
    RESOLVE_PERMISSION,
    STUCK_AFTER,
    TIMELINE_LIMIT,
    attempt_rows,
    capped_count,
    fmt_amount,
    fmt_instant,
    operation_known,
)
from payments.admin.operator_actions import (
    RECONCILABLE_STATUSES,
)
from payments.admin.payment_actions import PaymentActionsMixin
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import (
    OperationStatus,
    Payment,
    PaymentEvent,
    PaymentOperation,
    PaymentStatus,
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


@admin.register(Payment)
class PaymentAdmin(PaymentActionsMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
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
                    "display_amount_disputed",
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
        return fmt_amount(payment.amount, payment.currency)

    @admin.display(description="amount captured")
    def display_amount_captured(self, payment: Payment) -> str:
        return fmt_amount(payment.amount_captured, payment.currency)

    @admin.display(description="amount refunded")
    def display_amount_refunded(self, payment: Payment) -> str:
        return fmt_amount(payment.amount_refunded, payment.currency)

    @admin.display(description="amount disputed (open and lost disputes)")
    def display_amount_disputed(self, payment: Payment) -> str:
        return fmt_amount(payment.amount_disputed, payment.currency)

    @admin.display(description="decline / failure code")
    def code(self, payment: Payment) -> str:
        return payment.decline_code or payment.failure_code or ""

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, payment: Payment) -> str:
        return fmt_instant(payment.created_at)

    @admin.display(description="updated (UTC)")
    def updated(self, payment: Payment) -> str:
        return fmt_instant(payment.updated_at)

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
        needs_review = capped_count(Payment.objects.filter(status=PaymentStatus.NEEDS_REVIEW))
        operations_review = capped_count(
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
                    fmt_amount(op.amount, payment.currency),
                    op.reason or "",
                    op.acquirer_reference or "",
                    op.failure_code or "",
                    op.acquirer_idempotency_key,
                    operation_known(op, events),
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
            for row in attempt_rows(e)
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
