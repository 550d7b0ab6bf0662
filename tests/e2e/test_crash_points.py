"""The web process dies (SIGKILL) at each crash point; reconciliation resolves the payment once."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from payments.acquirer.client import acquirer_client
from payments.crashpoints import CRASH_POINTS
from payments.models import Payment
from payments.reconciliation import (
    ReconciliationPolicy,
    ReconciliationResult,
    payment_reconcile,
    reconciliation_claim_payment,
)
from tests.support.processes import GUNICORN, ROOT, free_port, service_env, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def crashing_web(request, sandbox, tmp_path) -> Iterator[str]:
    """gunicorn whose workers kill themselves at ``request.param``; yields its URL."""
    port = free_port()
    env = service_env(
        WEB_BIND=f"127.0.0.1:{port}",
        WEB_CONCURRENCY="1",
        ACQUIRER_BASE_URL=sandbox.url,
        ACQUIRER_API_KEY=sandbox.api_key,
        PAYMENTS_CRASH_POINT=request.param,
    )
    with open(tmp_path / "web.log", "w") as log:
        web = subprocess.Popen(GUNICORN, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_until(up, timeout=30, what="gunicorn")
            yield url
        finally:
            web.terminate()
            web.wait(15)


@pytest.mark.parametrize("crashing_web", CRASH_POINTS, indirect=True)
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
    assert reconciliation_claim_payment(payment_id=payment.id, now=later, policy=policy)
    outcome = payment_reconcile(
        payment_id=payment.id, client=acquirer_client(), policy=policy, clock=lambda: later
    )
    assert outcome.result is ReconciliationResult.RESOLVED
    payment.refresh_from_db()
    assert payment.status == "succeeded"
    assert payment.idempotency_key.response_status == 201
    assert sandbox.stats()["charges_total"] == 1
