"""POST /payments with the circuit breaker: fast 503s while open, recovery through probes."""

from __future__ import annotations

import pytest

from idempotency.models import IdempotencyKey
from payments.acquirer.client import acquirer_client
from payments.models import Payment
from tests.support.api import PAYMENT_BODY
from tests.support.processes import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def small_breaker(settings):
    """Config C of docs/reference/circuit-breaker.md, with a short open duration."""
    settings.ACQUIRER_BREAKER_WINDOW_SIZE = 10
    settings.ACQUIRER_BREAKER_MINIMUM_CALLS = 5
    settings.ACQUIRER_BREAKER_FAILURE_RATE_THRESHOLD = 50.0
    settings.ACQUIRER_BREAKER_OPEN_SECONDS = 1.0
    settings.ACQUIRER_BREAKER_HALF_OPEN_PERMITS = 3
    settings.ACQUIRER_RETRY_MAX_ATTEMPTS = 1


def test_open_breaker_answers_503_before_writing_anything(merchant_a, sandbox):
    """Forced open: 503 acquirer_unavailable with Retry-After, no key, no payment, no request."""
    acquirer_client().breakers.force_open("authorize", actor="test", reason="drill")
    response = merchant_a.create_payment(PAYMENT_BODY, key="open-1")
    assert response.status_code == 503
    assert response.json()["code"] == "acquirer_unavailable"
    assert int(response["Retry-After"]) >= 1
    assert IdempotencyKey.objects.count() == 0
    assert Payment.objects.count() == 0
    assert sandbox.stats()["requests_total"] == 0


def test_open_breaker_still_replays_a_completed_key(merchant_a, sandbox):
    """A replay needs no acquirer: it is answered while the breaker is open."""
    first = merchant_a.create_payment(PAYMENT_BODY, key="open-2")
    acquirer_client().breakers.force_open("authorize", actor="test", reason="drill")
    replay = merchant_a.create_payment(PAYMENT_BODY, key="open-2")
    assert replay.status_code == 201
    assert replay.content == first.content
    assert replay["Idempotent-Replayed"] == "true"


def test_breaker_opening_between_claim_and_call_fails_the_payment_and_frees_the_key(
    merchant_a, sandbox, monkeypatch
):
    """Admitted by the pre-check, refused at the call: failed circuit_open, key released."""
    client = acquirer_client()
    client.breakers.force_open("authorize", actor="test", reason="drill")
    monkeypatch.setattr(client, "admits", lambda group, **_: (True, 0.0))  # the race, made certain
    response = merchant_a.create_payment(PAYMENT_BODY, key="open-3")
    assert response.status_code == 503
    payment = Payment.objects.get()
    assert (payment.status, payment.failure_code) == ("failed", "circuit_open")
    assert IdempotencyKey.objects.count() == 0
    assert payment.next_check_at is None  # nothing to reconcile: nothing was sent
    assert sandbox.stats()["requests_total"] == 0


def test_outage_opens_the_breaker_and_probes_close_it(merchant_a, sandbox, small_breaker):
    """An acquirer-wide outage opens the breaker; payments then get 503 with zero acquirer
    requests; after the outage, probes close it and payments succeed without a restart."""
    sandbox.set_condition("outage", duration_seconds=3600, failure=503)
    for i in range(5):
        assert merchant_a.create_payment(PAYMENT_BODY, key=f"out-{i}").status_code == 503
    assert acquirer_client().breaker_state("authorize").state == "open"
    seen = sandbox.stats()["requests_by_endpoint"]["POST /charges"]["total"]
    refused = merchant_a.create_payment(PAYMENT_BODY, key="out-refused")
    assert refused.status_code == 503
    assert sandbox.stats()["requests_by_endpoint"]["POST /charges"]["total"] == seen
    sandbox.clear_conditions()
    wait_until(lambda: acquirer_client().admits("authorize")[0], timeout=10, what="half-open")
    for i in range(3):
        assert merchant_a.create_payment(PAYMENT_BODY, key=f"probe-{i}").status_code == 201
    assert acquirer_client().breaker_state("authorize").state == "closed"
    assert merchant_a.create_payment(PAYMENT_BODY, key="after").status_code == 201


def test_reconciliation_look_ups_work_while_authorize_is_open(merchant_a, sandbox):
    """The look-up group has its own breaker: an open authorize breaker does not stop it."""
    acquirer_client().breakers.force_open("authorize", actor="test", reason="drill")
    assert acquirer_client().admits("lookup")[0] is True
    assert acquirer_client().lookup("pay_unknown") == []
