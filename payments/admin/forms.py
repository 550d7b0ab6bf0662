"""The forms of the console's action pages: every action asks for a note.

:class:`NoteForm` for "Reconcile now" (one payment or a bulk selection) and for the resilience
page's breaker actions; :class:`ResolveForm` for "Resolve as ..." after a manual check at the
acquirer; :class:`RefundForm` for "Refund" (amount, reason, note, and the form's one-time
idempotency key). The note is stored with the operator (in the payment's events, or in the
admin history and the breaker's log).
"""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.conf import settings

from console.forms import CardDataRefusingFormMixin
from payments.admin.operator_actions import (
    NOTE_MAX_LENGTH,
    OperationRefused,
    admin_refund_form_key,
)
from payments.core.money import format_minor_units, parse_major_units
from payments.models import RefundReason

__all__ = ["NoteForm", "RefundForm", "ResolveForm"]


class NoteForm(CardDataRefusingFormMixin, forms.Form):
    """Every action asks why: a required note (stripped, at most ``NOTE_MAX_LENGTH`` characters),
    stored with the operator in the payment's events or the breaker's admin history. A card
    number in any field of this form or a subclass is refused, never echoed
    (:class:`~console.forms.CardDataRefusingFormMixin`)."""

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


class RefundForm(NoteForm):
    """A refund from the admin: ``amount`` typed in major units of the payment's ``currency``
    (``cleaned_data["amount"]`` is minor units; default, and initial value, ``refundable``
    minor units), an optional reason, the required note, and ``idempotency_key``: the one-time
    key rendered with the page, signed with its time (a double submit sends the same key, so
    it cannot refund twice; after ``ADMIN_REFUND_FORM_SECONDS`` the form is refused, before its
    key can be purged). ``now``: the clock of the submission."""

    field_order = ["amount", "reason", "note"]

    amount = forms.CharField(max_length=20)
    reason = forms.ChoiceField(required=False, choices=[("", "(none)"), *RefundReason.choices])
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=200)

    def __init__(self, *args, currency: str, refundable: int, now: datetime, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.currency = currency
        self.now = now
        self.fields["amount"].initial = format_minor_units(refundable, currency)
        self.fields["amount"].label = f"Amount ({currency})"
        self.fields["amount"].help_text = (
            f"In {currency}, e.g. {format_minor_units(refundable, currency)} (what remains "
            "refundable: the captured amount minus every refund that has not failed)."
        )

    def clean_amount(self) -> int:
        try:
            amount = parse_major_units(self.cleaned_data["amount"], self.currency)
        except ValueError as exc:
            raise forms.ValidationError(f"Not an amount in {self.currency}: {exc}.") from exc
        if amount <= 0:
            raise forms.ValidationError("The amount must be more than 0.")
        return amount

    def clean_reason(self) -> str | None:
        return self.cleaned_data["reason"] or None

    def clean_idempotency_key(self) -> str:
        """The merchant idempotency key the signed value carries; refused when altered or
        older than ``ADMIN_REFUND_FORM_SECONDS``."""
        try:
            return admin_refund_form_key(
                self.cleaned_data["idempotency_key"],
                now=self.now,
                max_age=settings.ADMIN_REFUND_FORM_SECONDS,
            )
        except OperationRefused as refused:
            raise forms.ValidationError(str(refused)) from None
