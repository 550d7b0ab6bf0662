"""Form pieces shared by the admin pages: refusing card data in what operators type.

:class:`CardDataRefusingFormMixin` checks every submitted field of a form with the project's one
card-number detector (``card_data``) after the usual cleaning. A field holding a card number
gets one error, :data:`CARD_DATA_MESSAGE` (its other errors are dropped: Django's own messages
may quote the value, a choice field's do), and its submitted value is blanked so the re-rendered
form does not show it again.
"""

from __future__ import annotations

from django import forms

from card_data import contains_card_number

__all__ = ["CARD_DATA_MESSAGE", "CardDataRefusingFormMixin"]

#: The error of a field holding a card number (it never repeats the value).
CARD_DATA_MESSAGE = "Card numbers are not accepted here; the value was removed, not kept."


class CardDataRefusingFormMixin:
    """Put before ``forms.Form`` or ``forms.ModelForm`` in the bases: a bound form whose fields
    hold a card number is invalid, with :data:`CARD_DATA_MESSAGE` on each such field (code
    ``card_data_not_accepted``) and the submitted value removed from ``form.data``."""

    def full_clean(self) -> None:
        super().full_clean()
        if not self.is_bound:
            return
        getlist = getattr(self.data, "getlist", None)

        def submitted(name: str) -> list[object]:
            key = self.add_prefix(name)
            return getlist(key) if getlist is not None else [self.data.get(key)]

        refused = [
            name
            for name in self.fields
            if any(isinstance(v, str) and contains_card_number(v) for v in submitted(name))
        ]
        if not refused:
            return
        data = self.data.copy()
        for name in refused:
            data[self.add_prefix(name)] = ""
            self._errors.pop(name, None)
            self.add_error(
                name, forms.ValidationError(CARD_DATA_MESSAGE, code="card_data_not_accepted")
            )
        self.data = data
