"""Refusing card data: this service accepts payment method tokens only.

A body in which any value (or key) holds a card number is refused before anything is stored or
logged (PCI DSS scope stays with the token vault); so are an ``Idempotency-Key`` and query
parameters holding one. What a card number is (a Luhn-valid 13-19 digit run of a real
issuer range, any separators and invisible characters, any Unicode digits, percent-encoded or
JSON-escaped) is decided by the framework-free
``card_data`` package, the one detector of the project (``docs/card-data.md``). The refusal
(:func:`card_data_refusal`, the one builder of it) names the field but never repeats its value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from card_data import contains_card_number, find_card_numbers
from payments.api.problems import Problem

REDACTED = "[redacted]"

#: The refusal's detail for a body (PaymentCreateInputSerializer), the key header and a query.
BODY_REFUSAL = "Card numbers are not accepted. Tokenise the card and send payment_method."
KEY_REFUSAL = "Card numbers are not accepted, in the Idempotency-Key header either."
QUERY_REFUSAL = "Card numbers are not accepted, in query parameters either."


def looks_like_card_number(text: str) -> bool:
    """True when ``text`` contains a card number anywhere (``card_data.contains_card_number``:
    a Luhn-valid run of 13-19 digits, separators and Unicode digit forms allowed)."""
    return contains_card_number(text)


def is_card_number(text: str) -> bool:
    """True when ``text`` as a whole (leading and trailing spaces aside) is one card number,
    as ``card_data`` reads it (``"4111 1111 1111 1111"``, not ``"order-4111111111111111"``)."""
    stripped = text.strip()
    return bool(stripped) and find_card_numbers(stripped) == [(0, len(stripped))]


def card_data_fields(data: Any) -> list[str]:
    """Return the dotted paths of the fields of a parsed JSON value that look like card data.

    Strings, integers and floats (by their decimal form) are checked; keys are checked too, and
    a key that holds card data is reported as ``[redacted]``. Iterative, so any depth is safe.
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
            isinstance(value, (str, int, float))
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


def query_card_data_fields(query: Mapping[str, Any]) -> list[str]:
    """The names of the query parameters of ``query`` (a Django ``QueryDict``, or any mapping of
    a name to a value or a list of values) whose name or any value holds card data; a name that
    does is reported as ``[redacted]``."""
    found: set[str] = set()
    getlist = getattr(query, "getlist", None)
    for name in query:
        values = getlist(name) if getlist is not None else query[name]
        values = values if isinstance(values, (list, tuple)) else [values]
        if contains_card_number(str(name)):
            found.add(REDACTED)
        elif any(contains_card_number(str(value)) for value in values):
            found.add(str(name))
    return sorted(found)
