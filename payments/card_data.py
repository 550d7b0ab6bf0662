"""Refusing card data: this service accepts payment method tokens only.

A body in which any value (or key) holds a run of 13 to 19 digits, optionally separated by
single spaces or dashes, is refused before anything is stored or logged (PCI DSS scope stays
with the token vault). The refusal (:func:`card_data_refusal`, the one builder of it) names the
field but never repeats its value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import card_data
from payments.problems import Problem

#: 13-19 digits, single spaces or dashes allowed between digits, not part of a longer digit run.
CARD_NUMBER_PATTERN = re.compile(r"(?<!\d)\d(?:[ -]?\d){12,18}(?!\d)")

REDACTED = "[redacted]"

#: The refusal's detail for a body (PaymentCreateInputSerializer) and for the key header.
BODY_REFUSAL = "Card numbers are not accepted. Tokenise the card and send payment_method."
KEY_REFUSAL = "Card numbers are not accepted, in the Idempotency-Key header either."


def looks_like_card_number(text: str) -> bool:
    """True when ``text`` contains a run of 13-19 digits (spaces or dashes allowed between)."""
    return CARD_NUMBER_PATTERN.search(text) is not None


def is_card_number(text: str) -> bool:
    """True when ``text`` as a whole is a card number: 13-19 digits once spaces and dashes are
    removed, passing the Luhn check (ISO/IEC 7812-1). Used for the Idempotency-Key header, where
    a digit run inside a longer key (a UUID's hex) is common and harmless, but a key that IS a
    card number must never be stored."""
    digits = text.replace(" ", "").replace("-", "")
    if not (13 <= len(digits) <= 19 and digits.isascii() and digits.isdigit()):
        return False
    return card_data.contains_card_number(digits)


def card_data_fields(data: Any) -> list[str]:
    """Return the dotted paths of the fields of a parsed JSON value that look like card data.

    Integers are checked by their decimal form; keys are checked too, and a key that looks like
    card data is reported as ``[redacted]``. Iterative, so any depth is safe.
    """
    found: list[str] = []
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                name = REDACTED if looks_like_card_number(str(key)) else str(key)
                if name == REDACTED:
                    found.append(f"{path}.{name}" if path else name)
                stack.append((f"{path}.{name}" if path else name, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif (
            isinstance(value, (str, int))
            and not isinstance(value, bool)
            and looks_like_card_number(str(value))
        ):
            found.append(path)
    return sorted(set(found))


def card_data_refusal(fields: Iterable[str], *, detail: str = BODY_REFUSAL) -> Problem:
    """The 400 problem ``card_data_not_accepted`` naming each of ``fields`` (dotted paths, or
    ``Idempotency-Key``), never their values. Raise it before anything is stored or logged."""
    return Problem(
        detail,
        code="card_data_not_accepted",
        title="Card data is not accepted",
        errors=[
            {
                "field": name,
                "code": "card_data_not_accepted",
                "message": "Looks like a card number.",
            }
            for name in fields
        ],
    )
