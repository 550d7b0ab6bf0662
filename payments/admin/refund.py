"""The read-only refunds list (``/admin/payments/refund/``), built like the payments list
(capped count, index-backed filters, exact searches).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Q
from django.urls import reverse
from django.utils.html import format_html

from console.admin import CappedCountPaginator, ReadOnlyAdminMixin
from payments.admin.display import (
    OPERATION_KNOWN_EVENT_TYPES,
    REFUND_VIEW_PERMISSION,
    TIMELINE_LIMIT,
    capped_count,
    fmt_amount,
    operation_known,
)
from payments.models import (
    OperationKind,
    OperationStatus,
    PaymentOperation,
    Refund,
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
        return fmt_amount(refund.amount, refund.payment.currency)

    @admin.display(description="what is known (pending or needs review)")
    def what_is_known(self, refund: PaymentOperation) -> str:
        if refund.status not in (OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW):
            return "-"
        events = list(
            refund.payment.events.filter(
                type__in=OPERATION_KNOWN_EVENT_TYPES, data__operation=refund.id
            ).order_by("-created_at", "-id")[:TIMELINE_LIMIT]
        )[::-1]
        return operation_known(refund, events)

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
        needs_review = capped_count(Refund.objects.filter(status=OperationStatus.NEEDS_REVIEW))
        extra_context = {
            **(extra_context or {}),
            "needs_review_count": needs_review,
            "needs_review_capped": needs_review > CappedCountPaginator.cap,
        }
        return super().changelist_view(request, extra_context=extra_context)
