"""The read-only disputes list (``/admin/payments/dispute/``) and the acquirer notifications
list (``/admin/payments/acquirernotification/``), for whoever may view payments. Both are
written only by the notifications (payments/notifications/); nothing is changed here."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html

from console.admin import CappedCountPaginator, ReadOnlyAdminMixin
from payments.admin.display import REFUND_VIEW_PERMISSION, fmt_amount
from payments.models import AcquirerNotification, Dispute


class _ViewPaymentsOnly(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only, capped count, no facets, visible to whoever may view payments."""

    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = CappedCountPaginator
    list_per_page = 50
    actions = None

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.has_perm(REFUND_VIEW_PERMISSION)

    def has_module_permission(self, request) -> bool:
        return self.has_view_permission(request)

    @admin.display(description="payment")
    def payment_link(self, row: Dispute | AcquirerNotification) -> str:
        if not row.payment_id:
            return "-"
        url = reverse("admin:payments_payment_change", args=[quote(row.payment_id)])
        return format_html('<a href="{}">{}</a>', url, row.payment_id)


@admin.register(Dispute)
class DisputeAdmin(_ViewPaymentsOnly):
    """Every dispute an acquirer reported: status, amount, reason, deadline. Filter by status
    (index ``dispute_status_created``); search by dispute id, payment id or the acquirer's
    dispute id, exactly."""

    list_display = (
        "id",
        "payment_link",
        "display_amount",
        "status",
        "reason",
        "evidence_due_by",
        "acquirer",
        "created_at",
        "closed_at",
    )
    list_filter = ("status",)
    search_fields = ("id__exact", "payment__id__exact", "acquirer_dispute_reference__exact")
    list_select_related = ("payment",)
    ordering = ("-created_at", "-id")
    fields = (
        "id",
        "payment_link",
        "acquirer",
        "acquirer_dispute_reference",
        "display_amount",
        "status",
        "provider_status",
        "reason",
        "evidence_due_by",
        "created_at",
        "updated_at",
        "closed_at",
    )
    readonly_fields = fields

    @admin.display(description="amount")
    def display_amount(self, dispute: Dispute) -> str:
        return fmt_amount(dispute.amount, dispute.currency)


@admin.register(AcquirerNotification)
class AcquirerNotificationAdmin(_ViewPaymentsOnly):
    """Every verified notification, as stored (its body with card numbers redacted; the
    signature headers are never stored). ``received`` ones wait to be applied: ``last_error``
    says why."""

    list_display = (
        "id",
        "acquirer",
        "event_type",
        "status",
        "payment_link",
        "attempts",
        "received_at",
        "applied_at",
        "last_error",
    )
    list_filter = ("status", "acquirer")
    search_fields = ("event_id__exact", "payment_id__exact")
    ordering = ("-received_at", "-id")
    fields = (
        "id",
        "acquirer",
        "event_id",
        "event_type",
        "subject",
        "status",
        "payment_link",
        "attempts",
        "next_attempt_at",
        "received_at",
        "applied_at",
        "last_error",
        "body",
    )
    readonly_fields = fields
