"""POST/GET /payments through the Django test client, with real PostgreSQL and the sandbox."""

from __future__ import annotations

import pytest

from idempotency.models import IdempotencyKey
from payments.models import Payment, PaymentEvent
from tests.factories import PaymentFactory
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)

PAYMENT_FIELDS = {
    "id", "object", "status", "amount", "currency", "payment_method", "reference", "description",
    "decline_code", "failure_code", "acquirer_reference", "created_at", "updated_at",
    "capture_method", "amount_captured", "amount_refunded", "amount_disputed", "not_before",
    "acquirer", "return_url", "next_action",
}  # fmt: skip


def test_approved_payment_is_201_succeeded(merchant_a, sandbox):
    """tok_visa -> 201 succeeded with Location, the acquirer reference, one charge."""
    response = merchant_a.create_payment(PAYMENT_BODY)
    body = response.json()
    assert response.status_code == 201
    assert set(body) == PAYMENT_FIELDS
    assert body["status"] == "succeeded"
    assert body["id"].startswith("pay_")
    assert response["Location"] == f"/payments/{body['id']}"
    assert body["acquirer_reference"].startswith("ch_")
    assert body["created_at"].endswith("Z")
    assert (body["capture_method"], body["amount_captured"], body["amount_refunded"]) == (
        "automatic",
        1999,
        0,
    )
    assert sandbox.charges(body["id"])[0]["amount"] == 1999


def test_declined_payment_is_201_with_decline_code(merchant_a, sandbox):
    """tok_decline -> 201 declined do_not_honor: a decline is a result, not an error."""
    response = merchant_a.create_payment({**PAYMENT_BODY, "payment_method": "tok_decline"})
    assert response.status_code == 201
    assert response.json()["status"] == "declined"
    assert response.json()["decline_code"] == "do_not_honor"


def test_insufficient_funds_decline_code(merchant_a, sandbox):
    """tok_insufficient_funds -> declined insufficient_funds."""
    response = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_insufficient_funds"}
    )
    assert response.json()["decline_code"] == "insufficient_funds"


def test_timeout_after_commit_is_202_processing(merchant_a, sandbox, single_attempt):
    """A read timeout after the acquirer recorded the charge -> 202 processing, Retry-After 5."""
    response = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}, key="t1"
    )
    assert response.status_code == 202
    assert response.json()["status"] == "processing"
    assert response["Retry-After"] == "5"
    assert response["Location"] == f"/payments/{response.json()['id']}"
    assert sandbox.stats()["charges_total"] == 1
    assert IdempotencyKey.objects.get().response_status == 202


def test_timeout_after_commit_is_resolved_by_the_clients_retry(merchant_a, sandbox):
    """With retries, the second attempt (same acquirer key) gets the recorded charge: 201."""
    response = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    )
    assert response.status_code == 201
    assert response.json()["status"] == "succeeded"
    assert sandbox.stats()["charges_total"] == 1
    event = PaymentEvent.objects.get(type="acquirer_attempt")
    assert event.data["attempts"] == 2 and event.data["replayed"] is True


def test_retry_of_unknown_outcome_resends_with_same_acquirer_key(
    merchant_a, sandbox, single_attempt
):
    """A retry of a 202 re-sends with the same acquirer key: the recorded charge, no second one."""
    body = {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    first = merchant_a.create_payment(body, key="t2")
    retry = merchant_a.create_payment(body, key="t2")
    assert first.status_code == 202
    assert retry.status_code == 201
    assert retry.json()["status"] == "succeeded"
    assert retry.json()["id"] == first.json()["id"]
    assert sandbox.stats()["charges_total"] == 1
    replay = merchant_a.create_payment(body, key="t2")
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.content == retry.content


def test_500_after_commit_is_202_then_resolved_by_retry(merchant_a, sandbox, single_attempt):
    """The acquirer's 500 is ambiguous -> 202; the retry gets the recorded charge -> 201."""
    body = {**PAYMENT_BODY, "payment_method": "tok_500_after_commit"}
    first = merchant_a.create_payment(body, key="t3")
    retry = merchant_a.create_payment(body, key="t3")
    assert first.status_code == 202
    assert retry.status_code == 201
    assert retry.json()["status"] == "succeeded"
    assert sandbox.stats()["charges_total"] == 1


def test_unreachable_acquirer_is_503_failed_and_key_released(merchant_a, settings):
    """Connection refused -> 503 acquirer_unavailable with Retry-After; payment failed; key free."""
    settings.ACQUIRER_BASE_URL = "http://127.0.0.1:9"
    response = merchant_a.create_payment(PAYMENT_BODY, key="down-1")
    assert response.status_code == 503
    assert response.json()["code"] == "acquirer_unavailable"
    assert int(response["Retry-After"]) > 0
    assert Payment.objects.get().status == "failed"
    assert Payment.objects.get().failure_code == "acquirer_unavailable"
    assert IdempotencyKey.objects.count() == 0


def test_key_released_after_503_runs_again_as_new(merchant_a, sandbox, settings):
    """After a 503 the same key creates a fresh payment once the acquirer is back."""
    acquirer_url = settings.ACQUIRER_BASE_URL
    settings.ACQUIRER_BASE_URL = "http://127.0.0.1:9"
    merchant_a.create_payment(PAYMENT_BODY, key="down-2")
    settings.ACQUIRER_BASE_URL = acquirer_url
    response = merchant_a.create_payment(PAYMENT_BODY, key="down-2")
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    assert Payment.objects.filter(status="failed").count() == 1
    assert sandbox.stats()["charges_total"] == 1


def test_acquirer_refusing_our_credentials_is_502_stored(merchant_a, sandbox, settings):
    """The acquirer's 401 is permanent -> payment failed acquirer_rejected, 502, replayed."""
    settings.ACQUIRER_API_KEY = "wrong-key"
    response = merchant_a.create_payment(PAYMENT_BODY, key="p1")
    assert response.status_code == 502
    assert response.json()["code"] == "acquirer_error"
    assert "wrong-key" not in response.content.decode()
    assert Payment.objects.get().failure_code == "acquirer_rejected"
    assert merchant_a.create_payment(PAYMENT_BODY, key="p1")["Idempotent-Replayed"] == "true"


def test_events_record_creation_attempt_and_outcome(merchant_a, sandbox):
    """The event log holds created, the acquirer attempt and the approval, in order."""
    payment_id = merchant_a.create_payment(PAYMENT_BODY).json()["id"]
    types = list(PaymentEvent.objects.filter(payment_id=payment_id).values_list("type", flat=True))
    assert types == ["payment_created", "acquirer_attempt", "authorization_approved"]


def test_missing_credentials_is_401(merchant_a, sandbox):
    """No Authorization header -> 401 problem with WWW-Authenticate; nothing stored."""
    merchant_a.client.credentials()
    response = merchant_a.create_payment(PAYMENT_BODY)
    assert response.status_code == 401
    assert response["Content-Type"] == "application/problem+json"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert IdempotencyKey.objects.count() == 0
    assert sandbox.stats()["requests_total"] == 0


@pytest.mark.parametrize(
    "header", ["Bearer sk_live_wrong", "Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", "sk_live_x"]
)
def test_wrong_credentials_are_401(merchant_a, sandbox, header):
    """A wrong, malformed or non-Bearer Authorization -> 401 authentication_failed."""
    merchant_a.client.credentials(HTTP_AUTHORIZATION=header)
    response = merchant_a.create_payment(PAYMENT_BODY)
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert "sk_live_wrong" not in response.content.decode()
    assert Payment.objects.count() == 0


def test_revoked_key_is_401(merchant_a, sandbox):
    """A revoked key no longer authenticates."""
    from merchants.services import api_key_revoke

    api_key_revoke(api_key=merchant_a.merchant.api_keys.get())
    assert merchant_a.create_payment(PAYMENT_BODY).status_code == 401


def test_rotated_keys_both_work(merchant_a, sandbox):
    """A second key works while the first is still active (rotation)."""
    from merchants.services import api_key_issue

    second = api_key_issue(merchant=merchant_a.merchant).raw
    assert merchant_a.client.get("/payments").status_code == 200
    merchant_a.client.credentials(HTTP_AUTHORIZATION=f"Bearer {second}")
    assert merchant_a.client.get("/payments").status_code == 200


def test_get_payment(merchant_a, sandbox):
    """GET /payments/{id} answers the payment object."""
    created = merchant_a.create_payment(PAYMENT_BODY).json()
    response = merchant_a.client.get(f"/payments/{created['id']}")
    assert response.status_code == 200
    assert response.json() == created


def test_other_merchants_payment_is_404(merchant_a, merchant_b, sandbox):
    """Merchant B asking for A's payment id gets 404, the same as an unknown id."""
    payment_id = merchant_a.create_payment(PAYMENT_BODY).json()["id"]
    response = merchant_b.client.get(f"/payments/{payment_id}")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert merchant_b.client.get("/payments/pay_unknown").json() == response.json()


def test_list_is_newest_first_with_cursor(merchant_a, merchant_b):
    """GET /payments pages newest first with has_more and starting_after; scoped to merchant."""
    payments = PaymentFactory.create_batch(5, merchant=merchant_a.merchant)
    PaymentFactory(merchant=merchant_b.merchant)
    newest_first = sorted(payments, key=lambda p: (p.created_at, p.id), reverse=True)
    page1 = merchant_a.client.get("/payments", {"limit": 2}).json()
    assert page1["object"] == "list"
    assert [p["id"] for p in page1["data"]] == [p.id for p in newest_first[:2]]
    assert page1["has_more"] is True
    page3 = merchant_a.client.get(
        "/payments", {"limit": 2, "starting_after": newest_first[3].id}
    ).json()
    assert [p["id"] for p in page3["data"]] == [newest_first[4].id]
    assert page3["has_more"] is False


def test_list_filters_status_and_reference(merchant_a):
    """status and reference filter the listing."""
    PaymentFactory(merchant=merchant_a.merchant, status="declined", reference="r1")
    PaymentFactory(merchant=merchant_a.merchant, status="succeeded", reference="r2")
    by_status = merchant_a.client.get("/payments", {"status": "declined"}).json()["data"]
    by_reference = merchant_a.client.get("/payments", {"reference": "r2"}).json()["data"]
    assert [p["reference"] for p in by_status] == ["r1"]
    assert [p["status"] for p in by_reference] == ["succeeded"]


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 0},
        {"limit": 101},
        {"limit": "x"},
        {"status": "paid"},
        {"starting_after": "pay_x"},
        {"page": 2},
    ],
)
def test_list_rejects_bad_query(merchant_a, query):
    """Out-of-range limit, unknown status, unknown cursor or parameter -> 400 problem."""
    response = merchant_a.client.get("/payments", query)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["errors"]


def test_healthz(client):
    """GET /healthz answers 200 without credentials."""
    assert client.get("/healthz").json() == {"status": "ok"}


def test_unknown_url_is_problem_404(merchant_a, settings):
    """An unknown URL answers a problem document too."""
    settings.DEBUG = False
    response = merchant_a.client.get("/nope")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"


@pytest.mark.parametrize("method", ["get", "post", "delete"])
@pytest.mark.parametrize(
    "path",
    [
        "/payments/pay_%00",
        "/payments/pay_%00/capture",
        "/payments/pay_%00/void",
        "/payments/pay_%00/refunds",
        "/refunds/re_%00",
        "/webhook_endpoints/we_%00",
        "/webhook_endpoints/we_%00/rotate_secret",
        "/events/evt_%00",
    ],
)
def test_a_nul_in_an_object_id_is_a_problem_404_not_a_500(merchant_a, settings, method, path):
    """PostgreSQL text cannot hold NUL: a path with one answers 404 before any view (it once
    reached the query and failed as a 500)."""
    settings.DEBUG = False
    response = getattr(merchant_a.client, method)(path, HTTP_IDEMPOTENCY_KEY="nul-in-path")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "not_found"
