"""Card numbers (primary account numbers, PANs) in free text: find them, test for them, redact them.

Framework-free (standard library only), so every part of the project uses the same detector:
the API's refusal of card data (``payments.api.card_data``), the admin forms, merchant names and the
log redaction. The rules, the separators and the known false positives are documented in
``docs/card-data.md``; in short, a card number is a Luhn-valid (ISO/IEC 7812-1) run of 13 to 19
digits not starting with 0, in any Unicode decimal digit form (also after NFKC normalisation,
percent-encoding or a JSON ``\\uXXXX`` escape), with separators between digit groups.

Public API::

    find_card_numbers(text) -> list[tuple[int, int]]   # [start, end) spans in text
    contains_card_number(text) -> bool
    redact_card_numbers(text, *, replacement="[card number redacted]", require_luhn=True) -> str

Every function runs in time linear in ``len(text)`` (no backtracking regular expression).
"""

from __future__ import annotations

from card_data.detector import (
    MAX_GAP,
    MAX_LENGTH,
    MIN_LENGTH,
    REDACTED_CARD_NUMBER,
    contains_card_number,
    find_card_numbers,
    luhn_valid,
    redact_card_numbers,
)

__all__ = [
    "MAX_GAP",
    "MAX_LENGTH",
    "MIN_LENGTH",
    "REDACTED_CARD_NUMBER",
    "contains_card_number",
    "find_card_numbers",
    "luhn_valid",
    "redact_card_numbers",
]
