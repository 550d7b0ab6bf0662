"""Read-only admin for idempotency keys."""

from django.contrib import admin

from idempotency.models import IdempotencyKey


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(admin.ModelAdmin):
    list_display = ("key", "merchant", "status", "response_status", "created_at", "expires_at")
    list_filter = ("status",)
    search_fields = ("key",)
    list_select_related = ("merchant",)
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
