"""Read-only admin for idempotency keys: what each key will replay, and until when.

Built for large tables: no full COUNT (:class:`console.admin.CappedCountPaginator`), no facet
counts, exact searches only (each one an index look-up), and an ordering that every filter's
index serves (newest expiry first: the ``expires_at`` index, and ``status, expires_at`` for the
status filter).
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets, quote
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html

from console.admin import CappedCountPaginator, ReadOnlyAdminMixin
from idempotency.models import IdempotencyKey

__all__ = ["IdempotencyKeyAdmin"]

#: What the console shows instead of a stored answer's ``secret``.
REDACTED = "[redacted]"


class ExpiredListFilter(admin.SimpleListFilter):
    """Expired (``expires_at`` at or before now: the key counts as absent) or live."""

    title = "expired"
    parameter_name = "expired"

    def lookups(self, request, model_admin):
        return (("yes", "Expired"), ("no", "Not expired"))

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(expires_at__lte=now)
        if self.value() == "no":
            return queryset.filter(expires_at__gt=now)
        return queryset


def _reverse_one_to_one_names() -> tuple[str, ...]:
    """Names of the one-to-one relations pointing at a key (the resource created under it).

    Found at run time, so this app names no app that uses it (import direction).
    """
    return tuple(
        rel.get_accessor_name() for rel in IdempotencyKey._meta.related_objects if rel.one_to_one
    )


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "key",
        "merchant",
        "status",
        "response_status",
        "short_fingerprint",
        "locked_at",
        "created_at",
        "expires_at",
        "resource",
    )
    list_filter = ("status", ExpiredListFilter)
    search_fields = ("key__exact",)
    search_help_text = "Exact idempotency key (case-sensitive)."
    list_select_related = ("merchant",)
    ordering = ("-expires_at", "-id")
    sortable_by = ()
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = CappedCountPaginator
    list_per_page = 50
    fieldsets = (
        (None, {"fields": ("merchant", "key", "status", "expired", "resource")}),
        (
            "Request",
            {"fields": ("method", "route", "request_fingerprint")},
        ),
        (
            "Stored answer (replayed byte for byte)",
            {"fields": ("response_status", "stored_headers", "stored_body")},
        ),
        (
            "Times",
            {"fields": ("created_at", "locked_at", "completed_at", "expires_at")},
        ),
    )
    readonly_fields = flatten_fieldsets(fieldsets)

    def get_queryset(self, request):
        return (
            super().get_queryset(request).select_related("merchant", *_reverse_one_to_one_names())
        )

    @admin.display(description="fingerprint")
    def short_fingerprint(self, record: IdempotencyKey) -> str:
        return f"{record.request_fingerprint[:12]}…"

    @admin.display(description="expired", boolean=True)
    def expired(self, record: IdempotencyKey) -> bool:
        return record.expires_at <= timezone.now()

    @admin.display(description="created resource")
    def resource(self, record: IdempotencyKey) -> str:
        """A link to the object created under this key (the payment), when there is one."""
        for name in _reverse_one_to_one_names():
            related = getattr(record, name, None)
            if related is None:
                continue
            opts = related._meta
            try:
                url = reverse(
                    f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(related.pk)]
                )
            except NoReverseMatch:
                return str(related)
            return format_html('<a href="{}">{}</a>', url, related)
        return "-"

    @admin.display(description="stored headers")
    def stored_headers(self, record: IdempotencyKey) -> str:
        return format_html("<pre>{}</pre>", json.dumps(record.response_headers, indent=2))

    @admin.display(description="stored body")
    def stored_body(self, record: IdempotencyKey) -> str:
        """The stored body, pretty-printed when it is JSON (the bytes replayed are unchanged);
        a top-level ``secret`` (a webhook endpoint's, shown once to the merchant) is redacted."""
        if record.response_body is None:
            return "-"
        raw = bytes(record.response_body)
        try:
            document = json.loads(raw)
            if isinstance(document, dict) and "secret" in document:
                document["secret"] = REDACTED  # a webhook endpoint's signing secret
            text = json.dumps(document, indent=2, ensure_ascii=False)
        except ValueError:
            text = raw.decode("utf-8", errors="replace")
        return format_html("<pre>{}</pre>", text)
