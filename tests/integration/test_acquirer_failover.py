"""Two acquirers over real HTTP (two sandbox processes): routing, failover only when certain,
and everything after the authorization at the acquirer that authorized (ADR 0023).

``alpha`` is the session's sandbox, ``beta`` a second sandbox with another API key; both are
configured through the ``ACQUIRERS`` JSON, parsed as at settings load. Counts come from each
sandbox's own statistics: what arrived there, what it recorded.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from acquirers.specs import parse_acquirers
from idempotency.models import IdempotencyKey
from ledger.services import audit_acquirer
from payments.acquirer.authorize import authorization_request
from payments.acquirer.client import acquirer_client
from payments.authorization import failover
from payments.authorization.create import payment_create
from payments.authorization.deferral import DeferralPolicy
from payments.authorization.deferred_sweep import deferred_sweep
from payments.core.money import CURRENCY_EXPONENTS
from payments.models import Payment, PaymentEvent
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    ReconciliationResult,
    payment_reconcile,
    reconciliation_claim_payment,
)
from tests.support.api import PAYMENT_BODY
from tests.support.sandbox import SandboxProcess

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = ReconciliationPolicy(
    grace=60, backoff_base=30, backoff_cap=1800, max_age=6 * 3600, max_attempts=5
)
BETA_KEY = "sandbox_sk_beta"


@pytest.fixture(scope="module")
def beta_process() -> Iterator[SandboxProcess]:
    with SandboxProcess.start(api_key=BETA_KEY) as process:
        yield process


@pytest.fixture
def beta(beta_process: SandboxProcess) -> SandboxProcess:
    beta_process.reset()
    return beta_process


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def configure(settings, alpha_url: str, alpha_key: str, beta_url: str, **alpha_extra) -> None:
    """Both acquirers through the documented JSON value, alpha first by priority."""
    document = [
        {"name": "beta", "base_url": beta_url, "api_key": BETA_KEY, "priority": 20},
        {"name": "alpha", "base_url": alpha_url, "api_key": alpha_key, "priority": 10}
        | alpha_extra,
    ]
    settings.ACQUIRERS = parse_acquirers(
        json.dumps(document), known_currencies=frozenset(CURRENCY_EXPONENTS)
    )
    settings.ACQUIRER_RETRY_MAX_ATTEMPTS = 1  # one request per acquirer: counts are exact


@pytest.fixture
def alpha(sandbox: SandboxProcess, beta: SandboxProcess, settings) -> SandboxProcess:
    configure(settings, sandbox.url, sandbox.api_key, beta.url)
    return sandbox


@pytest.fixture
def alpha_refusing(sandbox: SandboxProcess, beta: SandboxProcess, settings) -> SandboxProcess:
    """alpha's URL refuses connections (nothing listens); the alpha sandbox sees nothing."""
    configure(settings, f"http://127.0.0.1:{closed_port()}", sandbox.api_key, beta.url)
    return sandbox


def charges(process: SandboxProcess, payment_id: str) -> int:
    return process.stats()["charges_by_reference"].get(payment_id, 0)


def attempts(payment_id: str) -> list[tuple[str, str]]:
    """(acquirer, outcome) of each acquirer_attempt event, in order."""
    events = PaymentEvent.objects.filter(payment_id=payment_id, type="acquirer_attempt")
    return [(e.data["acquirer"], e.data["outcome"]) for e in events.order_by("id")]


def reconcile(payment_id: str, at, client=None):
    assert reconciliation_claim_payment(payment_id=payment_id, now=at, policy=POLICY)
    return payment_reconcile(
        payment_id=payment_id, client=client or acquirer_client(), policy=POLICY,
        clock=lambda: at, random=lambda: 0.5,
    )  # fmt: skip


def test_alpha_refusing_connections_succeeds_at_beta_once(merchant_a, alpha_refusing, beta):
    response = merchant_a.create_payment(PAYMENT_BODY, key="fo-1")
    assert response.status_code == 201, response.content
    payment = Payment.objects.get()
    assert (payment.status, payment.acquirer) == ("succeeded", "beta")
    assert payment.acquirer_idempotency_key == f"authorize-{payment.id}-beta"
    assert attempts(payment.id) == [("alpha", "not_sent"), ("beta", "approved")]
    switched = PaymentEvent.objects.get(payment=payment, type="acquirer_switched")
    assert switched.data["from_acquirer"] == "alpha" and switched.data["to_acquirer"] == "beta"
    assert (charges(alpha_refusing, payment.id), charges(beta, payment.id)) == (0, 1)
    assert alpha_refusing.stats()["requests_total"] == 0


def test_alpha_503_before_processing_fails_over_one_authorization_in_all(merchant_a, alpha, beta):
    alpha.set_condition("outage", duration_seconds=60, failure=503)
    response = merchant_a.create_payment(PAYMENT_BODY, key="fo-2")
    assert response.status_code == 201
    payment_id = response.json()["id"]
    assert alpha.stats()["requests_by_status"] == {"503": 1}  # it arrived, was not processed
    assert (charges(alpha, payment_id), charges(beta, payment_id)) == (0, 1)


def test_alpha_timing_out_after_commit_stays_at_alpha_and_is_reconciled_there(
    merchant_a, alpha, beta
):
    """Ambiguous at alpha: 202, never sent to beta, not even on the merchant's retry with alpha
    down; reconciliation (even handed beta's client) resolves it at alpha; one charge."""
    body = {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    first = merchant_a.create_payment(body, key="fo-3")
    assert first.status_code == 202
    payment_id = first.json()["id"]
    alpha.set_condition("outage", duration_seconds=60, failure=503)
    retry = merchant_a.create_payment(body, key="fo-3")
    assert retry.status_code == 202  # resumed: never leaves alpha, whatever alpha answers
    assert beta.stats()["requests_total"] == 0
    alpha.clear_conditions()
    report = reconcile(payment_id, timezone.now() + timedelta(seconds=3), acquirer_client("beta"))
    assert report.result is ReconciliationResult.RESOLVED
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.acquirer) == ("succeeded", "alpha")
    assert {a for a, _ in attempts(payment_id)} == {"alpha"}
    assert (charges(alpha, payment_id), charges(beta, payment_id)) == (1, 0)
    assert beta.stats()["requests_total"] == 0


def test_alpha_breaker_open_goes_straight_to_beta_sending_nothing_to_alpha(merchant_a, alpha, beta):
    acquirer_client("alpha").breakers.force_open("authorize", actor="test", reason="drill")
    response = merchant_a.create_payment(PAYMENT_BODY, key="fo-4")
    assert response.status_code == 201
    payment = Payment.objects.get()
    assert payment.acquirer == "beta"
    assert payment.acquirer_idempotency_key == f"authorize-{payment.id}"  # the first sent to
    assert attempts(payment.id) == [("beta", "approved")]
    assert alpha.stats()["requests_total"] == 0
    assert charges(beta, payment.id) == 1


def test_alpha_with_an_empty_retry_budget_is_skipped_at_the_switch(
    merchant_a, sandbox, beta, settings
):
    """A third acquirer whose budget is empty is skipped (nothing sent) on the way to beta."""
    document = [
        {"name": "alpha", "base_url": f"http://127.0.0.1:{closed_port()}", "api_key": "k1",
         "priority": 1},
        {"name": "gamma", "base_url": sandbox.url, "api_key": sandbox.api_key, "priority": 2,
         "policy": {"retry_budget_min_per_second": 0.0001, "retry_budget_percent": 0}},
        {"name": "beta", "base_url": beta.url, "api_key": BETA_KEY, "priority": 3},
    ]  # fmt: skip
    settings.ACQUIRERS = parse_acquirers(json.dumps(document))
    settings.ACQUIRER_RETRY_MAX_ATTEMPTS = 1
    assert acquirer_client("gamma").budget.state().retries_available == 0
    response = merchant_a.create_payment(PAYMENT_BODY, key="fo-5")
    assert response.status_code == 201
    payment = Payment.objects.get()
    assert payment.acquirer == "beta"
    switched = PaymentEvent.objects.get(payment=payment, type="acquirer_switched")
    assert switched.data["skipped"] == [{"acquirer": "gamma", "reason": "retry_budget"}]
    assert sandbox.stats()["requests_total"] == 0  # gamma is the session sandbox here
    assert charges(beta, payment.id) == 1


def test_both_down_answers_503_problem_with_retry_after_and_releases_the_key(
    merchant_a, alpha, beta
):
    alpha.set_condition("outage", duration_seconds=60, failure=503)
    beta.set_condition("outage", duration_seconds=60, failure=503)
    response = merchant_a.create_payment(PAYMENT_BODY, key="fo-6")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "acquirer_unavailable"
    assert int(response["Retry-After"]) >= 1
    payment = Payment.objects.get()
    assert (payment.status, payment.failure_code) == ("failed", "acquirer_unavailable")
    assert attempts(payment.id) == [("alpha", "not_sent"), ("beta", "not_sent")]
    assert IdempotencyKey.objects.count() == 0


def test_both_down_with_allow_deferred_is_deferred_and_submitted_once_when_beta_recovers(
    merchant_a, alpha, beta
):
    """Both acquirers refuse before processing: an ``allow_deferred`` payment is ``202
    deferred``; when beta recovers (alpha still down), the deferred sweep fails over from alpha
    to beta: one authorization in all, at beta."""
    alpha.set_condition("outage", duration_seconds=600, failure=503)
    beta.set_condition("outage", duration_seconds=600, failure=503)
    response = merchant_a.create_payment(PAYMENT_BODY | {"allow_deferred": True}, key="fo-d")
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "deferred"
    payment_id = response.json()["id"]
    assert (charges(alpha, payment_id), charges(beta, payment_id)) == (0, 0)

    beta.clear_conditions()
    later = timezone.now() + timedelta(hours=1)
    report = deferred_sweep(
        policy=DeferralPolicy(submit_rate=0, batch_size=10), clock=lambda: later
    )
    assert report.submitted == [payment_id]
    payment = Payment.objects.get(pk=payment_id)
    assert (payment.status, payment.acquirer) == ("succeeded", "beta")
    assert (charges(alpha, payment_id), charges(beta, payment_id)) == (0, 1)
    # Created: alpha then beta refused it; submitted: at beta (where it was left), approved.
    assert attempts(payment_id) == [
        ("alpha", "not_sent"),
        ("beta", "not_sent"),
        ("beta", "approved"),
    ]
    again = deferred_sweep(
        policy=DeferralPolicy(submit_rate=0, batch_size=10),
        clock=lambda: later + timedelta(hours=1),
    )
    assert again.submitted == [] and beta.stats()["charges_total"] == 1


def test_both_breakers_open_answers_503_before_writing_anything(merchant_a, alpha, beta):
    for name in ("alpha", "beta"):
        acquirer_client(name).breakers.force_open("authorize", actor="test", reason="drill")
    response = merchant_a.create_payment(PAYMENT_BODY, key="fo-7")
    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert Payment.objects.count() == 0
    assert alpha.stats()["requests_total"] == beta.stats()["requests_total"] == 0


@pytest.mark.parametrize("soft", [True, False])
def test_a_soft_decline_tries_beta_only_when_configured(merchant_a, alpha, beta, settings, soft):
    settings.ACQUIRER_SOFT_DECLINE_CODES = ["issuer_unavailable", "try_again_later"] if soft else []
    body = {**PAYMENT_BODY, "payment_method": "tok_issuer_unavailable"}
    response = merchant_a.create_payment(body, key="fo-8")
    assert response.status_code == 201
    assert response.json()["decline_code"] == "issuer_unavailable"
    payment = Payment.objects.get()
    # The token declines at every sandbox: with soft declines on, beta was asked too.
    expected = [("alpha", "declined"), ("beta", "declined")] if soft else [("alpha", "declined")]
    assert attempts(payment.id) == expected
    assert payment.acquirer == ("beta" if soft else "alpha")
    assert (charges(alpha, payment.id), charges(beta, payment.id)) == (1, 1 if soft else 0)


def test_a_hard_decline_is_a_result_even_with_soft_declines_configured(
    merchant_a, alpha, beta, settings
):
    settings.ACQUIRER_SOFT_DECLINE_CODES = ["issuer_unavailable"]
    response = merchant_a.create_payment({**PAYMENT_BODY, "payment_method": "tok_decline"})
    assert response.json()["decline_code"] == "do_not_honor"
    assert beta.stats()["requests_total"] == 0


def test_capture_and_refund_of_a_beta_authorization_go_to_beta(merchant_a, alpha_refusing, beta):
    created = merchant_a.create_payment({**PAYMENT_BODY, "capture_method": "manual"}, key="fo-9")
    assert created.json()["status"] == "requires_capture"
    payment_id = created.json()["id"]
    capture = merchant_a.client.post(
        f"/payments/{payment_id}/capture", {}, format="json", HTTP_IDEMPOTENCY_KEY="cap-1"
    )
    assert capture.status_code == 200, capture.content
    refund = merchant_a.client.post(
        f"/payments/{payment_id}/refunds", {"amount": 500}, format="json",
        HTTP_IDEMPOTENCY_KEY="ref-1",
    )  # fmt: skip
    assert refund.status_code == 201, refund.content
    stats = beta.stats()
    assert stats["captures_by_charge_reference"] == {payment_id: 1}
    assert stats["refunds_by_charge_reference"] == {payment_id: 1}
    operation_attempts = PaymentEvent.objects.filter(
        payment_id=payment_id, type="operation_attempt"
    )
    assert {event.data["acquirer"] for event in operation_attempts} == {"beta"}
    assert alpha_refusing.stats()["requests_total"] == 0


class Died(BaseException):
    """The process died at the crash point (SIGKILL in a campaign; raised here)."""


def test_a_crash_between_the_switch_and_the_call_is_reconciled_at_the_new_acquirer(
    merchant_a, alpha, beta, monkeypatch
):
    """The switch to beta is committed before beta is called; the request dies there. The row
    names beta and beta's key, so reconciliation looks up and re-sends at beta: one charge."""

    def crash_point(name: str) -> None:
        if name == "after_acquirer_switch":
            raise Died

    monkeypatch.setattr(failover, "crash_point", crash_point)
    alpha.set_condition("outage", duration_seconds=60, failure=503)
    with pytest.raises(Died):
        payment_create(merchant=merchant_a.merchant, idempotency_key="fo-10", **PAYMENT_BODY)
    payment = Payment.objects.get()
    assert (payment.status, payment.acquirer) == ("processing", "beta")
    assert payment.acquirer_idempotency_key == f"authorize-{payment.id}-beta"
    assert beta.stats()["requests_total"] == 0
    report = reconcile(payment.id, timezone.now() + timedelta(seconds=120))
    assert report.result is ReconciliationResult.RESOLVED
    payment.refresh_from_db()
    assert payment.status == "succeeded"
    assert (charges(alpha, payment.id), charges(beta, payment.id)) == (0, 1)
    assert beta.stats()["charges_by_idempotency_key"] == {f"authorize-{payment.id}-beta": 1}


def test_a_merchants_preferred_order_and_the_currencies_route_the_payment(
    merchant_a, alpha, beta, settings
):
    """beta first for this merchant; a currency only alpha takes goes to alpha; one nobody
    takes is a 400 that stores nothing."""
    merchant_a.merchant.acquirer_order = "beta"
    merchant_a.merchant.save()
    first = merchant_a.create_payment(PAYMENT_BODY)
    assert Payment.objects.get(pk=first.json()["id"]).acquirer == "beta"
    document = [
        {"name": "alpha", "base_url": alpha.url, "api_key": alpha.api_key, "currencies": ["GBP"]},
        {"name": "beta", "base_url": beta.url, "api_key": BETA_KEY, "currencies": ["EUR"]},
    ]
    settings.ACQUIRERS = parse_acquirers(json.dumps(document))
    pounds = merchant_a.create_payment({**PAYMENT_BODY, "currency": "GBP"})
    assert Payment.objects.get(pk=pounds.json()["id"]).acquirer == "alpha"
    yen = merchant_a.create_payment({**PAYMENT_BODY, "currency": "JPY"}, key="fo-yen")
    assert yen.status_code == 400
    assert yen.json()["errors"][0]["code"] == "currency_not_supported"
    assert not IdempotencyKey.objects.filter(key="fo-yen").exists()


def test_the_ledger_audit_compares_each_acquirer_with_its_own_payments(merchant_a, alpha, beta):
    """After a failover the audit of both acquirers is clean (alpha holds nothing of it); an
    approval of the same payment at alpha too is reported: authorized at two acquirers."""
    since = timezone.now() - timedelta(minutes=1)
    alpha.set_condition("outage", duration_seconds=60, failure=503)
    moved = merchant_a.create_payment(PAYMENT_BODY).json()["id"]
    alpha.clear_conditions()
    report = audit_acquirer(since=since)
    assert report.clean, report.summary_lines()
    assert report.source.startswith("alpha: ") and "; beta: " in report.source
    assert report.payments_checked == 1
    payment = Payment.objects.get(pk=moved)
    duplicate = authorization_request(payment)
    acquirer_client("alpha").authorize(replace(duplicate, idempotency_key="a-stray-second-key"))
    report = audit_acquirer(since=since)
    assert [(d.category.value, d.payment_id) for d in report.discrepancies] == [
        ("multiple_records", moved)
    ]
