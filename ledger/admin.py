"""The ledger audit in the admin: read-only runs, newest first, with what each found.

``/admin/ledger/auditrun/latest/`` opens the last run. Nobody adds, changes or deletes a run
here; the ``support`` and ``operator`` groups may view them (migration 0002).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from ledger.models import AuditRun
from ledger.services import CATEGORY_LABELS, CSV_COLUMNS, Category

UNRESOLVED_COLUMNS = (
    "payment_id",
    "kind",
    "operation_id",
    "status",
    "created_at",
    "acquirer_records",
    "acquirer_statuses",
)


def _table(rows: list[dict], columns: tuple[str, ...]) -> str:
    if not rows:
        return "none"
    head = format_html_join("", "<th>{}</th>", ((c,) for c in columns))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        (
            (format_html_join("", "<td>{}</td>", ((row.get(c, ""),) for c in columns)),)
            for row in rows
        ),
    )
    return format_html("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head, body)


@admin.register(AuditRun)
class AuditRunAdmin(admin.ModelAdmin):
    list_display = (
        "ran_at",
        "verdict",
        "since",
        "payments_checked",
        "records_checked",
        *[category.value for category in Category],
        "unresolved_total",
        "triggered_by",
    )
    list_filter = ("triggered_by",)
    date_hierarchy = None
    list_per_page = 50
    readonly_fields = (
        "ran_at",
        "since",
        "verdict",
        "source",
        "triggered_by",
        "duration_seconds",
        "payments_checked",
        "records_checked",
        "refunds_checked",
        "refund_records_checked",
        "counts",
        "unresolved_total",
        "csv_path",
        "discrepancy_table",
        "unresolved_table",
    )
    fields = readonly_fields

    @admin.display(description="result")
    def verdict(self, run: AuditRun) -> str:
        return "clean" if run.clean else f"{run.discrepancies_total} discrepancies"

    @admin.display(description="discrepancies per category")
    def counts(self, run: AuditRun) -> str:
        return format_html_join(
            "",
            "<div>{}: <b>{}</b> ({})</div>",
            (
                (category.value, getattr(run, category.value), CATEGORY_LABELS[category])
                for category in Category
            ),
        )

    @admin.display(description="discrepancies (the CSV holds all of them)")
    def discrepancy_table(self, run: AuditRun) -> str:
        return _table(run.discrepancies, CSV_COLUMNS)

    @admin.display(description="unresolved payments and operations (not discrepancies)")
    def unresolved_table(self, run: AuditRun) -> str:
        return _table(run.unresolved, UNRESOLVED_COLUMNS)

    def get_urls(self):
        latest = path(
            "latest/",
            self.admin_site.admin_view(self.latest_view),
            name="ledger_auditrun_latest",
        )
        return [latest, *super().get_urls()]

    def latest_view(self, request: HttpRequest) -> HttpResponseRedirect:
        """Redirect to the last run's page (or to the list when there is none)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = AuditRun.objects.order_by("-ran_at", "-id").only("pk").first()
        if run is None:
            return HttpResponseRedirect(reverse("admin:ledger_auditrun_changelist"))
        return HttpResponseRedirect(reverse("admin:ledger_auditrun_change", args=[quote(run.pk)]))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
