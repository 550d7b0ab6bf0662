"""Hostile and buggy bodies: each a 400 problem+json, nothing stored, nothing sent."""

from __future__ import annotations

import logging
import random

import pytest
from django.db import connection
from rest_framework.exceptions import UnsupportedMediaType

from idempotency.models import IdempotencyKey
from payments.api.problems import problem_exception_handler
from payments.models import Payment, PaymentEvent
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)

CARD = "4242424242424242"


def assert_nothing_stored(sandbox) -> None:
    assert IdempotencyKey.objects.count() == 0
    assert Payment.objects.count() == 0
    assert PaymentEvent.objects.count() == 0
    assert sandbox.stats()["requests_total"] == 0


@pytest.mark.parametrize(
    ("body", "content_type", "code"),
    [
        (b"not json", "application/json", "invalid_json"),
        (b"", "application/json", "validation_error"),
        (b'{"amount": 1999', "application/json", "invalid_json"),
        (b'{"amount": NaN}', "application/json", "invalid_json"),
        (b"\xff\xfe{}", "application/json", "invalid_json"),
        (b'{"amount": 1, "amount": 2}', "application/json", "duplicate_key"),
        (b'{"a":' * 20 + b"1" + b"}" * 20, "application/json", "json_too_deep"),
        (b"[" * 5000 + b"]" * 5000, "application/json", "json_too_deep"),  # past RecursionError
        (b"[1, 2]", "application/json", "validation_error"),
        (b'"a string"', "application/json", "validation_error"),
        (b"null", "application/json", "validation_error"),
        (
            b"amount=1999&currency=EUR",
            "application/x-www-form-urlencoded",
            "unsupported_media_type",
        ),
        (b'{"amount": 1999}', "text/plain", "unsupported_media_type"),
        (b'{"amount": 1999}', "", "unsupported_media_type"),
        (b" " * (1024 * 1024), "application/json", "body_too_large"),
    ],
    ids=[
        "not-json",
        "empty",
        "truncated",
        "nan",
        "not-utf8",
        "duplicate-key",
        "deep-array",
        "deep-object",
        "array",
        "string",
        "null",
        "form",
        "text-plain",
        "no-content-type",
        "1MB",
    ],
)
def test_malformed_bodies_are_400(merchant_a, sandbox, body, content_type, code):
    """A body that is not one flat JSON object -> 400 with a specific code; nothing stored."""
    response = merchant_a.create_payment(body, content_type=content_type)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == code
    assert {"type", "title", "status", "detail", "code"} <= set(problem)
    assert problem["status"] == 400
    assert_nothing_stored(sandbox)


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "text/plain", "", "application/jsonx", "text/json"],
)
@pytest.mark.parametrize("body", [b'{"amount": 1999}', b""], ids=["body", "empty-body"])
def test_a_body_not_sent_as_json_gets_the_handlers_unsupported_media_type_answer(
    merchant_a, sandbox, body, content_type
):
    """Any other Content-Type, the empty body included, is answered byte for byte by the problem
    handler's UnsupportedMediaType branch (400 unsupported_media_type); nothing stored."""
    expected = problem_exception_handler(UnsupportedMediaType(content_type), {})
    response = merchant_a.create_payment(body, content_type=content_type)
    assert response.status_code == expected.status_code == 400
    assert response["Content-Type"] == expected["Content-Type"] == "application/problem+json"
    assert response.content == expected.content
    assert response.json()["code"] == "unsupported_media_type"
    assert_nothing_stored(sandbox)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("amount", 1000.0),
        ("amount", "1000"),
        ("amount", -1),
        ("amount", 0),
        ("amount", True),
        ("amount", 100_000_000_000),
        ("amount", None),
        ("currency", "eur"),
        ("currency", "XXX"),
        ("currency", "EURO"),
        ("currency", 978),
        ("currency", None),
        ("payment_method", "visa"),
        ("payment_method", "tok_"),
        ("payment_method", "tok_" + "a" * 65),
        ("payment_method", "tok_a-b"),
        ("payment_method", ["tok_visa"]),
        ("reference", "r" * 129),
        ("reference", "line\nbreak"),
        ("reference", ""),
        ("reference", None),
        ("reference", 12),
        ("description", "d" * 256),
        ("description", {"nested": "x"}),
    ],
)
def test_invalid_fields_are_400_with_field_errors(merchant_a, sandbox, field, value):
    """Wrong types, ranges and formats -> 400 validation_error naming the field."""
    response = merchant_a.create_payment({**PAYMENT_BODY, field: value})
    assert response.status_code == 400
    problem = response.json()
    assert problem["code"] == "validation_error"
    assert [error["field"] for error in problem["errors"]] == [field]
    assert {"field", "code", "message"} == set(problem["errors"][0])
    assert_nothing_stored(sandbox)


@pytest.mark.parametrize("missing", ["amount", "currency", "payment_method"])
def test_missing_required_field_is_400(merchant_a, sandbox, missing):
    """Each required field missing -> 400 naming it."""
    body = {k: v for k, v in PAYMENT_BODY.items() if k != missing}
    response = merchant_a.create_payment(body)
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == missing


def test_unknown_field_is_400(merchant_a, sandbox):
    """A field the API does not know -> 400 unknown_field."""
    response = merchant_a.create_payment({**PAYMENT_BODY, "capture": True})
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "capture", "code": "unknown_field", "message": "Unknown field."}
    ]


@pytest.mark.parametrize(
    ("currency", "amount"), [("JPY", 500), ("KWD", 1234), ("BHD", 1), ("CHF", 99_999_999_999)]
)
def test_currencies_with_other_exponents_are_accepted(merchant_a, sandbox, currency, amount):
    """JPY (0), KWD and BHD (3) and the largest amount are accepted as minor units."""
    response = merchant_a.create_payment({**PAYMENT_BODY, "currency": currency, "amount": amount})
    assert response.status_code == 201
    assert response.json()["amount"] == amount


@pytest.mark.parametrize(
    "body",
    [
        {**PAYMENT_BODY, "payment_method": CARD},
        {**PAYMENT_BODY, "reference": "4242 4242 4242 4242"},
        {**PAYMENT_BODY, "description": "card 4242-4242-4242-4242 exp 12/30"},
        {**PAYMENT_BODY, "card": {"number": CARD}},
        {**PAYMENT_BODY, CARD: "x"},
        {**PAYMENT_BODY, "amount": 4242424242424242},
        {**PAYMENT_BODY, "description": "3782 822463 10005"},
    ],
    ids=["payment_method", "spaces", "dashes", "nested", "as-key", "as-integer", "amex"],
)
def test_card_numbers_are_refused_and_never_kept(merchant_a, sandbox, caplog, body):
    """A 13-19 digit run anywhere -> 400 card_data_not_accepted; the digits are nowhere."""
    caplog.set_level(logging.DEBUG)
    response = merchant_a.create_payment(body)
    assert response.status_code == 400
    assert response.json()["code"] == "card_data_not_accepted"
    digits = "".join(ch for ch in str(body) if ch.isdigit())
    text = response.content.decode()
    assert "4242" not in text and "3782" not in text
    assert "4242" not in caplog.text and "3782" not in caplog.text
    assert_nothing_stored(sandbox)
    with connection.cursor() as cursor:  # not in any table, not even in a failed row
        cursor.execute(
            "SELECT count(*) FROM payments_payment p WHERE p::text LIKE %s",
            [f"%{digits[-8:]}%"],
        )
        assert cursor.fetchone()[0] == 0


def test_short_digit_runs_are_not_card_data(merchant_a, sandbox):
    """An order reference with 12 digits is fine."""
    response = merchant_a.create_payment({**PAYMENT_BODY, "reference": "order-123456789012"})
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("extra", "status", "code"),
    [
        ({"HTTP_TRANSFER_ENCODING": "chunked"}, 411, "length_required"),
        ({"HTTP_TRANSFER_ENCODING": "gzip"}, 411, "length_required"),
        ({"CONTENT_LENGTH": "+41"}, 400, "invalid_content_length"),
        ({"CONTENT_LENGTH": "4\N{ARABIC-INDIC DIGIT ONE}"}, 400, "invalid_content_length"),
        ({"CONTENT_LENGTH": "1" * 19}, 400, "invalid_content_length"),
    ],
    ids=["chunked", "gzip", "plus", "arabic-digit", "19-digits"],
)
def test_a_body_whose_length_is_unknown_is_refused(merchant_a, sandbox, extra, status, code):
    """Framing the service cannot trust answers before authentication reads anything
    (ADR 0038; tests/e2e/test_body_framing.py sends the corpus to gunicorn)."""
    response = merchant_a.client.post(
        "/payments", data=b'{"amount": 1}', content_type="application/json", **extra
    )
    assert response.status_code == status
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == code
    assert_nothing_stored(sandbox)


def lone_surrogate_bodies(seed: int = 26, count: int = 60) -> list[bytes]:
    """JSON bodies with an escaped lone surrogate (high, low, or a pair reversed) as a member
    name or a value, at the top, nested or in a list: a generated corpus."""
    rng = random.Random(seed)
    bodies = []
    for _ in range(count):
        unit = rng.choice([rng.randrange(0xD800, 0xDC00), rng.randrange(0xDC00, 0xE000)])
        text = rng.choice([f"\\u{unit:04x}", f"a\\u{unit:04X}b", "\\udc00\\ud800"])
        shape = rng.choice(
            [
                '{{"{t}": 1}}',
                '{{"amount": 1000, "reference": "{t}"}}',
                '{{"metadata": {{"{t}": "x"}}}}',
                '{{"amount": 1000, "list": ["ok", "{t}"]}}',
            ]
        )
        bodies.append(shape.format(t=text).encode())
    return bodies


def test_an_escaped_lone_surrogate_is_invalid_json_on_every_body_route(merchant_a, sandbox):
    """A member name or value holding a lone surrogate was echoed in an error and failed to
    encode (500): every body route now refuses it as ``invalid_json``, nothing stored."""
    routes = ["/payments", "/payments/pay_000000000000000000000000/refunds", "/webhook_endpoints"]
    for index, body in enumerate(lone_surrogate_bodies()):
        response = merchant_a.client.post(
            routes[index % len(routes)],
            data=body,
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=f"surrogate-{index}",
        )
        assert response.status_code == 400, body
        assert response.json()["code"] == "invalid_json", body
    assert_nothing_stored(sandbox)
