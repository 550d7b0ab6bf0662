"""Minor units, ISO 4217 exponents and the card-number detector (no database)."""

from __future__ import annotations

import pytest

from payments.card_data import card_data_fields, looks_like_card_number
from payments.money import CURRENCY_EXPONENTS, format_minor_units


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [(1999, "EUR", "19.99"), (500, "JPY", "500"), (1234, "KWD", "1.234"), (1, "BHD", "0.001"),
     (99_999_999_999, "USD", "999999999.99"), (5, "SEK", "0.05")],
)  # fmt: skip
def test_format_minor_units(amount, currency, text):
    """REFERENCE section 6: the exponent decides the decimals; never through a float."""
    assert format_minor_units(amount, currency) == text


def test_required_currencies_and_exponents():
    """EUR, USD, GBP, CHF, SEK have 2 decimals; JPY 0; KWD and BHD 3."""
    codes = ["EUR", "USD", "GBP", "CHF", "SEK", "JPY", "KWD", "BHD"]
    assert {c: CURRENCY_EXPONENTS[c] for c in codes} == {
        "EUR": 2, "USD": 2, "GBP": 2, "CHF": 2, "SEK": 2, "JPY": 0, "KWD": 3, "BHD": 3,
    }  # fmt: skip


@pytest.mark.parametrize(
    "text",
    ["4242424242424242", "4242 4242 4242 4242", "4242-4242-4242-4242", "378282246310005",
     "x6011111111111117y", "4000056655665556123", "1234567890123"],
)  # fmt: skip
def test_card_like_runs(text):
    """13-19 digits, single spaces or dashes between them."""
    assert looks_like_card_number(text)


@pytest.mark.parametrize(
    "text",
    ["123456789012", "12345678901234567890", "4242  4242  4242  4242", "order-2026-11-29",
     "tok_visa",
     "4242--4242--4242--4242"],
)  # fmt: skip
def test_not_card_like(text):
    """12 digits, 20 digits, double separators and dates are not card numbers."""
    assert not looks_like_card_number(text)


def test_card_data_fields_reports_paths_and_redacts_keys():
    """Paths of offending values; a card-like key is reported redacted."""
    data = {
        "a": {"b": ["x", "4242424242424242"]},
        "4242424242424242": 1,
        "n": 4242424242424242,
        "ok": "1",
    }
    assert card_data_fields(data) == ["[redacted]", "a.b[1]", "n"]
