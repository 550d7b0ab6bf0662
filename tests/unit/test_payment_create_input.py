"""The plain validator of ``POST /payments`` (``payments.api.serializers.payment_create_input``,
ADR 0029) against ``PaymentCreateInputSerializer``, on a generated corpus of bodies: valid
ones and hostile ones (wrong types, bools for ints, huge ints, floats, unicode, NUL, extra
and nested fields, card numbers anywhere, unknown currencies and capture methods). For every
body the plain validator accepts exactly when the serializer does, with equal validated data
(values and their types). Deterministic: the random part has a fixed seed."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from payments.api.problems import Problem
from payments.api.serializers import (
    CREATE_FIELDS,
    CREATE_MAX_LENGTHS,
    CREATE_REQUIRED_FIELDS,
    PaymentCreateInputSerializer,
    payment_create_input,
)
from payments.core.money import CURRENCY_EXPONENTS, MAX_AMOUNT, MIN_AMOUNT

CARD = "4242424242424242"
VALID: dict[str, Any] = {
    "amount": 1999,
    "currency": "EUR",
    "payment_method": "tok_visa",
    "reference": "order-1",
    "description": "A blue teapot",
    "capture_method": "manual",
    "allow_deferred": True,
    "return_url": "http://127.0.0.1:8123/orders/1/return",  # a local page: the test settings
}

#: Values that are never valid for any field, or valid for one and not another.
SHAPES: list[Any] = [
    None, True, False, 0, 1, -1, 1999, 2**63, 10**30, -(10**30), 1.0, 1999.0, 0.5, 1e308,
    -0.0, "", " ", "1999", "true", [], [1999], ["EUR"], {}, {"amount": 1999}, [[[]]],
    {"nested": {"deeper": [1, 2, {"x": CARD}]}},
]  # fmt: skip
TEXT: list[str] = [
    "EUR", "eur", "EURO", "EU", "JPY", "KWD", "XXX", "€UR", "E\x00R", "EUR\n", " EUR", "EUR ",
    "tok_visa", "tok_", "tok_" + "a" * 64, "tok_" + "a" * 65, "tok_visa\n", "tok_vi sa",
    "tok_ü", "tok_decline", "TOK_visa", "tok_" + CARD, "tok_4111_1111_1111_1111", CARD,
    "4242 4242 4242 4242", "4242-4242-4242-4242", "order-" + CARD, "١٢٣٤٥٦٧٨٩٠١٢٣٤٥٦",
    "order-1", "x" * 16, "x" * 17, "x" * 128, "x" * 129, "x" * 255, "x" * 256, "x" * 1000,
    "\u200b", "a\u200bb", "ü", "日本語の説明", "\U0001f600", "\ud800", "a\tb", "a\nb",
    "\x00", "automatic", "manual", "Manual", "AUTOMATIC", "manual ", "deferred",
    "<script>alert(1)</script>", "'; DROP TABLE payments; --", "%00", "\\u0000",
]  # fmt: skip
INTEGERS: list[Any] = [
    MIN_AMOUNT - 1, MIN_AMOUNT, MIN_AMOUNT + 1, MAX_AMOUNT - 1, MAX_AMOUNT, MAX_AMOUNT + 1,
    4242424242424242, 4242424242, 123456789012, True, False, 1999.0, float(MAX_AMOUNT),
]  # fmt: skip
EXTRA_FIELDS: list[str] = [
    "amount2", "Amount", "", " ", "__proto__", "card_number", CARD, "metadata", "amount\x00",
]  # fmt: skip


def field_values() -> list[Any]:
    """Every value the corpus tries in a field: shapes, texts, integers, the valid ones, and
    the boundaries of the serializer's lengths (so a changed limit is caught)."""
    values = [*SHAPES, *TEXT, *INTEGERS, *VALID.values(), *CURRENCY_EXPONENTS]
    for length in CREATE_MAX_LENGTHS.values():
        values += ["y" * length, "y" * (length + 1), "tok_" + "b" * (length - 4)]
    return values


def corpus() -> Iterator[Any]:
    """The bodies: not objects at all; the valid body with each field left out, or set to each
    value; unknown fields; then seeded random mixtures of all of these."""
    yield from [None, [], [VALID], "body", 1999, True, 1.5, {}, {"": None}]
    values = field_values()
    for field in CREATE_FIELDS:
        yield {name: value for name, value in VALID.items() if name != field}
        for value in values:
            yield {**VALID, field: value}
            required = {name: VALID[name] for name in CREATE_REQUIRED_FIELDS}
            yield {**required, field: value}
    for extra in EXTRA_FIELDS:
        yield {**VALID, extra: 1}
        yield {**VALID, extra: CARD}
    rng = random.Random(29)
    for _ in range(2500):
        body: dict[str, Any] = {}
        for field in CREATE_FIELDS:
            roll = rng.random()
            if roll < 0.15:
                continue
            body[field] = VALID[field] if roll < 0.8 else rng.choice(values)
        if rng.random() < 0.1:
            body[rng.choice(EXTRA_FIELDS)] = rng.choice(values)
        yield body


def serializer_answer(body: Any) -> dict[str, Any] | None:
    """The serializer's validated data for ``body``, or None when it refuses it (field
    errors, or the card-data problem its ``to_internal_value`` raises)."""
    serializer = PaymentCreateInputSerializer(data=copy.deepcopy(body))
    refusal = None
    try:
        valid = serializer.is_valid()
    except Problem as problem:
        valid, refusal = False, problem.code
    assert refusal in (None, "card_data_not_accepted")
    return dict(serializer.validated_data) if valid else None


def typed(data: dict[str, Any]) -> dict[str, tuple[type, Any]]:
    """``data`` with each value's type beside it: ``True == 1`` must not pass for equal."""
    return {name: (type(value), value) for name, value in data.items()}


def test_the_plain_validator_accepts_exactly_what_the_serializer_accepts():
    accepted = refused = 0
    for body in corpus():
        before = copy.deepcopy(body)
        plain = payment_create_input(body)
        expected = serializer_answer(body)
        assert body == before  # neither changes the body
        label = json.dumps(body, default=repr)[:300]
        assert (plain is None) == (expected is None), label
        if plain is None:
            refused += 1
            continue
        accepted += 1
        assert expected is not None
        assert typed(plain) == typed(expected), label
        assert plain is not body
    # The corpus covers both sides well (a generator gone wrong would show here).
    assert accepted > 500 and refused > 3000, (accepted, refused)


@pytest.mark.parametrize(
    "body",
    [
        {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa"},
        VALID,
        {**VALID, "allow_deferred": False, "capture_method": "automatic"},
        {"amount": MAX_AMOUNT, "currency": "JPY", "payment_method": "tok_" + "Z" * 64},
    ],
)
def test_valid_bodies_pass_the_plain_checks(body):
    """The bodies merchants send are the plain path's (the serializer is not asked)."""
    assert payment_create_input(body) == body


def test_the_plain_validator_knows_the_serializers_fields():
    serializer = PaymentCreateInputSerializer()
    assert set(serializer.fields) == CREATE_FIELDS
    assert {name for name, field in serializer.fields.items() if field.required} == (
        CREATE_REQUIRED_FIELDS
    )
    for name, length in CREATE_MAX_LENGTHS.items():
        assert serializer.fields[name].max_length == length
