"""ISO 4217 currencies and amounts in minor units.

Amounts are integers in the minor unit of their currency: 1999 EUR is 19.99, 500 JPY is 500,
1234 KWD is 1.234. Never a float (``int(19.99 * 100)`` is 1998); ``Decimal`` only for display.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

#: ISO 4217 alphabetic code -> exponent (number of digits after the decimal separator).
CURRENCY_EXPONENTS: dict[str, int] = {
    "AUD": 2,
    "BHD": 3,
    "CAD": 2,
    "CHF": 2,
    "CZK": 2,
    "DKK": 2,
    "EUR": 2,
    "GBP": 2,
    "HKD": 2,
    "HUF": 2,
    "ISK": 0,
    "JOD": 3,
    "JPY": 0,
    "KRW": 0,
    "KWD": 3,
    "NOK": 2,
    "NZD": 2,
    "OMR": 3,
    "PLN": 2,
    "SEK": 2,
    "SGD": 2,
    "TND": 3,
    "USD": 2,
}

#: Smallest and largest accepted amount, in minor units.
MIN_AMOUNT = 1
MAX_AMOUNT = 99_999_999_999


def currency_exponent(currency: str) -> int:
    """Return the ISO 4217 exponent of ``currency``. Raises ``KeyError`` for an unknown code."""
    return CURRENCY_EXPONENTS[currency]


def format_minor_units(amount: int, currency: str) -> str:
    """Format ``amount`` minor units for display.

    (1999, "EUR") -> "19.99", (500, "JPY") -> "500", (1234, "KWD") -> "1.234".

    Raises ``KeyError`` for an unknown currency.
    """
    exponent = currency_exponent(currency)
    return f"{Decimal(amount).scaleb(-exponent):.{exponent}f}"


def parse_major_units(text: str, currency: str) -> int:
    """Parse an amount typed in major units of ``currency`` into minor units, exactly.

    ("19.99", "EUR") -> 1999, ("500", "JPY") -> 500, ("1.234", "KWD") -> 1234, ("20", "EUR")
    -> 2000. Plain decimal digits with at most the currency's exponent of fraction digits
    (ISO 4217); no sign, exponent, grouping or float rounding. Raises ``ValueError`` for
    anything else and ``KeyError`` for an unknown currency.
    """
    exponent = currency_exponent(currency)
    text = text.strip()
    whole, _, fraction = text.partition(".")
    if not whole.isascii() or not whole.isdigit() or (fraction and not fraction.isdigit()):
        raise ValueError("not a plain decimal amount")
    if not fraction.isascii() or len(fraction) > exponent or (_ and not fraction):
        raise ValueError(f"at most {exponent} digits after the decimal point")
    try:
        value = Decimal(text).scaleb(exponent)
    except InvalidOperation as exc:  # pragma: no cover - the checks above exclude it
        raise ValueError("not a decimal amount") from exc
    return int(value)
