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
    """docs/reference/money.md: the exponent decides the decimals; never through a float."""
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


@pytest.mark.parametrize(
    ("key", "refused"),
    [
        ("4242424242424242", True),
        ("3782-822463-10005", True),
        ("4111 1111 1111 1111", True),
        ("4242424242424241", False),  # fails the Luhn check
        ("1234567890123456789012", False),  # too long
        ("0f1234567890123456abcdef12345678", False),  # a UUID's hex with a long digit run
        ("550e8400-e29b-41d4-a716-446655440000", False),
        ("order-4242424242424242", False),
    ],
)
def test_idempotency_key_refused_only_when_it_is_a_card_number(key, refused):
    """A key that is, as a whole, a Luhn-valid 13-19 digit number is refused; digit runs inside
    other keys are not (about 1 in 20 random UUID hex strings holds 13 digits in a row)."""
    from payments.card_data import is_card_number

    assert is_card_number(key) is refused
