"""Manual capture, void and refunds (issue 12) through the Django test client, with real
PostgreSQL and the sandbox acquirer over real HTTP: every endpoint, state and error."""

from __future__ import annotations

import uuid

import pytest

from idempotency.models import IdempotencyKey
from payments.models import PaymentEvent, PaymentOperation
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)

REFUND_FIELDS = {
    "id", "object", "payment", "amount", "currency", "status", "reason", "failure_code",
    "acquirer_reference", "created_at", "updated_at",
}  # fmt: skip


def post(merchant, path: str, body: dict | None = None, key: str | None = "auto"):
    headers = {}
    if key == "auto":
        key = uuid.uuid4().hex
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return merchant.client.post(path, body if body is not None else {}, format="json", **headers)


def manual_payment(merchant, amount: int = 10000, token: str = "tok_visa") -> dict:
    body = {**PAYMENT_BODY, "amount": amount, "payment_method": token, "capture_method": "manual"}
    response = merchant.create_payment(body)
    assert response.status_code == 201, response.content
    return response.json()


def captured_payment(merchant, amount: int = 10000, token: str = "tok_visa") -> dict:
    response = merchant.create_payment({**PAYMENT_BODY, "amount": amount, "payment_method": token})
    assert response.status_code == 201, response.content
    return response.json()


def test_manual_payment_is_201_requires_capture_and_only_authorized(merchant_a, sandbox):
    payment = manual_payment(merchant_a)
    assert payment["status"] == "requires_capture"
    assert (payment["capture_method"], payment["amount_captured"]) == ("manual", 0)
    charge = sandbox.charges(payment["id"])[0]
    assert (charge["captured"], charge["voided"]) == (False, False)


def test_capture_whole_amount_is_200_succeeded(merchant_a, sandbox):
    payment = manual_payment(merchant_a)
    response = post(merchant_a, f"/payments/{payment['id']}/capture")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["amount_captured"]) == ("succeeded", 10000)
    assert sandbox.charges(payment["id"])[0]["amount_captured"] == 10000
    capture = PaymentOperation.objects.get(kind="capture")
    assert capture.acquirer_idempotency_key == f"capture-{capture.id}"
    assert capture.id.startswith("op_") and capture.status == "succeeded"


def test_an_operation_attempt_event_names_its_operation(merchant_a, sandbox):
    """The attempt event carries the operation's id (the attempt's own fields never replace
    it), so the admin can list each attempt under its operation."""
    payment = manual_payment(merchant_a)
    assert post(merchant_a, f"/payments/{payment['id']}/capture").status_code == 200
    capture = PaymentOperation.objects.get(kind="capture")
    attempt = PaymentEvent.objects.get(payment_id=payment["id"], type="operation_attempt")
    assert (attempt.data["operation"], attempt.data["kind"]) == (capture.id, "capture")


def test_partial_capture_releases_the_rest(merchant_a, sandbox):
    payment = manual_payment(merchant_a)
    response = post(merchant_a, f"/payments/{payment['id']}/capture", {"amount": 4000})
    assert response.status_code == 200
    assert response.json()["amount_captured"] == 4000
    again = post(merchant_a, f"/payments/{payment['id']}/capture", {"amount": 1000})
    assert again.status_code == 409
    assert again.json()["code"] == "invalid_payment_state"


def test_capture_replay_is_byte_identical(merchant_a, sandbox):
    payment = manual_payment(merchant_a)
    first = post(merchant_a, f"/payments/{payment['id']}/capture", key="cap-1")
    replay = post(merchant_a, f"/payments/{payment['id']}/capture", key="cap-1")
    assert replay.status_code == 200
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"
    assert len(sandbox.charges(payment["id"])) == 1


def test_capture_above_the_authorized_amount_is_409_and_stores_nothing(merchant_a, sandbox):
    payment = manual_payment(merchant_a, amount=5000)
    response = post(merchant_a, f"/payments/{payment['id']}/capture", {"amount": 5001}, key="k")
    assert response.status_code == 409
    assert response.json()["code"] == "amount_exceeds_capturable"
    assert response["Content-Type"] == "application/problem+json"
    assert not IdempotencyKey.objects.filter(key="k").exists()
    assert not PaymentOperation.objects.exists()
    # The key is free: the same key with a valid body runs.
    assert post(merchant_a, f"/payments/{payment['id']}/capture", key="k").status_code == 200


@pytest.mark.parametrize("body", [{"amount": 0}, {"amount": -5}, {"amount": 10.5},
                                  {"amount": "100"}, {"amount": True}, {"extra": 1}])  # fmt: skip
def test_bad_capture_bodies_are_400_validation_error(merchant_a, sandbox, body):
    payment = manual_payment(merchant_a)
    response = post(merchant_a, f"/payments/{payment['id']}/capture", body)
    assert response.status_code == 400
    assert response.json()["code"] == "validation_error"


def test_capture_of_an_automatic_payment_is_409_invalid_payment_state(merchant_a, sandbox):
    payment = captured_payment(merchant_a)
    response = post(merchant_a, f"/payments/{payment['id']}/capture")
    assert response.status_code == 409
    assert response.json()["code"] == "invalid_payment_state"
    response = post(merchant_a, f"/payments/{payment['id']}/void")
    assert response.json()["code"] == "invalid_payment_state"


def test_void_is_200_canceled(merchant_a, sandbox):
    payment = manual_payment(merchant_a)
    response = post(merchant_a, f"/payments/{payment['id']}/void")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "canceled"
    assert sandbox.charges(payment["id"])[0]["voided"] is True
    assert post(merchant_a, f"/payments/{payment['id']}/capture").status_code == 409
    refund = post(merchant_a, f"/payments/{payment['id']}/refunds")
    assert refund.json()["code"] == "invalid_payment_state"


def test_refunds_partial_then_the_rest(merchant_a, sandbox):
    payment = captured_payment(merchant_a, amount=10000)
    first = post(merchant_a, f"/payments/{payment['id']}/refunds",
                 {"amount": 3000, "reason": "requested_by_customer"})  # fmt: skip
    assert first.status_code == 201, first.content
    refund = first.json()
    assert set(refund) == REFUND_FIELDS
    assert refund["id"].startswith("re_") and len(refund["id"]) == 27
    assert (refund["object"], refund["payment"], refund["amount"]) == (
        "refund",
        payment["id"],
        3000,
    )
    assert (refund["status"], refund["currency"], refund["reason"]) == (
        "succeeded", "EUR", "requested_by_customer",
    )  # fmt: skip
    assert first["Location"] == f"/refunds/{refund['id']}"
    rest = post(merchant_a, f"/payments/{payment['id']}/refunds")
    assert rest.status_code == 201
    assert rest.json()["amount"] == 7000
    detail = merchant_a.client.get(f"/payments/{payment['id']}").json()
    assert (detail["amount_captured"], detail["amount_refunded"]) == (10000, 10000)
    more = post(merchant_a, f"/payments/{payment['id']}/refunds", {"amount": 1})
    assert more.status_code == 409
    assert more.json()["code"] == "amount_exceeds_refundable"
    assert len(sandbox.refund_listing()) == 2


def test_refund_list_and_detail(merchant_a, merchant_b, sandbox):
    payment = captured_payment(merchant_a, amount=10000)
    ids = [
        post(merchant_a, f"/payments/{payment['id']}/refunds", {"amount": 1000}).json()["id"]
        for _ in range(3)
    ]
    page = merchant_a.client.get(f"/payments/{payment['id']}/refunds?limit=2").json()
    assert page["object"] == "list" and page["has_more"] is True
    assert [r["id"] for r in page["data"]] == ids[::-1][:2]
    rest = merchant_a.client.get(
        f"/payments/{payment['id']}/refunds?starting_after={page['data'][-1]['id']}"
    ).json()
    assert [r["id"] for r in rest["data"]] == [ids[0]] and rest["has_more"] is False
    assert merchant_a.client.get(f"/refunds/{ids[0]}").json()["amount"] == 1000
    assert merchant_b.client.get(f"/refunds/{ids[0]}").status_code == 404
    assert merchant_b.client.get(f"/payments/{payment['id']}/refunds").status_code == 404
    unknown = merchant_a.client.get(f"/payments/{payment['id']}/refunds?bogus=1")
    assert unknown.status_code == 400


def test_another_merchants_payment_is_404_for_every_operation(merchant_a, merchant_b, sandbox):
    payment = manual_payment(merchant_a)
    for path in ("capture", "void", "refunds"):
        response = post(merchant_b, f"/payments/{payment['id']}/{path}")
        assert response.status_code == 404, path
    assert not IdempotencyKey.objects.filter(merchant=merchant_b.merchant).exists()


def test_operations_require_an_idempotency_key(merchant_a, sandbox):
    payment = manual_payment(merchant_a)
    for path in ("capture", "void", "refunds"):
        response = post(merchant_a, f"/payments/{payment['id']}/{path}", key=None)
        assert response.status_code == 400
        assert response.json()["code"] == "idempotency_key_missing"


def test_one_key_on_two_payments_refund_routes_is_422(merchant_a, sandbox):
    first, second = captured_payment(merchant_a), captured_payment(merchant_a)
    assert (
        post(merchant_a, f"/payments/{first['id']}/refunds", {"amount": 100}, key="r").status_code
        == 201
    )
    reused = post(merchant_a, f"/payments/{second['id']}/refunds", {"amount": 100}, key="r")
    assert reused.status_code == 422
    assert reused.json()["code"] == "idempotency_key_reused"


def test_bad_refund_reason_is_400(merchant_a, sandbox):
    payment = captured_payment(merchant_a)
    response = post(merchant_a, f"/payments/{payment['id']}/refunds", {"reason": "because"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "reason"


def test_refund_declined_by_the_acquirer_is_201_failed(merchant_a, sandbox):
    payment = captured_payment(merchant_a, token="tok_refund_decline")
    response = post(merchant_a, f"/payments/{payment['id']}/refunds", {"amount": 500})
    assert response.status_code == 201
    assert (response.json()["status"], response.json()["failure_code"]) == (
        "failed",
        "do_not_honor",
    )
    # A failed refund frees its amount.
    assert post(merchant_a, f"/payments/{payment['id']}/refunds").json()["amount"] == 10000 - 0


def test_refund_not_sent_is_503_and_frees_the_key(merchant_a, sandbox, single_attempt):
    payment = captured_payment(merchant_a, token="tok_refund_fail_503_1")
    response = post(merchant_a, f"/payments/{payment['id']}/refunds", {"amount": 500}, key="n")
    assert response.status_code == 503
    assert response.json()["code"] == "acquirer_unavailable"
    assert "Retry-After" in response
    assert not IdempotencyKey.objects.filter(key="n").exists()
    assert PaymentOperation.objects.get().failure_code == "acquirer_unavailable"
    # The merchant's retry is a new refund with a new acquirer key (the token fails each
    # refund key's first attempt): nothing reached the acquirer's books either time.
    retry = post(merchant_a, f"/payments/{payment['id']}/refunds", {"amount": 500}, key="n")
    assert retry.status_code == 503
    assert sandbox.refund_listing() == []
    assert merchant_a.client.get(f"/payments/{payment['id']}").json()["amount_refunded"] == 0


def test_capture_not_sent_is_503_and_payment_back_to_requires_capture(
    merchant_a, sandbox, single_attempt
):
    payment = manual_payment(merchant_a, token="tok_capture_fail_503_1")
    response = post(merchant_a, f"/payments/{payment['id']}/capture", key="c")
    assert response.status_code == 503
    detail = merchant_a.client.get(f"/payments/{payment['id']}").json()
    assert detail["status"] == "requires_capture"
    assert not IdempotencyKey.objects.filter(key="c").exists()
    assert sandbox.charges(payment["id"])[0]["captured"] is False


def test_capture_refused_by_the_acquirer_is_a_stored_502(merchant_a, sandbox, single_attempt):
    payment = manual_payment(merchant_a, token="tok_capture_fail_422_1")
    response = post(merchant_a, f"/payments/{payment['id']}/capture", key="x")
    assert response.status_code == 502
    assert response.json()["code"] == "acquirer_error"
    replay = post(merchant_a, f"/payments/{payment['id']}/capture", key="x")
    assert replay.content == response.content and replay["Idempotent-Replayed"] == "true"
    assert merchant_a.client.get(f"/payments/{payment['id']}").json()["status"] == (
        "requires_capture"
    )


def test_openapi_documents_the_operations(merchant_a):
    schema = merchant_a.client.get("/openapi.json").json()
    for path in ("/payments/{payment_id}/capture", "/payments/{payment_id}/void",
                 "/payments/{payment_id}/refunds", "/refunds/{refund_id}"):  # fmt: skip
        assert path in schema["paths"], path
    payment = schema["components"]["schemas"]["Payment"]["properties"]
    assert {"capture_method", "amount_captured", "amount_refunded"} <= set(payment)
