"""Admin for merchants. API keys are shown by prefix only; the hash is never displayed.

"Rotate API key" issues a new key (``merchants.services.api_key_issue``) and shows it once, in
the answer to the confirming POST (``Cache-Control: no-store``); it is never stored in clear,
put in a message or logged. Earlier keys keep working for the rotation overlap
(``API_KEY_ROTATION_OVERLAP_SECONDS``, 24 h) and then expire, so the merchant can switch without
downtime; "Revoke" ends one at once. Both need ``merchants.manage_api_keys`` (the
``key_manager`` group, not the operators: whoever sees a new key can act as the merchant) and
are recorded in the admin's history with the key's prefix. Each key shows when it last
authenticated a request (to the minute) and when it expires.

The merchant's own limits (``rate_limit_requests``, ``concurrent_payments_limit``; empty: the
settings' defaults, ``payments.api.limits``) are edited on its page by whoever may change merchants.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timeuntil

from console.admin import ReadOnlyAdminMixin
from console.forms import CardDataRefusingFormMixin
from merchants.models import ApiKey, Merchant
from merchants.services import api_key_issue, api_key_revoke

ROTATE_PERMISSION = "merchants.manage_api_keys"


class ApiKeyInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = ApiKey
    fields = ("prefix", "created_at", "last_used_at", "expires_at", "revoked_at", "revoke_link")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-created_at",)

    def get_fields(self, request, obj=None):
        """The "Revoke" column only for those who may revoke."""
        fields = super().get_fields(request, obj)
        if request.user.has_perm(ROTATE_PERMISSION):
            return fields
        return [name for name in fields if name != "revoke_link"]

    @admin.display(description="")
    def revoke_link(self, api_key: ApiKey) -> str:
        if api_key.pk is None or api_key.revoked_at is not None:
            return ""
        url = reverse("admin:merchants_merchant_revoke_key", args=[api_key.merchant_id, api_key.pk])
        return format_html('<a href="{}">Revoke</a>', url)


class MerchantForm(CardDataRefusingFormMixin, forms.ModelForm):
    """The merchant's add and change form: a name holding a card number is refused (and not
    shown again)."""

    class Meta:
        model = Merchant
        fields = ["name", "rate_limit_requests", "concurrent_payments_limit", "acquirer_order"]

    def clean_acquirer_order(self) -> str:
        """Comma-separated names of configured acquirers (``ACQUIRERS``, else ``ACQUIRER_NAME``),
        each once; stored as ``alpha,beta``."""
        names = [name.strip() for name in self.cleaned_data["acquirer_order"].split(",")]
        names = [name for name in names if name]
        configured = getattr(settings, "ACQUIRERS", None)
        known = [spec.name for spec in configured] if configured else [settings.ACQUIRER_NAME]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise forms.ValidationError(
                f"Not a configured acquirer: {', '.join(unknown)[:100]}. "
                f"Configured: {', '.join(known)}."
            )
        if len(set(names)) != len(names):
            raise forms.ValidationError("Name each acquirer once.")
        return ",".join(names)


@admin.register(Merchant)
class MerchantAdmin(admin.ModelAdmin):
    form = MerchantForm
    list_display = ("id", "name", "created_at", "rate_limit_requests", "concurrent_payments_limit")
    search_fields = ("name",)
    fieldsets = [
        (None, {"fields": ["name"]}),
        ("Limits", {"fields": ["rate_limit_requests", "concurrent_payments_limit"]}),
        ("Routing", {"fields": ["acquirer_order"]}),
    ]
    inlines = [ApiKeyInline]
    actions = ["rotate_key_action"]

    def has_rotate_permission(self, request) -> bool:
        return request.user.has_perm(ROTATE_PERMISSION)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/rotate-key/",
                wrap(self.rotate_key_view),
                name="merchants_merchant_rotate_key",
            ),
            path(
                "<path:object_id>/revoke-key/<int:key_id>/",
                wrap(self.revoke_key_view),
                name="merchants_merchant_revoke_key",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {
            **(extra_context or {}),
            "can_rotate": self.has_rotate_permission(request),
        }
        return super().change_view(request, object_id, form_url, extra_context=extra_context)

    @admin.action(description="Rotate API key", permissions=["rotate"])
    def rotate_key_action(self, request, queryset):
        """Select one merchant: opens its "Rotate API key" page."""
        ids = list(queryset.values_list("pk", flat=True)[:2])
        if len(ids) != 1:
            self.message_user(request, "Select exactly one merchant.", messages.ERROR)
            return None
        return HttpResponseRedirect(reverse("admin:merchants_merchant_rotate_key", args=ids))

    def _merchant(self, request, object_id: str) -> Merchant:
        if not self.has_rotate_permission(request):
            raise PermissionDenied
        merchant = self.get_object(request, unquote(object_id))
        if merchant is None:
            raise Http404("No such merchant.")
        return merchant

    def _render(self, request, merchant: Merchant, **context) -> TemplateResponse:
        return TemplateResponse(
            request,
            "admin/merchants/merchant/rotate_key.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "merchant": merchant,
                "overlap": timeuntil(
                    timezone.now() + timedelta(seconds=settings.API_KEY_ROTATION_OVERLAP_SECONDS)
                ),
                **context,
            },
        )

    def rotate_key_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: confirm. POST: issue a new key and show it, this once."""
        merchant = self._merchant(request, object_id)
        if request.method != "POST":
            return self._render(request, merchant, title=f"Rotate the API key of {merchant}")
        now = timezone.now()
        issued = api_key_issue(merchant=merchant, now=now)
        self.log_change(request, merchant, f"Issued API key {issued.api_key.prefix}…")
        # admin_view marks every admin answer never_cache (Cache-Control: no-store, private).
        return self._render(
            request,
            merchant,
            title=f"New API key of {merchant}",
            new_key=issued.raw,
            overlap_ends=now + timedelta(seconds=settings.API_KEY_ROTATION_OVERLAP_SECONDS),
        )

    def revoke_key_view(self, request: HttpRequest, object_id: str, key_id: int) -> HttpResponse:
        """GET: confirm. POST: revoke the key (it answers 401 from now on)."""
        merchant = self._merchant(request, object_id)
        api_key = merchant.api_keys.filter(pk=key_id).first()
        if api_key is None:
            raise Http404("No such key.")
        if request.method != "POST":
            return self._render(
                request, merchant, title=f"Revoke API key {api_key}", revoke=api_key
            )
        api_key_revoke(api_key=api_key)
        self.log_change(request, merchant, f"Revoked API key {api_key.prefix}…")
        self.message_user(request, f"API key {api_key} revoked.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:merchants_merchant_change", args=[merchant.pk]))
