"""The list endpoints' query strings, as a class of bad input: every parameter of every list,
empty or given twice (a generated corpus), is a 400 problem naming it; none reads as "no
filter" or as a guess between two values."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from payments.api.serializers import PaymentListQuerySerializer, RefundListQuerySerializer
from payments.api.webhook_serializers import EventListQuerySerializer
from tests.factories import PaymentFactory
from webhooks.events import EVENT_TYPES

pytestmark = pytest.mark.django_db

#: A valid value for each parameter (so only the shape under test is wrong).
VALID = {
    "status": "succeeded",
    "reference": "order-1",
    "limit": "5",
    "starting_after": "x",
    "type": sorted(EVENT_TYPES)[0],
}


def _lists(merchant) -> list[tuple[str, type]]:
    payment = PaymentFactory(merchant=merchant.merchant)
    return [
        ("/payments", PaymentListQuerySerializer),
        (f"/payments/{payment.id}/refunds", RefundListQuerySerializer),
        ("/events", EventListQuerySerializer),
    ]


def _corpus(path: str, serializer: type) -> list[tuple[str, str, str]]:
    """(url, field, code): each parameter empty, empty among valid ones, and repeated (with the
    same value or two values), for one list."""
    cases = []
    for name in serializer().fields:
        value = VALID.get(name, "x")
        others = {other: VALID.get(other, "x") for other in serializer().fields if other != name}
        others.pop("starting_after", None)  # a cursor that exists nowhere is its own 400
        cases += [
            (f"{path}?{name}=", name, "blank"),
            (f"{path}?{urlencode({**others, name: ''})}", name, "blank"),
            (f"{path}?{name}={value}&{name}={value}", name, "repeated"),
            (f"{path}?{name}={value}&{name}=", name, "repeated"),
        ]
    return cases


def test_every_empty_or_repeated_parameter_of_every_list_is_a_400(merchant_a):
    checked = 0
    for path, serializer in _lists(merchant_a):
        for url, field, code in _corpus(path, serializer):
            answer = merchant_a.client.get(url)
            assert answer.status_code == 400, (url, answer.content)
            assert answer["Content-Type"] == "application/problem+json"
            problem = answer.json()
            assert problem["code"] == "validation_error"
            assert {"field": field, "code": code} in [
                {"field": e["field"], "code": e["code"]} for e in problem["errors"]
            ], (url, problem)
            checked += 1
    assert checked >= 30


def test_each_list_still_answers_its_valid_queries(merchant_a):
    """The same parameters given once each, with values, answer 200."""
    for path, serializer in _lists(merchant_a):
        query = {n: VALID.get(n, "x") for n in serializer().fields if n != "starting_after"}
        answer = merchant_a.client.get(f"{path}?{urlencode(query)}")
        assert answer.status_code == 200, (path, query, answer.content)
        assert answer.json()["object"] == "list"
