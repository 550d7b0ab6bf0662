"""Minor units and ISO 4217 exponents (no database; the card-number detector is tested in
test_card_data.py)."""

from __future__ import annotations

import pytest

from payments.core.money import CURRENCY_EXPONENTS, format_minor_units


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [(1999, "EUR", "19.99"), (500, "JPY", "500"), (1234, "KWD", "1.234"), (1, "BHD", "0.001"),
     (99_999_999_999, "USD", "999999999.99"), (5, "SEK", "0.05")],
)  # fmt: skip
def test_format_minor_units(amount, currency, text):
    """docs/reference/money.md: the exponent decides the decimals; never through a float."""
    assert format_minor_units(amount, currency) == text


def test_required_currencies_and_exponents():
    """EUR, USD, GBP, CHF, SEK have 2 decimals; JPY 0; KWD and BHD 3."""
    codes = ["EUR", "USD", "GBP", "CHF", "SEK", "JPY", "KWD", "BHD"]
    assert {c: CURRENCY_EXPONENTS[c] for c in codes} == {
        "EUR": 2, "USD": 2, "GBP": 2, "CHF": 2, "SEK": 2, "JPY": 0, "KWD": 3, "BHD": 3,
    }  # fmt: skip
