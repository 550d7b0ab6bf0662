"""The Idempotency-Key vectors (docs/reference/idempotency.md), on PostgreSQL and the sandbox."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency.models import IdempotencyKey
from payments.acquirer.client import acquirer_client
from payments.authorization.create import payment_create
from payments.core.answers import Answered, Replayed
from payments.models import Payment
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)


def test_missing_key_is_400_and_stores_nothing(merchant_a, sandbox):
    """Vector 1: no Idempotency-Key -> 400 idempotency_key_missing, no row, no acquirer call."""
    response = merchant_a.create_payment(PAYMENT_BODY, key=None)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "idempotency_key_missing"
    assert response.json()["title"] == "Idempotency-Key is missing"
    assert IdempotencyKey.objects.count() == 0
    assert Payment.objects.count() == 0
    assert sandbox.stats()["requests_total"] == 0


def test_empty_key_is_400(merchant_a, sandbox):
    """Vector 2: an empty Idempotency-Key -> 400 idempotency_key_invalid."""
    response = merchant_a.create_payment(PAYMENT_BODY, key="")
    assert response.status_code == 400
    assert response.json()["code"] == "idempotency_key_invalid"
    assert IdempotencyKey.objects.count() == 0


def test_key_of_255_characters_is_accepted(merchant_a, sandbox):
    """Vector 3a: 255 x 'a' is a valid key."""
    response = merchant_a.create_payment(PAYMENT_BODY, key="a" * 255)
    assert response.status_code == 201
    assert IdempotencyKey.objects.get().key == "a" * 255


def test_key_of_256_characters_is_400(merchant_a, sandbox):
    """Vector 3b: 256 x 'a' -> 400, nothing stored."""
    response = merchant_a.create_payment(PAYMENT_BODY, key="a" * 256)
    assert response.status_code == 400
    assert response.json()["code"] == "idempotency_key_invalid"
    assert IdempotencyKey.objects.count() == 0
    assert Payment.objects.count() == 0


def test_key_with_inner_space_is_400(merchant_a, sandbox):
    """Vector 4: 'ab c' -> 400."""
    response = merchant_a.create_payment(PAYMENT_BODY, key="ab c")
    assert response.status_code == 400
    assert IdempotencyKey.objects.count() == 0


def test_same_json_in_another_order_replays(merchant_a, sandbox):
    """Vector 5: same key, same JSON reordered and respaced -> identical replay, 1 acquirer call."""
    first = merchant_a.create_payment(PAYMENT_BODY, key="k5")
    reordered = (
        '{ "reference" : "order-1",\n "payment_method":"tok_visa", '
        '"currency": "EUR","amount":1999 }'
    )
    second = merchant_a.create_payment(reordered, key="k5")
    assert first.status_code == second.status_code == 201
    assert second.content == first.content
    assert second["Idempotent-Replayed"] == "true"
    assert second["Location"] == first["Location"]
    assert "Idempotent-Replayed" not in first
    assert sandbox.stats()["charges_total"] == 1


def test_changed_amount_under_same_key_is_422(merchant_a, sandbox):
    """Vector 6: amount 1000 then 2000 under one key -> 422, first row unchanged, 1 call."""
    first = merchant_a.create_payment({**PAYMENT_BODY, "amount": 1000}, key="k6")
    row_before = IdempotencyKey.objects.values().get()
    second = merchant_a.create_payment({**PAYMENT_BODY, "amount": 2000}, key="k6")
    assert first.status_code == 201
    assert second.status_code == 422
    assert second.json()["code"] == "idempotency_key_reused"
    assert second.json()["title"] == "Idempotency-Key is already used"
    assert IdempotencyKey.objects.values().get() == row_before
    assert Payment.objects.get().amount == 1000
    assert sandbox.stats()["charges_total"] == 1


def test_same_key_on_another_route_is_422(merchant_a, sandbox):
    """Vector 6 (route): a stored key with another route is a different request -> 422."""
    merchant_a.create_payment(PAYMENT_BODY, key="k6r")
    IdempotencyKey.objects.update(route="/refunds")
    response = merchant_a.create_payment(PAYMENT_BODY, key="k6r")
    assert response.status_code == 422


def test_merchants_sharing_a_key_get_separate_payments(merchant_a, merchant_b, sandbox):
    """Vector 9: merchants A and B both use key K -> two payments; B never sees A's answer."""
    a = merchant_a.create_payment(PAYMENT_BODY, key="K")
    b = merchant_b.create_payment(PAYMENT_BODY, key="K")
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]
    assert "Idempotent-Replayed" not in b
    assert IdempotencyKey.objects.filter(key="K").count() == 2
    assert sandbox.stats()["charges_total"] == 2


def test_validation_failure_stores_nothing_and_frees_the_key(merchant_a, sandbox):
    """Vector 10: an invalid body with key K -> 400, nothing stored; K then works as new."""
    bad = merchant_a.create_payment({**PAYMENT_BODY, "amount": "1999"}, key="k10")
    assert bad.status_code == 400
    assert IdempotencyKey.objects.count() == 0
    good = merchant_a.create_payment(PAYMENT_BODY, key="k10")
    assert good.status_code == 201
    assert "Idempotent-Replayed" not in good


@pytest.mark.parametrize(
    ("age", "replayed"),
    [(timedelta(hours=23, minutes=59, seconds=59), True), (timedelta(hours=24, seconds=1), False)],
)
def test_replay_until_retention_ends(merchant_a, sandbox, age, replayed):
    """Vector 11: a replay 23:59:59 after the first request replays; at 24:00:01 it is new."""
    start = timezone.now()

    def create(at):
        return payment_create(
            merchant=merchant_a.merchant,
            idempotency_key="k11",
            client=acquirer_client(),
            **PAYMENT_BODY,
            clock=lambda: at,
        )

    first = create(start)
    second = create(start + age)
    assert isinstance(first, Answered)
    assert isinstance(second, Replayed) is replayed
    if replayed:
        assert bytes(second.record.response_body) == first.response.body
        assert sandbox.stats()["charges_total"] == 1
    else:
        assert json.loads(second.response.body)["id"] != json.loads(first.response.body)["id"]
        assert Payment.objects.count() == 2
        assert sandbox.stats()["charges_total"] == 2


def test_quoted_and_bare_forms_name_the_same_key(merchant_a, sandbox):
    """An RFC 8941 quoted key and its bare form are the same key (replay, one charge)."""
    first = merchant_a.create_payment(PAYMENT_BODY, key="order-77")
    second = merchant_a.create_payment(PAYMENT_BODY, key='"order-77"')
    assert second["Idempotent-Replayed"] == "true"
    assert second.content == first.content


def test_keys_are_case_sensitive(merchant_a, sandbox):
    """'Key' and 'key' are two keys."""
    merchant_a.create_payment(PAYMENT_BODY, key="Key")
    response = merchant_a.create_payment(PAYMENT_BODY, key="key")
    assert "Idempotent-Replayed" not in response
    assert sandbox.stats()["charges_total"] == 2
