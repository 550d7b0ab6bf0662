"""The operations console for payments: find stuck payments, read what the acquirer answered,
and act on them. Nobody edits an amount or a status by hand.

* The list and the detail page are read-only. Every status change goes through
  ``payments.operations`` (and so through the state machine), from an action page that asks for
  a note; the operator and the note are stored as a payment event.
* Actions: "Reconcile now" (``payments.reconcile_payment`` permission, also a bulk action for
  up to :data:`BULK_RECONCILE_LIMIT` payments) and "Resolve as succeeded / declined / failed
  after manual check" (``payments.resolve_payment``, only for ``needs_review``). The ``support``
  group may only look; the ``operator`` group has both permissions (data migration 0004).
* Built for millions of rows: no full COUNT (capped paginator), no facet counts, filters that
  each have an index, exact searches resolved through indexes (never ``UPPER(...) LIKE``).
* The resilience page (``/admin/payments/resilience/``, :class:`ResilienceAdmin`): the acquirer
  client's circuit breakers per endpoint group, the rate gate, the retry budget and the AIMD
  limit, read without side effects; force-open / disable / reset per group with a note
  (``payments.operate_breaker``, the ``operator`` group, data migration 0005), recorded in the
  admin history and in the breaker's own log with the operator and the note.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from idempotency.admin import CappedCountPaginator
from idempotency.models import IdempotencyKey
from payments.acquirer.client import acquirer_client
from payments.models import Payment, PaymentEvent, PaymentEventType, PaymentStatus
from payments.money import CURRENCY_EXPONENTS, format_minor_units
from payments.operations import (
    NOTE_MAX_LENGTH,
    RECONCILABLE_STATUSES,
    RESOLUTIONS,
    OperationRefused,
    payment_reconcile_request,
    payment_resolve,
)

#: A ``processing`` payment older than this is listed under "Processing, stuck".
STUCK_AFTER = timedelta(minutes=15)
#: At most this many payments per bulk "Reconcile now".
BULK_RECONCILE_LIMIT = 500
#: Events shown on a payment's page (the newest ones when there are more).
TIMELINE_LIMIT = 500
#: Event types that record one call to the acquirer (rendered in the attempts table).
ATTEMPT_EVENT_TYPES = (PaymentEventType.ACQUIRER_ATTEMPT, PaymentEventType.RECONCILIATION_ATTEMPT)

#: What "Reconcile now" does, by status (shown on its page).
RECONCILE_EXPLANATIONS = {
    PaymentStatus.PROCESSING: (
        "Enqueues a reconciliation now (and makes the payment due for the next sweep, in case "
        "the task message is lost): the worker looks the payment up at the acquirer and "
        "re-sends it only with its own acquirer idempotency key, so it is never charged twice. "
        "A payment another worker is reconciling right now is left to that worker."
    ),
    PaymentStatus.NEEDS_REVIEW: (
        "Records your request and enqueues the reconciliation task. Automatic reconciliation "
        "gave this payment up (too old or too many attempts), and the task does not re-check "
        "needs_review payments: check the payment at the acquirer, then resolve it with one "
        "of the Resolve actions (see docs/operations.md)."
    ),
}

RECONCILE_PERMISSION = "payments.reconcile_payment"
RESOLVE_PERMISSION = "payments.resolve_payment"

logger = logging.getLogger(__name__)


class StatusListFilter(admin.SimpleListFilter):
    """Status, with the ones that need a human first (``needs_review``, stuck ``processing``)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return (
            (PaymentStatus.NEEDS_REVIEW, "⚠ Needs review"),
            ("stuck", f"⚠ Processing, stuck (over {int(STUCK_AFTER.total_seconds() // 60)} min)"),
            (PaymentStatus.PROCESSING, "Processing"),
            (PaymentStatus.SUCCEEDED, "Succeeded"),
            (PaymentStatus.DECLINED, "Declined"),
            (PaymentStatus.FAILED, "Failed"),
        )

    def queryset(self, request, queryset):
        value = self.value()
        if value == "stuck":
            return queryset.filter(
                status=PaymentStatus.PROCESSING, created_at__lt=timezone.now() - STUCK_AFTER
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


class NoteForm(forms.Form):
    """Every action asks why: the note is stored with the operator in the payment's events."""

    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        max_length=NOTE_MAX_LENGTH,
        help_text="Required. Why, and what you checked (ticket, acquirer dashboard ...).",
    )

    def clean_note(self) -> str:
        note = self.cleaned_data["note"].strip()
        if not note:
            raise forms.ValidationError("A note is required.")
        return note


class ResolveForm(NoteForm):
    """A resolution after a manual check at the acquirer."""

    acquirer_reference = forms.CharField(
        required=False,
        max_length=64,
        help_text="The acquirer's id of the authorization, if the check found one.",
    )
    code = forms.CharField(
        required=False,
        max_length=64,
        help_text="Declined: the decline code (required). Failed: the failure code "
        "(default not_authorized_at_acquirer).",
    )


def _fmt_seconds(value) -> str:
    return (
        f"{value:g} s" if isinstance(value, (int, float)) else ("" if value is None else str(value))
    )


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "merchant",
        "display_amount",
        "status",
        "code",
        "reference",
        "created_at",
        "updated_at",
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
    )
    search_help_text = (
        "Exact payment id, reference, acquirer reference or idempotency key (case-sensitive)."
    )
    list_select_related = ("merchant",)
    ordering = ("-created_at", "-id")
    sortable_by = ("created_at",)
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
        ("Times", {"fields": ("created_at", "updated_at")}),
        ("Acquirer attempts", {"fields": ("attempts_table",)}),
        ("Event timeline", {"fields": ("timeline_table",)}),
    )
    readonly_fields = (
        "id",
        "merchant",
        "status",
        "display_amount",
        "currency",
        "payment_method",
        "reference",
        "description",
        "acquirer_reference",
        "decline_code",
        "failure_code",
        "acquirer_idempotency_key",
        "idempotency_key_link",
        "next_check_at",
        "reconciliation_attempts",
        "reconciliation_lease_until",
        "created_at",
        "updated_at",
        "attempts_table",
        "timeline_table",
    )

    # --- permissions: read-only everywhere; actions need their own permission --------------

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_reconcile_permission(self, request) -> bool:
        return request.user.has_perm(RECONCILE_PERMISSION)

    def has_resolve_permission(self, request) -> bool:
        return request.user.has_perm(RESOLVE_PERMISSION)

    # --- list ------------------------------------------------------------------------------

    @admin.display(description="amount")
    def display_amount(self, payment: Payment) -> str:
        try:
            return f"{format_minor_units(payment.amount, payment.currency)} {payment.currency}"
        except KeyError:  # a currency no longer in the table: show the minor units as stored
            return f"{payment.amount} (minor units) {payment.currency}"

    @admin.display(description="decline / failure code")
    def code(self, payment: Payment) -> str:
        return payment.decline_code or payment.failure_code or ""

    def get_search_results(self, request, queryset, search_term):
        """Exact matches on the id, reference, acquirer reference or idempotency key.

        One OR of equalities that PostgreSQL answers with a BitmapOr of index scans; the
        idempotency key is resolved first (its own index), so no join is needed.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        key_ids = list(IdempotencyKey.objects.filter(key=term).values_list("pk", flat=True)[:100])
        match = Q(id=term) | Q(reference=term) | Q(acquirer_reference=term)
        if key_ids:
            match |= Q(idempotency_key_id__in=key_ids)
        return queryset.filter(match), False

    def changelist_view(self, request, extra_context=None):
        needs_review = (
            Payment.objects.filter(status=PaymentStatus.NEEDS_REVIEW)
            .order_by()[: CappedCountPaginator.cap + 1]
            .count()
        )
        extra_context = {
            **(extra_context or {}),
            "needs_review_count": needs_review,
            "needs_review_capped": needs_review > CappedCountPaginator.cap,
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

    @admin.display(description="attempts")
    def attempts_table(self, payment: Payment) -> str:
        """Each call to the acquirer: what it answered, how long it took, the wait chosen."""
        rows = [e for e in self._events(payment) if e.type in ATTEMPT_EVENT_TYPES]
        if not rows:
            return "No acquirer attempt recorded."
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    e.created_at.isoformat(timespec="milliseconds"),
                    e.type,
                    e.data.get("operation", ""),
                    e.data.get("outcome", e.data.get("result", "")),
                    e.data.get("status_code", "") if e.data.get("status_code") is not None else "",
                    e.data.get("error", ""),
                    _fmt_seconds(e.data.get("elapsed_seconds")),
                    _fmt_seconds(
                        e.data.get("retry_after_seconds", e.data.get("next_check_in_seconds"))
                    ),
                    e.data.get("wait_source", ""),
                )
                for e in rows
            ),
        )
        return format_html(
            '<table class="payment-attempts"><thead><tr><th>at</th><th>event</th>'
            "<th>operation</th><th>outcome</th><th>HTTP status</th><th>error class</th>"
            "<th>elapsed</th><th>chosen wait</th><th>wait source</th></tr></thead>"
            "<tbody>{}</tbody></table>",
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
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            '<td><pre style="white-space: pre-wrap; margin: 0">{}</pre></td></tr>',
            (
                (
                    e.created_at.isoformat(timespec="milliseconds"),
                    e.type,
                    f"{e.from_status} → {e.to_status}" if e.from_status != e.to_status else "",
                    e.data.get("operator", ""),
                    json.dumps(e.data, indent=1, sort_keys=True, ensure_ascii=False)
                    if e.data
                    else "",
                )
                for e in events
            ),
        )
        return format_html(
            '<table class="payment-timeline"><thead><tr><th>at</th><th>event</th>'
            "<th>status</th><th>operator</th><th>data</th></tr></thead><tbody>{}</tbody></table>",
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
            *super().get_urls(),
        ]

    def _payment_or_404(self, request, object_id: str) -> Payment:
        if not self.has_view_permission(request):
            raise PermissionDenied
        payment = self.get_object(request, unquote(object_id))
        if payment is None:
            raise Http404("No such payment.")
        return payment

    def _change_url(self, payment: Payment) -> str:
        return reverse("admin:payments_payment_change", args=[quote(payment.pk)])

    def _render_action(self, request, *, title: str, form, payments, explanation: str, extra=None):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "form": form,
            "payments": payments,
            "explanation": explanation,
            **(extra or {}),
        }
        return TemplateResponse(request, "admin/payments/payment/action_form.html", context)

    def reconcile_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """ "Reconcile now" for one payment: a note, then the task is enqueued on commit."""
        payment = self._payment_or_404(request, object_id)
        if not self.has_reconcile_permission(request):
            raise PermissionDenied
        form = NoteForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                payment_reconcile_request(
                    payment_id=payment.pk,
                    operator=request.user.get_username(),
                    note=form.cleaned_data["note"],
                )
            except OperationRefused as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.log_change(request, payment, "Reconcile now: " + form.cleaned_data["note"])
                if payment.status == PaymentStatus.PROCESSING:
                    done = f"Reconciliation of {payment.pk} enqueued; its outcome appears here."
                else:
                    done = (
                        f"Recorded and enqueued: {payment.pk} is in needs_review, so the worker "
                        "looks it up at the acquirer (never re-sends it). Found: it is resolved. "
                        "Not found: check it at the acquirer, then resolve it."
                    )
                self.message_user(request, done, messages.SUCCESS)
            return HttpResponseRedirect(self._change_url(payment))
        return self._render_action(
            request,
            title=f"Reconcile {payment.pk} now",
            form=form,
            payments=[payment],
            explanation=RECONCILE_EXPLANATIONS[payment.status],
        )

    def resolve_view(self, request: HttpRequest, object_id: str, to_status: str) -> HttpResponse:
        """ "Resolve as ..." for one ``needs_review`` payment, after a manual check."""
        payment = self._payment_or_404(request, object_id)
        if not self.has_resolve_permission(request):
            raise PermissionDenied
        if to_status not in RESOLUTIONS:
            raise Http404("No such resolution.")
        form = ResolveForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                payment_resolve(
                    payment_id=payment.pk,
                    to_status=to_status,
                    operator=request.user.get_username(),
                    note=form.cleaned_data["note"],
                    acquirer_reference=form.cleaned_data["acquirer_reference"],
                    code=form.cleaned_data["code"],
                )
            except OperationRefused as exc:
                form.add_error(None, str(exc))
            else:
                self.log_change(
                    request, payment, f"Resolved as {to_status}: " + form.cleaned_data["note"]
                )
                self.message_user(
                    request, f"{payment.pk} resolved as {to_status}.", messages.SUCCESS
                )
                return HttpResponseRedirect(self._change_url(payment))
        if payment.status != PaymentStatus.NEEDS_REVIEW and request.method == "GET":
            self.message_user(
                request,
                f"Only a payment in needs_review can be resolved; {payment.pk} is "
                f"{payment.status}.",
                messages.ERROR,
            )
            return HttpResponseRedirect(self._change_url(payment))
        return self._render_action(
            request,
            title=f"Resolve {payment.pk} as {to_status}",
            form=form,
            payments=[payment],
            explanation=(
                f"Only after checking at the acquirer that this payment is {to_status}. The "
                "status changes through the state machine, the merchant's idempotency key "
                "then replays the final answer, and your name and note are recorded."
            ),
        )

    @admin.action(description="Reconcile now", permissions=["reconcile"])
    def reconcile_selected(self, request, queryset):
        """Bulk "Reconcile now": an intermediate page asks for the note, then enqueues each."""
        selected = list(
            queryset.filter(status__in=RECONCILABLE_STATUSES)
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)[: BULK_RECONCILE_LIMIT + 1]
        )
        if len(selected) > BULK_RECONCILE_LIMIT:
            self.message_user(
                request,
                f"Select at most {BULK_RECONCILE_LIMIT} unresolved payments at once.",
                messages.ERROR,
            )
            return None
        if not selected:
            self.message_user(
                request, "None of the selected payments is unresolved.", messages.WARNING
            )
            return None
        form = NoteForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            done = 0
            for payment_id in selected:
                try:
                    payment_reconcile_request(
                        payment_id=payment_id,
                        operator=request.user.get_username(),
                        note=form.cleaned_data["note"],
                    )
                except OperationRefused:
                    continue  # resolved meanwhile
                done += 1
            self.message_user(
                request, f"Reconciliation enqueued for {done} payment(s).", messages.SUCCESS
            )
            return None
        return self._render_action(
            request,
            title=f"Reconcile {len(selected)} payment(s) now",
            form=form,
            payments=selected,
            explanation=(
                "Enqueues a reconciliation for each selected payment that is still processing "
                "or in needs_review; resolved ones are skipped."
            ),
            extra={"bulk_action": "reconcile_selected"},
        )


# --- The resilience page -------------------------------------------------------------------

#: Acting on a circuit breaker (force open, disable, reset): the ``operator`` group (0005).
BREAKER_PERMISSION = "payments.operate_breaker"
#: Reading the resilience page: whoever may view payments (``support`` and ``operator``).
RESILIENCE_VIEW_PERMISSION = "payments.view_payment"
#: The admin-history rows of breaker actions: this content type (no model; made by migration
#: 0005, and again here if someone removed it), ``object_id`` = the endpoint group.
BREAKER_AUDIT_CONTENT_TYPE = ("payments", "circuitbreaker")
#: Breaker actions listed at the bottom of the page (newest first).
RESILIENCE_HISTORY_LIMIT = 20


@dataclass(frozen=True)
class BreakerAction:
    """One operator action on a breaker: the ``BreakerSet`` method, its button and its page."""

    label: str
    method: str
    explanation: str


BREAKER_ACTIONS: dict[str, BreakerAction] = {
    "force_open": BreakerAction(
        "Force open",
        "force_open",
        "Refuses every call of this endpoint group at once, without sending anything, until "
        "someone resets it. For authorize: POST /payments answers 503 acquirer_unavailable "
        "(nothing stored, the merchant's key stays free, nothing charged). For lookup: "
        "reconciliation postpones its checks; processing payments stay processing. Use it when "
        "the acquirer is known to be down or asks us to stop sending, and the breaker has not "
        "opened by itself, or for an announced maintenance window.",
    ),
    "disable": BreakerAction(
        "Disable",
        "disable",
        "Admits every call and records nothing: the breaker never opens until someone resets "
        "it. Retries, the retry budget, the rate gate and the concurrency limit still protect "
        "the acquirer. Use it only when the breaker opens for something that is not an "
        "acquirer outage (a misclassified answer, our own network), while you investigate.",
    ),
    "reset": BreakerAction(
        "Reset",
        "reset",
        "Clears any override (forced open, disabled) and closes the breaker with an empty "
        "window and a new generation: calls are admitted at once. Use it to end a forced open "
        "or a disable, or to close an open breaker once the acquirer confirms it has "
        "recovered, instead of waiting for the probes. If the acquirer still fails, the "
        "breaker opens again after the minimum number of failed calls.",
    ),
}

MEMORY_STORE_WARNING = (
    "The acquirer state store is in memory (ACQUIRER_STATE_REDIS_URL is not set): what this "
    "page shows and every action on it concern only the process that answered this request. "
    "Other web workers and the Celery worker keep their own breakers. Production must set "
    "ACQUIRER_STATE_REDIS_URL."
)
FALLBACK_STORE_WARNING = (
    "Redis (ACQUIRER_STATE_REDIS_URL) is unreachable: this page shows this process's local "
    "fallback, and an action now affects only this process and is lost when Redis answers "
    "again. Other processes each decide alone until then."
)


def _client_or_none():
    try:
        return acquirer_client()
    except Exception:  # settings broken: the page and the list must still render
        logger.exception("the acquirer client could not be built")
        return None


def breakers_not_closed() -> list[dict[str, Any]]:
    """Breakers that are not closed (for the payments list's banner); [] when unreadable."""
    client = _client_or_none()
    if client is None:
        return []
    try:
        snapshots = client.breakers.snapshot()
    except Exception:  # a banner is never worth a failed page
        logger.exception("reading the circuit breakers failed")
        return []
    return [
        {
            "group": group,
            "state": snapshot.state,
            "refusing": snapshot.state in ("open", "forced_open"),
        }
        for group, snapshot in snapshots.items()
        if snapshot.state != "closed"
    ]


def _read(what: str, errors: list[str], read):
    """One read of the resilience state; a failure becomes a line on the page, not a 500."""
    try:
        return read()
    except Exception as exc:
        logger.exception("resilience page: reading the %s failed", what)
        errors.append(f"The {what} could not be read ({type(exc).__name__}).")
        return None


def resilience_state(client) -> dict[str, Any]:
    """What the page shows, read without side effects: each breaker's snapshot (read-only
    script), the rate gate (``RateGate.remaining``: a GET), the retry budget
    (``RetryBudget.state``: a read that only drops expired slots) and the AIMD limit
    (``AimdLimiter.snapshot``: a read). Nothing is acquired, refused or counted."""
    errors: list[str] = []
    snapshots = _read("circuit breakers", errors, client.breakers.snapshot) or {}
    gate_remaining = _read("rate gate", errors, lambda: client.gate.remaining(client.scope))
    budget = client.budget
    budget_state = _read("retry budget", errors, budget.state)
    limiter = _read("concurrency limit", errors, lambda: client.limiter.snapshot(client.scope))
    now = timezone.now()
    stores = {snapshot.store for snapshot in snapshots.values()} or {
        getattr(client.store, "kind", "custom")
    }
    gate = None
    if gate_remaining is not None:
        gate = {
            "scope": client.scope,
            "remaining": gate_remaining,
            "closed": gate_remaining > 0,
            "not_before": now + timedelta(seconds=gate_remaining) if gate_remaining > 0 else None,
        }
    return {
        "breakers": [
            {"group": group, "snapshot": snapshot, "config": client.breakers[group].config}
            for group, snapshot in snapshots.items()
        ],
        "gate": gate,
        "budget": None
        if budget_state is None
        else {
            "name": budget.name,
            "retries_available": budget_state.retries_available,
            "balance": budget_state.balance,
            "reserve": budget.min_retries_per_second * budget.ttl,
            "ttl": budget.ttl,
            "percent_can_retry": budget.percent_can_retry * 100,
        },
        "limiter": limiter,
        "store_kind": getattr(client.store, "kind", "custom"),
        "memory_store": "memory" in stores,
        "fallback_store": "fallback" in stores,
        "errors": errors,
        "acquirer": client.config.name,
        "read_at": now,
    }


class ResilienceAdmin:
    """The resilience page of an ``AdminSite``: ``/admin/payments/resilience/`` and one action
    page per endpoint group and action. :func:`install_resilience_page` hooks it into the
    site's URLs (names ``admin:payments_resilience`` and ``admin:payments_resilience_action``)
    and lists it under Payments on the admin index and in the navigation sidebar."""

    template = "admin/payments/resilience.html"
    action_template = "admin/payments/resilience_action.html"

    def __init__(self, site: admin.AdminSite) -> None:
        self.site = site

    def get_urls(self):
        wrap = self.site.admin_view
        return [
            path("payments/resilience/", wrap(self.page_view), name="payments_resilience"),
            path(
                "payments/resilience/<str:group>/<str:action>/",
                wrap(self.action_view),
                name="payments_resilience_action",
            ),
        ]

    # --- permissions -------------------------------------------------------------------------

    @staticmethod
    def has_view_permission(request) -> bool:
        return request.user.has_perm(RESILIENCE_VIEW_PERMISSION)

    @staticmethod
    def has_operate_permission(request) -> bool:
        return request.user.has_perm(BREAKER_PERMISSION)

    # --- the admin index and sidebar ----------------------------------------------------------

    def add_to_app_list(self, request, app_list: list[dict]) -> list[dict]:
        """Add "Acquirer resilience" to the payments app of ``app_list`` (when it is there)."""
        if not self.has_view_permission(request):
            return app_list
        for app in app_list:
            if app.get("app_label") != "payments":
                continue
            if not any(m.get("object_name") == "Resilience" for m in app["models"]):
                app["models"].append(
                    {
                        "model": None,
                        "name": "Acquirer resilience",
                        "object_name": "Resilience",
                        "perms": {"view": True},
                        "admin_url": reverse(
                            "admin:payments_resilience", current_app=self.site.name
                        ),
                        "add_url": None,
                        "view_only": True,
                    }
                )
                app["models"].sort(key=lambda m: m["name"])
        return app_list

    # --- views -------------------------------------------------------------------------------

    def _context(self, request, title: str, **extra) -> dict[str, Any]:
        return {
            **self.site.each_context(request),
            "title": title,
            "app_label": "payments",
            "resilience_url": reverse("admin:payments_resilience", current_app=self.site.name),
            **extra,
        }

    def page_view(self, request: HttpRequest) -> HttpResponse:
        """The page: breakers, rate gate, retry budget, AIMD limit, recent actions."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        client = _client_or_none()
        state = resilience_state(client) if client is not None else None
        can_operate = self.has_operate_permission(request)
        if state is not None and can_operate:
            for row in state["breakers"]:
                row["actions"] = [
                    (
                        action.label,
                        reverse(
                            "admin:payments_resilience_action",
                            args=[row["group"], name],
                            current_app=self.site.name,
                        ),
                    )
                    for name, action in BREAKER_ACTIONS.items()
                ]
        context = self._context(
            request,
            "Acquirer resilience",
            state=state,
            can_operate=can_operate,
            memory_store_warning=MEMORY_STORE_WARNING,
            fallback_store_warning=FALLBACK_STORE_WARNING,
            history=_breaker_history(),
        )
        return TemplateResponse(request, self.template, context)

    def action_view(self, request: HttpRequest, group: str, action: str) -> HttpResponse:
        """Force open / disable / reset one group: a page with a required note, then the
        breaker call (with the operator and note) and an admin-history row."""
        if not self.has_operate_permission(request):
            raise PermissionDenied
        chosen = BREAKER_ACTIONS.get(action)
        client = _client_or_none()
        if chosen is None or client is None or group not in client.breakers:
            raise Http404("No such breaker action.")
        form = NoteForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            note = form.cleaned_data["note"]
            actor = request.user.get_username()
            act = getattr(client.breakers, chosen.method)
            before = client.breakers[group].snapshot()
            after = act(group, actor=actor, reason=note)
            summary = (
                f"{chosen.label} circuit breaker {client.config.name}/{group}: "
                f"{before.state} -> {after.state} (generation {after.generation}, store "
                f"{after.store})"
            )
            try:
                _audit(request, client, group, f"{summary}. Note: {note}")
            except DatabaseError:
                logger.exception("the breaker action could not be written to the admin history")
                messages.error(
                    request,
                    f"{summary}. Applied, but NOT recorded in the admin history (database "
                    "error); the gateway_client.breaker log has your name and note.",
                )
            else:
                level = messages.SUCCESS if after.store == "redis" else messages.WARNING
                scope = (
                    "every process sharing the state store"
                    if after.store == "redis"
                    else "THIS PROCESS ONLY (no shared state store)"
                )
                messages.add_message(request, level, f"{summary}; applies to {scope}.")
            return HttpResponseRedirect(
                reverse("admin:payments_resilience", current_app=self.site.name)
            )
        snapshot = _read("circuit breaker", [], client.breakers[group].snapshot)
        context = self._context(
            request,
            f"{chosen.label} the {group} circuit breaker",
            form=form,
            group=group,
            action=chosen,
            snapshot=snapshot,
            memory_store_warning=MEMORY_STORE_WARNING
            if snapshot is not None and snapshot.store == "memory"
            else "",
            fallback_store_warning=FALLBACK_STORE_WARNING
            if snapshot is not None and snapshot.store == "fallback"
            else "",
        )
        return TemplateResponse(request, self.action_template, context)


def _audit_content_type() -> ContentType:
    app_label, model = BREAKER_AUDIT_CONTENT_TYPE
    content_type, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
    return content_type


def _audit(request, client, group: str, message: str) -> LogEntry:
    """One admin-history row: who (the user), when (now), why (the note, in the message)."""
    return LogEntry.objects.create(
        user_id=request.user.pk,
        content_type=_audit_content_type(),
        object_id=group,
        object_repr=f"circuit breaker {client.config.name}/{group}"[:200],
        action_flag=CHANGE,
        change_message=message,
    )


def _breaker_history() -> list[LogEntry]:
    app_label, model = BREAKER_AUDIT_CONTENT_TYPE
    try:
        return list(
            LogEntry.objects.filter(content_type__app_label=app_label, content_type__model=model)
            .select_related("user")
            .order_by("-action_time", "-id")[:RESILIENCE_HISTORY_LIMIT]
        )
    except DatabaseError:
        logger.exception("reading the breaker actions' history failed")
        return []


def install_resilience_page(site) -> ResilienceAdmin:
    """Serve the resilience page from ``site`` and list it under Payments (idempotent).

    An ``AdminSite`` has no registry for views without a model, so this wraps the site's
    ``get_urls`` (the page's routes first) and ``get_app_list`` (one more entry in the payments
    app: the index, the app index and the sidebar). A template override of ``admin/index.html``
    would not work here: ``django.contrib.admin`` precedes ``payments`` in INSTALLED_APPS, so
    the admin's own template wins.
    """
    existing = getattr(site, "_payments_resilience", None)
    if existing is not None:
        return existing
    page = ResilienceAdmin(site)
    site_get_urls, site_get_app_list = site.get_urls, site.get_app_list

    def get_urls():
        return [*page.get_urls(), *site_get_urls()]

    def get_app_list(request, app_label=None):
        return page.add_to_app_list(request, site_get_app_list(request, app_label))

    site.get_urls = get_urls
    site.get_app_list = get_app_list
    site._payments_resilience = page
    return page


RESILIENCE_PAGE = install_resilience_page(admin.site)
