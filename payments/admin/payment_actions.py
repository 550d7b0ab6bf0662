"""The operator's actions on one payment, as admin views: "Reconcile now", "Resolve as ..."
after a manual check, and "Refund", each from a page that asks for a note
(:mod:`payments.admin.operator_actions` does the work).
"""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from payments.acquirer.selectors import acquirer_client_or_none
from payments.admin.display import (
    BULK_RECONCILE_LIMIT,
    RECONCILE_EXPLANATIONS,
    REFUND_EXPLANATION,
    fmt_amount,
)
from payments.admin.forms import NoteForm, RefundForm, ResolveForm
from payments.admin.operator_actions import (
    RECONCILABLE_STATUSES,
    RESOLUTIONS,
    OperationRefused,
    admin_refund_form_token,
    clean_note,
    payment_reconcile_request,
    payment_resolve,
)
from payments.core.answers import Answered, Replayed, Unavailable
from payments.core.operation_states import OperationConflict, refundable_amount
from payments.models import (
    OperationStatus,
    Payment,
    PaymentOperation,
    PaymentStatus,
)
from payments.operations.flows import refund_create


class PaymentActionsMixin:
    """The operator's action pages of :class:`~payments.admin.payment.PaymentAdmin`:
    reconcile, resolve, refund, and the bulk "Reconcile now". ``clock``: the time the refund
    form is signed and checked with (tests replace it)."""

    clock = staticmethod(timezone.now)

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
                    request, f"Payment {payment.pk} resolved as {to_status}.", messages.SUCCESS
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

    def refund_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """ "Refund" for one ``succeeded`` payment: amount (default what remains refundable),
        reason and a required note, then ``refund_create`` (the API's service) for the
        payment's merchant under the form's one-time key, the operator and note recorded by it
        as an ``operator_refund_requested`` event; every outcome becomes a message."""
        payment = self._payment_or_404(request, object_id)
        if not self.has_refund_permission(request):
            raise PermissionDenied
        now = self.clock()
        form = RefundForm(
            request.POST or None,
            initial={"idempotency_key": admin_refund_form_token(now=now)},
            currency=payment.currency,
            refundable=max(0, refundable_amount(payment)),
            now=now,
        )
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            client = acquirer_client_or_none()
            try:
                operator = request.user.get_username()
                note = clean_note(operator=operator, note=data["note"])
                if client is None:
                    raise OperationRefused(  # noqa: TRY301 - one handler turns refusals into messages
                        "The acquirer client cannot be built (see the logs); nothing was sent."
                    )
                result = refund_create(
                    merchant=payment.merchant,
                    payment_id=payment.pk,
                    idempotency_key=data["idempotency_key"],
                    amount=data["amount"],
                    reason=data["reason"],
                    client=client,
                    audit={"operator": operator, "note": note, "how": "admin"},
                )
            except OperationRefused as exc:
                form.add_error(None, str(exc))
            except OperationConflict as exc:
                self.message_user(
                    request, f"Not refunded ({exc.code}): {exc.detail}", messages.ERROR
                )
                return HttpResponseRedirect(self._change_url(payment))
            except IdempotencyKeyInUse:
                self.message_user(
                    request,
                    "This refund form was already submitted and its refund is still being "
                    "sent; nothing more was refunded. Its outcome appears below.",
                    messages.WARNING,
                )
                return HttpResponseRedirect(self._change_url(payment))
            except IdempotencyKeyReused:
                self.message_user(
                    request,
                    "This refund form was already submitted with other values; nothing more "
                    "was refunded. Open the refund page again for another refund.",
                    messages.ERROR,
                )
                return HttpResponseRedirect(self._change_url(payment))
            else:
                level, text = _refund_message(payment, result)
                if not isinstance(result, Replayed):
                    self.log_change(request, payment, "Refund: " + data["note"])
                self.message_user(request, text, level)
                return HttpResponseRedirect(self._change_url(payment))
        if payment.status != PaymentStatus.SUCCEEDED and request.method == "GET":
            self.message_user(
                request,
                f"Only a succeeded payment can be refunded; {payment.pk} is {payment.status}.",
                messages.ERROR,
            )
            return HttpResponseRedirect(self._change_url(payment))
        return self._render_action(
            request,
            title=f"Refund {payment.pk}",
            form=form,
            payments=[payment],
            explanation=REFUND_EXPLANATION,
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


def _refund_message(payment: Payment, result: Answered | Unavailable | Replayed) -> tuple[int, str]:
    """The admin message (level, text) for the outcome of an admin refund: the API's 201
    succeeded / failed, 202 pending, 502 refused, 503 unavailable, or a replay (the form was
    already submitted)."""
    if isinstance(result, Unavailable):
        wait = f" (the acquirer asks to wait {result.retry_after} s)" if result.retry_after else ""
        return messages.ERROR, (
            "The acquirer could not be reached: the refund was not sent and nothing was "
            f"refunded{wait}. Try again later."
        )
    record = result.record if isinstance(result, Replayed) else None
    if record is not None:
        operation = PaymentOperation.objects.filter(idempotency_key=record).first()
        shown = f"refund {operation.id} is {operation.status}" if operation else "its refund"
        return messages.WARNING, (
            f"This refund form was already submitted ({shown}); nothing more was refunded."
        )
    body = json.loads(result.response.body)
    refund_id = body.get("id") or body.get("refund_id", "")
    operation = PaymentOperation.objects.filter(pk=refund_id).first()
    amount = fmt_amount(operation.amount, payment.currency) if operation else ""
    status_code = result.response.status_code
    if status_code == 202:
        return messages.WARNING, (
            f"Refund {refund_id} of {amount} was sent, but the acquirer's answer is not known "
            "yet: it is pending, and reconciliation resolves it (it may already be applied). "
            "Do not refund again; its outcome appears below."
        )
    if status_code == 502:
        return messages.ERROR, (
            f"The acquirer refused refund {refund_id}; it was not applied and nothing was refunded."
        )
    if operation is not None and operation.status == OperationStatus.FAILED:
        return messages.ERROR, (
            f"The acquirer declined refund {refund_id} of {amount} "
            f"({operation.failure_code or 'no code'}); nothing was refunded."
        )
    reference = operation.acquirer_reference if operation else ""
    return messages.SUCCESS, (
        f"Refund {refund_id} of {amount} succeeded at the acquirer (reference {reference})."
    )
