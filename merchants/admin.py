"""Admin for merchants. API keys are shown by prefix only; the hash is never displayed."""

from django.contrib import admin

from merchants.models import ApiKey, Merchant


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    fields = ("prefix", "created_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "revoked_at")
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Merchant)
class MerchantAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "created_at")
    search_fields = ("name",)
    inlines = [ApiKeyInline]
