"""Finding card numbers (PANs) in free text: plain Python, no framework.

PLACEHOLDER: this minimal version exists so the logging branch can call the API; the card-data
branch replaces this whole package with the full detector (every separator people and programs
put between digit groups, every Unicode digit form). Keep the API below unchanged.

A card number here is a run of 13-19 ASCII digits, with up to two spaces, dashes or dots
between digits, not part of a longer digit run, that passes the Luhn check (ISO/IEC 7812-1)
unless ``require_luhn`` is False.
"""

from __future__ import annotations

import re

__all__ = ["contains_card_number", "find_card_numbers", "redact_card_numbers"]

#: 13-19 digits, up to two separators (space, dash, dot) between digits, not inside a longer
#: digit run.
_CANDIDATE = re.compile(r"(?<![0-9])[0-9](?:[ .\-]{0,2}[0-9]){12,18}(?![0-9])")

REPLACEMENT = "[card number redacted]"


def _luhn_valid(digits: str) -> bool:
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _spans(text: str, *, require_luhn: bool) -> list[tuple[int, int]]:
    spans = []
    for match in _CANDIDATE.finditer(text):
        digits = re.sub(r"[^0-9]", "", match.group())
        if not require_luhn or _luhn_valid(digits):
            spans.append(match.span())
    return spans


def find_card_numbers(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` character offsets of each Luhn-valid card number in ``text``, in
    order, not overlapping."""
    return _spans(text, require_luhn=True)


def contains_card_number(text: str) -> bool:
    """True when ``text`` holds a Luhn-valid card number (:func:`find_card_numbers`)."""
    return bool(find_card_numbers(text))


def redact_card_numbers(
    text: str, *, replacement: str = REPLACEMENT, require_luhn: bool = True
) -> str:
    """``text`` with each card number replaced by ``replacement``. With ``require_luhn``
    False, every 13-19 digit run counts (what logs use: a mistyped PAN is still a PAN)."""
    pieces, last = [], 0
    for start, end in _spans(text, require_luhn=require_luhn):
        pieces += [text[last:start], replacement]
        last = end
    return "".join([*pieces, text[last:]])
