"""The audit's spellings of card numbers (``tests/support/card_spellings.py``, 700 of them in 7
classes) sent over the API into every free-text field and header that is stored or logged:
each is refused (``400 card_data_not_accepted``) or, for ``X-Request-Id``, not adopted; then no
text column of any table holds any of their digits (PostgreSQL, the sandbox over HTTP).
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from card_data import contains_card_number
from tests.support.card_spellings import spellings_with_pans

pytestmark = pytest.mark.django_db(transaction=True)

SPELLED = [
    (label, pan, text) for label, pairs in spellings_with_pans().items() for pan, text in pairs
]
BODY = {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa", "reference": "order-1"}
ENDPOINT = {"url": "https://hooks.example.com/payments", "enabled_events": ["payment.succeeded"]}


def digits_of(text: str) -> str:
    """Every digit of ``text`` (NFKC, then any Unicode digit value) as ASCII, nothing else."""
    normal = unicodedata.normalize("NFKC", text)
    return "".join(
        str(unicodedata.digit(c)) for c in normal if unicodedata.digit(c, None) is not None
    )


def refusal_problems(response: Any, field: str) -> list[str]:
    """What is wrong with ``response`` as the card-data refusal naming ``field``."""
    if response.status_code != 400 or response.json().get("code") != "card_data_not_accepted":
        return [f"{response.status_code} {response.content[:100]!r}"]
    if field not in [error["field"] for error in response.json()["errors"]]:
        return [f"{field} not named: {response.json()['errors']}"]
    if contains_card_number(response.content.decode()):
        return ["the answer holds the card number"]
    return []


def stored_texts() -> list[tuple[str, str]]:
    """(table.column, value) of every text, character varying and JSON column of every table
    of the database (information_schema, then one SELECT per column)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() "
            "AND data_type IN ('text', 'character varying', 'character', 'json', 'jsonb')"
        )
        columns = cursor.fetchall()
        found = []
        for table, column in columns:
            cursor.execute(f'SELECT "{column}"::text FROM "{table}" WHERE "{column}" IS NOT NULL')
            found.extend((f"{table}.{column}", value) for (value,) in cursor.fetchall())
    return found


def test_every_spelling_is_refused_in_every_stored_field_and_header(merchant_a, sandbox, caplog):
    """The 700 spellings in turn into 11 places (63-64 each): a payment's reference,
    description and a nested member, the Idempotency-Key, a list filter and a query parameter
    name, a refund's reason, a webhook endpoint's url, Idempotency-Key and description (each a
    400 naming the field) and X-Request-Id (not adopted); a payment created with an ASCII
    spelling as X-Request-Id does not record it. Afterwards no stored text holds a card
    number or any spelled digits, and no log line a card number."""
    caplog.set_level(logging.DEBUG)
    api = merchant_a.client
    send: dict[str, tuple[Callable[[str], Any], str]] = {
        "reference": (lambda t: merchant_a.create_payment({**BODY, "reference": t}), "reference"),
        "description": (
            lambda t: merchant_a.create_payment({**BODY, "description": t}),
            "description",
        ),
        "nested member": (
            lambda t: merchant_a.create_payment({**BODY, "metadata": {"note": [t]}}),
            "metadata.note[0]",
        ),
        "Idempotency-Key": (lambda t: merchant_a.create_payment(BODY, key=t), "Idempotency-Key"),
        "list filter": (lambda t: api.get("/payments", {"reference": t}), "reference"),
        "query parameter name": (lambda t: api.get("/payments/pay_0", {t: "1"}), "[redacted]"),
        "refund reason": (
            lambda t: api.post("/payments/pay_0/refunds", {"reason": t}, format="json"),
            "reason",
        ),
        "webhook url": (
            lambda t: api.post(
                "/webhook_endpoints",
                {**ENDPOINT, "url": f"{ENDPOINT['url']}?ref={t}"},
                format="json",
            ),
            "url",
        ),
        "webhook Idempotency-Key": (
            lambda t: api.post(
                "/webhook_endpoints", ENDPOINT, format="json", HTTP_IDEMPOTENCY_KEY=t
            ),
            "Idempotency-Key",
        ),
        "webhook description": (
            lambda t: api.post("/webhook_endpoints", {**ENDPOINT, "description": t}, format="json"),
            "description",
        ),
    }
    places = [*send, "X-Request-Id"]
    failures, counts = [], dict.fromkeys(places, 0)
    for index, (label, _, text) in enumerate(SPELLED):
        place = places[index % len(places)]
        counts[place] += 1
        if place == "X-Request-Id":
            answer = api.get("/payments", HTTP_X_REQUEST_ID=text)
            if answer.status_code != 200 or answer["Request-Id"] == text:
                failures.append(
                    f"{label} {text!a} as X-Request-Id: adopted or {answer.status_code}"
                )
            continue
        request, field = send[place]
        failures.extend(
            f"{label} {text!a} as {place}: {p}" for p in refusal_problems(request(text), field)
        )
    assert failures == []
    assert sum(counts.values()) == len(SPELLED) >= 500 and min(counts.values()) >= 50

    # A payment that is created, with a spelling as its request id: the id is not adopted.
    ascii_spellings = [text for _, _, text in SPELLED if text.isascii() and " " not in text]
    for text in ascii_spellings[:12]:
        answer = merchant_a.create_payment(BODY, HTTP_X_REQUEST_ID=text)
        assert answer.status_code in {201, 202}, answer.content[:200]
        assert answer["Request-Id"] != text

    stored = stored_texts()
    assert stored, "the scan read nothing"
    assert [where for where, value in stored if contains_card_number(value)] == []
    pans = {pan for _, pan, _ in SPELLED}
    holding = [
        (where, value) for where, value in stored if any(p in digits_of(value) for p in pans)
    ]
    assert holding == []
    assert not contains_card_number(caplog.text)
