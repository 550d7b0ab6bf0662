"""Card numbers (primary account numbers, PANs) in free text: find them, test for them, redact them.

Framework-free (standard library only), so every part of the project uses the same detector:
the API's refusal of card data (``payments.api.card_data``), the admin forms, merchant names and the
log redaction. The rules, the separators and the known false positives are documented in
``docs/card-data.md``; in short, a card number is a run of 13 to 19 digits that passes the Luhn
check and starts with a card network's issuer identification number at one of its lengths
(ISO/IEC 7812-1), in any Unicode digit form (UAX #44 digit values, also after NFKC
normalisation, percent-encoding or a JSON ``\\uXXXX`` escape), with separators between digit
groups and invisible characters and combining marks anywhere; also zero-padded to 19 digits
(ISO 8583) or glued to a 3-4 digit security code or expiry date. Valid IBANs (ISO 13616: a
registry country, its length, its check digits), UUIDs and hex ids are set aside.

Public API::

    find_card_numbers(text) -> list[tuple[int, int]]   # [start, end) spans in text
    contains_card_number(text) -> bool
    redact_card_numbers(text, *, replacement="[card number redacted]", require_luhn=True) -> str
    luhn_valid(digits) -> bool       # ISO/IEC 7812-1 annex B
    issuer_allows(digits) -> bool    # a network's IIN at one of its lengths
    iban_valid(text) -> bool         # ISO 13616: registry country, length, check digits

Every function runs in time linear in ``len(text)`` (no backtracking regular expression).
"""

from __future__ import annotations

from card_data.detector import (
    IBAN_LENGTHS,
    ISSUER_RANGES,
    MAX_GAP,
    MAX_LENGTH,
    MIN_LENGTH,
    REDACTED_CARD_NUMBER,
    contains_card_number,
    find_card_numbers,
    iban_valid,
    issuer_allows,
    luhn_valid,
    redact_card_numbers,
)

__all__ = [
    "IBAN_LENGTHS",
    "ISSUER_RANGES",
    "MAX_GAP",
    "MAX_LENGTH",
    "MIN_LENGTH",
    "REDACTED_CARD_NUMBER",
    "contains_card_number",
    "find_card_numbers",
    "iban_valid",
    "issuer_allows",
    "luhn_valid",
    "redact_card_numbers",
]
