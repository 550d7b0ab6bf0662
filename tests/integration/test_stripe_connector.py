"""The Stripe connector end to end: the service's API, a real PostgreSQL, and localstripe (a
stateful fake of Stripe's API, a separate process on 127.0.0.1, tests/support/localstripe.py)
over HTTP through a fault proxy (tests/support/fault_proxy.py).

localstripe's own listings are the oracle: every operation ends with exactly one PaymentIntent,
capture or refund there, whatever the fault. localstripe ignores `Idempotency-Key`, so the
acquirer is configured as Stripe's failure table says for a provider whose keys cannot be
relied on (`honours_idempotency_keys: false`): an ambiguous outcome is never re-sent by the
client, and reconciliation looks the PaymentIntent up by our reference before any re-send.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from acquirers.specs import parse_acquirers
from ledger.services import Category, audit_acquirer
from payments.acquirer.client import acquirer_client
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import Payment, PaymentOperation
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    ReconciliationResult,
)
from tests.support import reconcile as reconciliation
from tests.support.fault_proxy import FaultProxy
from tests.support.localstripe import LocalStripe

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = ReconciliationPolicy(
    grace=0, backoff_base=30, backoff_cap=1800, max_age=6 * 3600, max_attempts=5
)
BODY = {"amount": 1000, "currency": "EUR", "payment_method": "pm_card_visa", "reference": "o-1"}
_names = itertools.count()


@pytest.fixture(scope="module")
def localstripe() -> Iterator[LocalStripe]:
    with LocalStripe.start() as process:
        yield process


@pytest.fixture
def proxy(localstripe: LocalStripe, settings, monkeypatch) -> Iterator[FaultProxy]:
    """localstripe, emptied, behind a fresh fault proxy; the service's only acquirer is a
    `stripe` one there (a new name per test: breakers and budgets start clean)."""
    localstripe.flush()
    monkeypatch.setenv("STRIPE_TEST_SECRET_KEY", localstripe.api_key)
    with FaultProxy("127.0.0.1", localstripe.port) as fault_proxy:
        document = [
            {
                "name": f"stripe-{next(_names)}",
                "type": "stripe",
                "base_url": fault_proxy.url,
                "api_key_env": "STRIPE_TEST_SECRET_KEY",
                "api_version": "2024-06-20",
                "policy": {"honours_idempotency_keys": False, "read_timeout_seconds": 1.0},
            }
        ]
        settings.ACQUIRERS = parse_acquirers(
            json.dumps(document), known_currencies=frozenset(CURRENCY_EXPONENTS)
        )
        settings.ACQUIRER_DEADLINE_SECONDS = 3
        yield fault_proxy


def error(status: int, type_: str, **headers: str) -> tuple[str, int, dict[str, str], bytes]:
    body = json.dumps({"error": {"type": type_, "message": "fault proxy"}}).encode()
    return ("answer", status, {"Content-Type": "application/json", **headers}, body)


HTML_502 = ("answer", 502, {"Content-Type": "text/html"}, b"<html><h1>502 Bad Gateway</h1></html>")


def ours(localstripe: LocalStripe, payment_id: str) -> list[dict]:
    return [
        pi
        for pi in localstripe.payment_intents()
        if pi["metadata"].get("payment_reference") == payment_id
    ]


def our_refunds(localstripe: LocalStripe, payment_intent: str) -> list[dict]:
    """The refunds we filed (a partial capture's release, which localstripe lists as a
    refund without metadata, left out)."""
    return [r for r in localstripe.refunds(payment_intent) if r["metadata"].get("refund_reference")]


def reconcile_payment(payment_id: str) -> ReconciliationResult:
    return reconciliation.reconcile_payment(payment_id, POLICY)


def reconcile_operation(operation_id: str) -> ReconciliationResult:
    return reconciliation.reconcile_operation(operation_id, POLICY)


def test_capture_partially_refund_twice_and_refuse_what_stripe_would_accept(
    merchant_a, localstripe, proxy
):
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    assert created.status_code == 201, created.content
    payment_id = created.json()["id"]
    assert created.json()["status"] == "requires_capture"
    post = merchant_a.client.post
    captured = post(f"/payments/{payment_id}/capture", {"amount": 800}, format="json",
                    HTTP_IDEMPOTENCY_KEY="cap-1")  # fmt: skip
    assert captured.status_code == 200, captured.content
    again = post(f"/payments/{payment_id}/capture", {"amount": 100}, format="json",
                 HTTP_IDEMPOTENCY_KEY="cap-2")  # fmt: skip
    assert again.status_code >= 400  # a double capture: refused by us
    for key, amount in (("ref-1", 300), ("ref-2", 200)):
        refunded = post(f"/payments/{payment_id}/refunds", {"amount": amount}, format="json",
                        HTTP_IDEMPOTENCY_KEY=key)  # fmt: skip
        assert refunded.status_code == 201, refunded.content
    over = post(f"/payments/{payment_id}/refunds", {"amount": 301}, format="json",
                HTTP_IDEMPOTENCY_KEY="ref-3")  # fmt: skip
    assert over.status_code >= 400  # 800 - 500 = 300 left: refused by us, never sent
    (pi,) = ours(localstripe, payment_id)
    assert (pi["status"], pi["amount"]) == ("succeeded", 1000)
    assert pi["latest_charge"]["captured"] is True
    assert sorted(r["amount"] for r in our_refunds(localstripe, pi["id"])) == [200, 300]
    releases = [r for r in localstripe.refunds(pi["id"]) if not r["metadata"]]
    assert [r["amount"] for r in releases] == [200]  # the uncaptured 200, released
    assert Payment.objects.get(pk=payment_id).acquirer_reference == pi["id"]


def test_void_cancels_the_payment_intent(merchant_a, localstripe, proxy):
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    payment_id = created.json()["id"]
    voided = merchant_a.client.post(f"/payments/{payment_id}/void", {}, format="json",
                                    HTTP_IDEMPOTENCY_KEY="void-1")  # fmt: skip
    assert voided.status_code == 200, voided.content
    (pi,) = ours(localstripe, payment_id)
    assert (pi["status"], pi["amount"]) == ("canceled", 1000)


def test_a_decline_is_a_result_with_its_code(merchant_a, localstripe, proxy):
    created = merchant_a.create_payment({**BODY, "payment_method": "pm_card_chargeCustomerFail"})
    assert created.status_code == 201, created.content
    assert created.json()["status"] == "declined"
    assert created.json()["decline_code"] == "card_declined"  # localstripe's code, no decline_code
    (pi,) = ours(localstripe, created.json()["id"])
    assert (pi["status"], pi["amount"]) == ("requires_payment_method", 1000)  # nothing charged
    assert Payment.objects.get(pk=created.json()["id"]).amount_captured == 0
    assert proxy.forwarded == 1


# (fault, whether the request reached localstripe, what the merchant is answered first)
AUTHORIZE_FAULTS = [
    ("drop", 202),
    ("reset", 202),
    ("hang", 202),
    (error(500, "api_error"), 202),
    (HTML_502, 202),
    (error(429, "rate_limit_error"), 201),
    (error(429, "rate_limit_error", **{"Stripe-Should-Retry": "true"}), 201),
    (error(429, "rate_limit_error", **{"Stripe-Should-Retry": "false"}), 503),
]


@pytest.mark.parametrize(
    ("fault", "answered"),
    AUTHORIZE_FAULTS,
    ids=["drop", "reset", "hang", "500", "502-html", "429", "429-retry-true", "429-retry-false"],
)
def test_every_authorization_fault_ends_with_exactly_one_payment_intent(
    merchant_a, localstripe, proxy, fault, answered
):
    proxy.plan(fault)
    first = merchant_a.create_payment(BODY, key="k-1")
    assert first.status_code == answered, first.content
    if answered == 202:
        payment_id = first.json()["id"]
        payment = Payment.objects.get(pk=payment_id)
        assert payment.status == "processing"  # ambiguous: never succeeded, never declined
        assert reconcile_payment(payment_id) is ReconciliationResult.RESOLVED
    elif answered == 503:
        assert ours_count(localstripe) == 0  # a 429 binds nothing
        again = merchant_a.create_payment(BODY, key="k-1")  # the key was released
        assert again.status_code == 201, again.content
        payment_id = again.json()["id"]
    else:
        payment_id = first.json()["id"]
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.amount, payment.amount_captured) == ("succeeded", 1000, 1000)
    (pi,) = ours(localstripe, payment_id)
    assert (pi["status"], pi["amount"], pi["currency"]) == ("succeeded", 1000, "eur")
    assert len(localstripe.payment_intents()) == 1
    assert payment.acquirer_reference == pi["id"]


def ours_count(localstripe: LocalStripe) -> int:
    return len(localstripe.payment_intents())


@pytest.mark.parametrize(
    "fault",
    ["drop", "reset", "hang", error(500, "api_error"), HTML_502],
    ids=["drop", "reset", "hang", "500", "502-html"],
)
def test_a_lost_capture_and_a_lost_refund_are_reconciled_to_exactly_one(
    merchant_a, localstripe, proxy, fault
):
    created = merchant_a.create_payment({**BODY, "capture_method": "manual"})
    payment_id = created.json()["id"]
    post = merchant_a.client.post
    proxy.plan(fault)
    captured = post(f"/payments/{payment_id}/capture", {"amount": 700}, format="json",
                    HTTP_IDEMPOTENCY_KEY="cap-1")  # fmt: skip
    assert captured.status_code == 202, captured.content
    capture = PaymentOperation.objects.get(payment_id=payment_id, kind="capture")
    assert reconcile_operation(capture.id) is ReconciliationResult.RESOLVED
    (pi,) = ours(localstripe, payment_id)
    assert pi["status"] == "succeeded"
    assert pi["latest_charge"]["captured"] is True
    released = [r["amount"] for r in localstripe.refunds(pi["id"]) if not r["metadata"]]
    assert released == [300]  # captured once, for 700
    proxy.plan(fault)
    refunded = post(f"/payments/{payment_id}/refunds", {"amount": 250}, format="json",
                    HTTP_IDEMPOTENCY_KEY="ref-1")  # fmt: skip
    assert refunded.status_code == 202, refunded.content
    refund = PaymentOperation.objects.get(payment_id=payment_id, kind="refund")
    assert reconcile_operation(refund.id) is ReconciliationResult.RESOLVED
    assert [r["amount"] for r in our_refunds(localstripe, pi["id"])] == [250]
    refund.refresh_from_db()
    assert (refund.status, refund.amount) == ("succeeded", 250)


def test_a_look_up_reads_past_the_first_hundred_payment_intents(merchant_a, localstripe, proxy):
    """110 other PaymentIntents, then ours: the look-up (reconciliation's) finds it on the
    listing's second page, where a one-page look-up could only say it cannot tell."""
    with httpx.Client(base_url=localstripe.url, auth=(localstripe.api_key, "")) as stripe:
        for n in range(110):
            created = stripe.post(
                "/v1/payment_intents",
                data={
                    "amount": "500",
                    "currency": "eur",
                    "metadata[payment_reference]": f"pay_someone_else_{n}",
                },
            )
            assert created.status_code == 200, created.text
    answer = merchant_a.create_payment(BODY)
    assert answer.status_code == 201, answer.content
    payment = Payment.objects.get(pk=answer.json()["id"])
    forwarded = proxy.forwarded
    (found,) = acquirer_client().lookup(payment.pk)
    assert (found.acquirer_reference, found.approved) == (payment.acquirer_reference, True)
    assert proxy.forwarded - forwarded == 2  # two pages of 100
    assert len(localstripe.payment_intents()) == 111


def test_the_ledger_audit_reads_stripes_listings_and_finds_a_payment_made_behind_our_back(
    merchant_a, localstripe, proxy
):
    """The audit's Stripe source (ledger/stripe_records.py) lists the window's PaymentIntents
    and refunds page by page (`starting_after`; localstripe refuses `created[gte]`, so the
    window is checked on our side): our captured-and-refunded and our automatic payment
    match; 100 PaymentIntents never confirmed hold no money and are no records; one confirmed
    at localstripe without our reference is the one finding. localstripe's listing is the
    oracle."""
    manual = merchant_a.create_payment({**BODY, "capture_method": "manual"}, key="m-1")
    manual_id = manual.json()["id"]
    post = merchant_a.client.post
    captured = post(f"/payments/{manual_id}/capture", {}, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    assert captured.status_code == 200, captured.content
    refunded = post(f"/payments/{manual_id}/refunds", {"amount": 300}, format="json",
                    HTTP_IDEMPOTENCY_KEY="r-1")  # fmt: skip
    assert refunded.status_code == 201, refunded.content
    assert merchant_a.create_payment(BODY, key="a-1").json()["status"] == "succeeded"
    with httpx.Client(base_url=localstripe.url, auth=(localstripe.api_key, "")) as stripe:
        for _ in range(100):
            unconfirmed = stripe.post(
                "/v1/payment_intents", data={"amount": "500", "currency": "eur"}
            )
            assert unconfirmed.status_code == 200, unconfirmed.text
        behind = stripe.post(
            "/v1/payment_intents",
            data={"amount": "700", "currency": "eur", "payment_method": "pm_card_visa",
                  "confirm": "true"},
        ).json()  # fmt: skip
    assert behind["status"] == "succeeded"

    report = audit_acquirer(since=timezone.now() - timedelta(minutes=1))
    listed = localstripe.payment_intents()
    charged = [pi for pi in listed if pi["status"] != "requires_payment_method"]
    assert (len(listed), len(charged)) == (103, 3)
    assert report.records_checked == len(charged)
    assert report.payments_checked == 2
    pi = Payment.objects.get(pk=manual_id).acquirer_reference
    assert report.refund_records_checked == len(our_refunds(localstripe, pi)) == 1
    assert [(d.category, d.acquirer_references) for d in report.discrepancies] == [
        (Category.RECORD_UNKNOWN_TO_US, (behind["id"],))
    ]
    assert report.not_audited == []
