"""The webhooks console: read-only lists of endpoints, events, deliveries and every attempt,
and two audited actions.

* Endpoints (never their secrets), events (with their deliveries), deliveries (their
  schedule), attempts (status, duration, the stored body, the error class; never a signature),
  and the operators' actions. Read-only (:class:`console.admin.ReadOnlyAdminMixin`), capped
  counts (:class:`console.admin.CappedCountPaginator`), exact searches by id.
* "Re-deliver" on events (``webhooks.redeliver_event``) and "Enable again" on disabled endpoints
  (``webhooks.enable_webhook_endpoint``): each needs a note typed in the action bar, and is
  recorded with the operator as an :class:`~webhooks.models.OperatorAction`
  (``webhooks.services``). The ``operator`` group has both; ``support`` only looks.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm

from console.admin import CappedCountPaginator, ReadOnlyAdminMixin
from webhooks.models import (
    Delivery,
    DeliveryAttempt,
    Event,
    OperatorAction,
    WebhookEndpoint,
)
from webhooks.services import ActionRefused, endpoint_enable, event_redeliver

__all__ = ["DeliveryAdmin", "DeliveryAttemptAdmin", "EventAdmin", "WebhookEndpointAdmin"]


class NoteActionForm(ActionForm):
    """The action bar with the note an audited action requires."""

    note = forms.CharField(
        required=False, max_length=1000, label="Note (required for the audited actions)"
    )


class _Console(ReadOnlyAdminMixin, admin.ModelAdmin):
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    sortable_by = ()


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(_Console):
    list_display = (
        "id",
        "merchant",
        "url",
        "status",
        "disabled_reason",
        "failing_since",
        "created_at",
    )
    list_filter = ("status",)
    search_fields = ("id__exact",)
    search_help_text = "Exact endpoint id (we_...)."
    list_select_related = ("merchant",)
    ordering = ("-created_at", "-id")
    # Never the secrets: not a field of the page at all.
    fields = (
        "id", "merchant", "url", "enabled_events", "description", "status", "disabled_reason",
        "disabled_at", "failing_since", "previous_secret_expires_at", "created_at", "updated_at",
        "deleted_at",
    )  # fmt: skip
    readonly_fields = fields
    action_form = NoteActionForm
    actions = ["enable_selected"]

    def has_enable_permission(self, request) -> bool:
        return request.user.has_perm("webhooks.enable_webhook_endpoint")

    @admin.action(
        description="Enable again (audited; delivers what is still due)", permissions=["enable"]
    )
    def enable_selected(self, request, queryset):
        for endpoint in queryset:
            try:
                due = endpoint_enable(
                    endpoint_id=endpoint.id,
                    operator=request.user.get_username(),
                    note=request.POST.get("note", ""),
                )
            except ActionRefused as exc:
                self.message_user(request, f"{endpoint.id}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{endpoint.id} enabled; {due} deliveries due now.")


class DeliveryInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Delivery
    fields = (
        "endpoint",
        "status",
        "attempts",
        "next_attempt_at",
        "last_status_code",
        "last_error",
        "delivered_at",
    )
    readonly_fields = fields
    extra = 0
    show_change_link = True


@admin.register(Event)
class EventAdmin(_Console):
    list_display = ("id", "merchant", "type", "object_id", "created_at")
    list_filter = ("type",)
    search_fields = ("id__exact", "object_id__exact")
    search_help_text = "Exact event id (evt_...) or payment / refund id."
    list_select_related = ("merchant",)
    ordering = ("-created_at", "-id")
    fields = ("id", "merchant", "type", "object_id", "created_at", "fanned_out_at", "data")
    readonly_fields = fields
    inlines = [DeliveryInline]
    action_form = NoteActionForm
    actions = ["redeliver_selected"]

    def has_redeliver_permission(self, request) -> bool:
        return request.user.has_perm("webhooks.redeliver_event")

    @admin.action(description="Re-deliver (audited)", permissions=["redeliver"])
    def redeliver_selected(self, request, queryset):
        for event in queryset[:100]:
            try:
                due = event_redeliver(
                    event_id=event.id,
                    operator=request.user.get_username(),
                    note=request.POST.get("note", ""),
                )
            except ActionRefused as exc:
                self.message_user(request, f"{event.id}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{event.id}: {due} deliveries due now.")


@admin.register(Delivery)
class DeliveryAdmin(_Console):
    list_display = (
        "id", "event", "endpoint", "status", "attempts", "next_attempt_at", "last_status_code",
        "last_error", "delivered_at",
    )  # fmt: skip
    list_filter = ("status",)
    search_fields = ("event__id__exact", "endpoint__id__exact")
    search_help_text = "Exact event id (evt_...) or endpoint id (we_...)."
    ordering = ("-created_at", "-id")
    exclude = ("lease_token",)


@admin.register(DeliveryAttempt)
class DeliveryAttemptAdmin(_Console):
    list_display = (
        "id",
        "event",
        "endpoint",
        "number",
        "started_at",
        "duration_ms",
        "status_code",
        "outcome",
        "error",
    )
    list_filter = ("outcome",)
    search_fields = ("event__id__exact", "endpoint__id__exact")
    search_help_text = "Exact event id (evt_...) or endpoint id (we_...)."
    ordering = ("-started_at", "-id")


@admin.register(OperatorAction)
class OperatorActionAdmin(_Console):
    list_display = ("created_at", "operator", "action", "endpoint", "event", "note")
    ordering = ("-created_at", "-id")
