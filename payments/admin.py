"""Read-only admin for payments and their events (operators never edit a status by hand)."""

from django.contrib import admin

from payments.models import Payment, PaymentEvent
from payments.money import format_minor_units


class PaymentEventInline(admin.TabularInline):
    model = PaymentEvent
    fields = ("created_at", "type", "from_status", "to_status", "data")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
    list_display = ("id", "merchant", "display_amount", "currency", "status", "reference", "created_at")
    list_filter = ("status", "currency")
    search_fields = ("=id", "=reference", "=acquirer_reference")
    list_select_related = ("merchant",)
    show_full_result_count = False
    inlines = [PaymentEventInline]

    @admin.display(description="amount")
    def display_amount(self, payment: Payment) -> str:
        return format_minor_units(payment.amount, payment.currency)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
