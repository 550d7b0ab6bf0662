"""The web process dies (SIGKILL) at each crash point; reconciliation resolves the payment, or the
capture, void or refund, once."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from payments.acquirer.client import acquirer_client
from payments.core.crashpoints import (
    AUTHORIZATION_CRASH_POINTS,
    OPERATION_CRASH_POINTS,
    OPERATIONS,
    PHASES,
)
from payments.models import Payment, PaymentOperation
from payments.reconciliation.operations import operation_claim, operation_reconcile
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    ReconciliationResult,
    payment_reconcile,
    reconciliation_claim_payment,
)
from tests.integration.test_lifecycle_api import post
from tests.support.api import PAYMENT_BODY
from tests.support.processes import (
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    answers_healthz,
    free_port,
    service_env,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def crashing_webs(sandbox_process, tmp_path_factory) -> Iterator[dict[str, str]]:
    """One gunicorn per phase (:data:`PHASES`), its URL by phase: its worker kills itself at
    that phase of an authorization and of every capture, void and refund
    (``PAYMENTS_CRASH_POINT`` naming the four points), and gunicorn starts another for the
    next test. Three processes for the module's twelve points, started side by side."""
    logs = tmp_path_factory.mktemp("crashing-webs")
    webs: dict[str, subprocess.Popen] = {}
    urls: dict[str, str] = {}
    try:
        for phase in PHASES:
            port = free_port()
            points = [phase, *(f"{kind}_{phase}" for kind in OPERATIONS)]
            env = service_env(
                WEB_BIND=f"127.0.0.1:{port}",
                WEB_CONCURRENCY="1",
                ACQUIRER_BASE_URL=sandbox_process.url,
                ACQUIRER_API_KEY=sandbox_process.api_key,
                PAYMENTS_CRASH_POINT=",".join(points),
            )
            with open(logs / f"web-{phase}.log", "w") as log:
                webs[phase] = subprocess.Popen(
                    GUNICORN, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
                )
            urls[phase] = f"http://127.0.0.1:{port}"
        for phase, url in urls.items():
            wait_until(lambda url=url: answers_healthz(url), timeout=STARTUP_SECONDS, what=phase)
        yield urls
    finally:
        for web in webs.values():
            web.send_signal(signal.SIGQUIT)  # gunicorn's quick shutdown: nothing to drain
        for web in webs.values():
            web.wait(15)


@pytest.fixture
def crashing_web(request, crashing_webs, sandbox) -> str:
    """The URL of the gunicorn whose worker dies at ``request.param`` (a crash point)."""
    point: str = request.param
    return crashing_webs[point.split("_", 1)[1] if point.startswith(OPERATIONS) else point]


@pytest.mark.parametrize("crashing_web", AUTHORIZATION_CRASH_POINTS, indirect=True)
def test_payment_left_by_a_crash_is_resolved_once(crashing_web, merchant_a, sandbox, request):
    """No answer reaches the merchant; the payment stays processing; reconciliation resolves
    it to succeeded with exactly one charge at the acquirer."""
    point = request.node.callspec.params["crashing_web"]
    with pytest.raises(httpx.TransportError):
        httpx.post(
            f"{crashing_web}/payments",
            json={"amount": 1999, "currency": "EUR", "payment_method": "tok_visa"},
            headers={"Authorization": f"Bearer {merchant_a.api_key}", "Idempotency-Key": "crash"},
            timeout=30,
        )
    payment = Payment.objects.get()
    assert payment.status == "processing"
    assert payment.idempotency_key.status == "in_progress"
    charges_before = sandbox.stats()["charges_total"]
    assert charges_before == (0 if point == "after_phase1_commit" else 1)

    later = timezone.now() + timedelta(minutes=5)  # past the lock timeout and the grace period
    policy = ReconciliationPolicy.from_settings()
    # PostgreSQL ends the killed request's transaction (and its row locks, which the claim
    # skips) only once it notices the connection is gone: a moment after the SIGKILL.
    wait_until(
        lambda: reconciliation_claim_payment(payment_id=payment.id, now=later, policy=policy),
        timeout=30,
        what="the claim, once the killed request's row locks are released",
    )
    outcome = payment_reconcile(
        payment_id=payment.id, client=acquirer_client(), policy=policy, clock=lambda: later
    )
    assert outcome.result is ReconciliationResult.RESOLVED
    payment.refresh_from_db()
    assert payment.status == "succeeded"
    assert payment.idempotency_key.response_status == 201
    assert sandbox.stats()["charges_total"] == 1


#: Per operation: the payment it needs (created before the crash, in this process), its route
#: and body, and what the payment and the sandbox's charge show once it is resolved.
OPERATION_CASES = {
    "capture": ("manual", "capture", {"amount": 6000}),
    "void": ("manual", "void", {}),
    "refund": ("automatic", "refunds", {"amount": 2500}),
}


@pytest.mark.parametrize("crashing_web", OPERATION_CRASH_POINTS, indirect=True)
def test_operation_left_by_a_crash_is_resolved_once(crashing_web, merchant_a, sandbox, request):
    """A capture, void or refund whose web process died at one of its crash points: no answer,
    the operation stays pending; reconciliation resolves it with exactly one operation at the
    sandbox, and the same request then replays the final answer."""
    point = request.node.callspec.params["crashing_web"]
    kind, phase = point.split("_", 1)
    method, route, body = OPERATION_CASES[kind]
    created = merchant_a.create_payment(
        {**PAYMENT_BODY, "amount": 10000, "payment_method": "tok_visa", "capture_method": method}
    )
    assert created.status_code == 201, created.content
    payment_id = created.json()["id"]
    url = f"{crashing_web}/payments/{payment_id}/{route}"
    headers = {"Authorization": f"Bearer {merchant_a.api_key}", "Idempotency-Key": "crash"}
    with pytest.raises(httpx.TransportError):
        httpx.post(url, json=body, headers=headers, timeout=30)

    operation = PaymentOperation.objects.get()
    assert (operation.kind, operation.status) == (kind, "pending")
    assert operation.idempotency_key.status == "in_progress"
    sent = sandbox.stats()[f"{kind}s_total"]
    assert sent == (0 if phase == "after_phase1_commit" else 1)

    later = timezone.now() + timedelta(minutes=5)  # past the lock timeout and the grace period
    policy = ReconciliationPolicy.from_settings()
    wait_until(  # as above: the killed request's row locks go with its connection
        lambda: operation_claim(operation_id=operation.id, now=later, policy=policy),
        timeout=30,
        what="the claim, once the killed request's row locks are released",
    )
    report = operation_reconcile(
        operation_id=operation.id, client=acquirer_client(), policy=policy, clock=lambda: later
    )
    assert report.result is ReconciliationResult.RESOLVED
    operation.refresh_from_db()
    assert operation.status == "succeeded"
    assert sandbox.stats()[f"{kind}s_total"] == 1
    payment = Payment.objects.get(pk=payment_id)
    charge = sandbox.charges(payment_id)[0]
    if kind == "capture":
        assert (payment.status, payment.amount_captured) == ("succeeded", 6000)
        assert (charge["captured"], charge["amount_captured"]) == (True, 6000)
    elif kind == "void":
        assert payment.status == "canceled"
        assert (charge["voided"], charge["amount_captured"]) == (True, 0)
    else:
        assert (payment.status, payment.amount_refunded) == ("succeeded", 2500)
        assert [r["amount"] for r in sandbox.refunds(operation.id)] == [2500]

    # The merchant's retry of the same request replays the final answer, no acquirer call.
    replay = post(merchant_a, f"/payments/{payment_id}/{route}", body, key="crash")
    assert replay.status_code == (201 if kind == "refund" else 200), replay.content
    assert replay["Idempotent-Replayed"] == "true"
    answer = replay.json()
    if kind == "refund":
        assert (answer["id"], answer["status"], answer["amount"]) == (
            operation.id,
            "succeeded",
            2500,
        )
    else:
        assert (answer["id"], answer["status"]) == (payment_id, payment.status)
    assert sandbox.stats()[f"{kind}s_total"] == 1
