"""The forms of the console's action pages: every action asks for a note.

:class:`NoteForm` for "Reconcile now" (one payment or a bulk selection) and for the resilience
page's breaker actions; :class:`ResolveForm` for "Resolve as ..." after a manual check at the
acquirer. The note is stored with the operator (in the payment's events, or in the admin history
and the breaker's log).
"""

from __future__ import annotations

from django import forms

from payments.operations import NOTE_MAX_LENGTH

__all__ = ["NoteForm", "ResolveForm"]


class NoteForm(forms.Form):
    """Every action asks why: a required note (stripped, at most ``NOTE_MAX_LENGTH`` characters),
    stored with the operator in the payment's events or the breaker's admin history."""

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
