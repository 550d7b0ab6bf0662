"""Captures, voids and refunds under concurrency and lost answers (issue 12): real PostgreSQL,
threads over real HTTP (pytest-django's live server), the sandbox acquirer; the faults resolved
by reconciliation of operations, and the replay answering the final state."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from payments.acquirer.client import acquirer_client
from payments.models import Payment, PaymentOperation
from payments.reconciliation.operations import (
    authorization_holds_expire,
    operation_reconciliation_run,
    operation_reconciliation_sweep,
)
from payments.reconciliation.payments import ReconciliationPolicy, ReconciliationResult
from tests.integration.test_lifecycle_api import captured_payment, manual_payment, post
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)


def http_post(url: str, api_key: str, path: str, body: dict, key: str | None = None):
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key or uuid.uuid4().hex}
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)


def all_at_once(calls):
    start = threading.Barrier(len(calls))

    def run(call):
        start.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def test_ten_concurrent_refunds_never_exceed_the_captured_amount(live_server, merchant_a, sandbox):
    """10 refunds of 2000 at once on a captured 10000: 5 succeed, 5 are 409, 5 at the sandbox."""
    payment = captured_payment(merchant_a, amount=10000)
    path = f"/payments/{payment['id']}/refunds"
    responses = all_at_once(
        [lambda: http_post(live_server.url, merchant_a.api_key, path, {"amount": 2000})] * 10
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] * 5 + [409] * 5, statuses
    assert {r.json()["code"] for r in responses if r.status_code == 409} == {
        "amount_exceeds_refundable"
    }
    assert PaymentOperation.objects.filter(kind="refund", status="succeeded").count() == 5
    assert len(sandbox.refund_listing()) == 5
    assert Payment.objects.get(pk=payment["id"]).amount_refunded == 10000


def test_two_concurrent_captures_capture_once(live_server, merchant_a, sandbox):
    payment = manual_payment(merchant_a, token="tok_capture_slow_200")
    path = f"/payments/{payment['id']}/capture"
    responses = all_at_once([lambda: http_post(live_server.url, merchant_a.api_key, path, {})] * 2)
    assert sorted(r.status_code for r in responses) == [200, 409]
    assert PaymentOperation.objects.filter(kind="capture").count() == 1
    assert sandbox.charges(payment["id"])[0]["captured"] is True


def test_capture_racing_void_has_one_winner_here_and_at_the_sandbox(
    live_server, merchant_a, sandbox
):
    payment = manual_payment(merchant_a, token="tok_capture_slow_200__void_slow_200")
    base = f"/payments/{payment['id']}"
    responses = all_at_once(
        [
            lambda: http_post(live_server.url, merchant_a.api_key, f"{base}/capture", {}),
            lambda: http_post(live_server.url, merchant_a.api_key, f"{base}/void", {}),
        ]
    )
    assert sorted(r.status_code for r in responses) == [200, 409]
    assert PaymentOperation.objects.count() == 1
    charge = sandbox.charges(payment["id"])[0]
    status = Payment.objects.get(pk=payment["id"]).status
    assert (charge["captured"], charge["voided"]) == (
        (True, False) if status == "succeeded" else (False, True)
    )


POLICY = ReconciliationPolicy(grace=0.0, backoff_base=1.0, backoff_cap=1.0)


def reconcile_all():
    reports = []
    for operation in PaymentOperation.objects.filter(status="pending"):
        reports.append(
            operation_reconciliation_run(
                operation.pk, client=acquirer_client(), policy=POLICY, random=lambda: 0.0
            )
        )
    return reports


CASES = [
    ("capture", "tok_capture_{fault}", "manual"),
    ("void", "tok_void_{fault}", "manual"),
    ("refund", "tok_refund_{fault}", "automatic"),
]
FAULTS = ["timeout_after_commit", "500_after_commit", "reset_after_commit"]


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize(("kind", "token", "method"), CASES)
def test_lost_answer_is_one_operation_resolved_by_reconciliation(
    merchant_a, sandbox, single_attempt, kind, token, method, fault
):
    body = {**PAYMENT_BODY, "amount": 10000, "payment_method": token.format(fault=fault)}
    if method == "manual":
        body["capture_method"] = "manual"
    payment = merchant_a.create_payment(body).json()
    path = {"capture": "capture", "void": "void", "refund": "refunds"}[kind]
    first = post(merchant_a, f"/payments/{payment['id']}/{path}", key="lost")
    assert first.status_code == 202, first.content
    assert "Retry-After" in first
    operation = PaymentOperation.objects.get(kind=kind)
    assert operation.status == "pending"
    pending_status = {"capture": "capture_pending", "void": "void_pending", "refund": "succeeded"}
    assert Payment.objects.get(pk=payment["id"]).status == pending_status[kind]

    reports = reconcile_all()
    assert [r.result for r in reports] == [ReconciliationResult.RESOLVED]
    operation.refresh_from_db()
    assert operation.status == "succeeded"
    final = Payment.objects.get(pk=payment["id"])
    if kind == "capture":
        assert (final.status, final.amount_captured) == ("succeeded", 10000)
        assert sandbox.charges(payment["id"])[0]["amount_captured"] == 10000
    elif kind == "void":
        assert final.status == "canceled"
        assert sandbox.charges(payment["id"])[0]["voided"] is True
    else:
        assert final.amount_refunded == 10000
        assert len(sandbox.refund_listing()) == 1
    replay = post(merchant_a, f"/payments/{payment['id']}/{path}", key="lost")
    assert replay.status_code == (201 if kind == "refund" else 200)
    assert replay["Idempotent-Replayed"] == "true"


def test_merchant_retry_of_a_202_resends_with_the_same_acquirer_key(
    merchant_a, sandbox, single_attempt
):
    payment = captured_payment(merchant_a, token="tok_refund_500_after_commit")
    first = post(merchant_a, f"/payments/{payment['id']}/refunds", {"amount": 700}, key="r")
    assert first.status_code == 202
    retry = post(merchant_a, f"/payments/{payment['id']}/refunds", {"amount": 700}, key="r")
    assert retry.status_code == 201
    assert retry.json()["status"] == "succeeded"
    assert len(sandbox.refund_listing()) == 1
    assert PaymentOperation.objects.count() == 1


def test_the_sweep_picks_up_due_operations(merchant_a, sandbox, single_attempt):
    payment = manual_payment(merchant_a, token="tok_capture_500_after_commit")
    assert post(merchant_a, f"/payments/{payment['id']}/capture").status_code == 202
    later = timezone.now() + timedelta(hours=1)
    reports = operation_reconciliation_sweep(
        client=acquirer_client(), policy=POLICY, clock=lambda: later, random=lambda: 0.0
    )
    assert [r.result for r in reports] == [ReconciliationResult.RESOLVED]


def test_an_old_unresolved_operation_goes_to_needs_review(merchant_a, sandbox, single_attempt):
    payment = manual_payment(merchant_a, token="tok_capture_500_after_commit")
    assert post(merchant_a, f"/payments/{payment['id']}/capture", key="k").status_code == 202
    sandbox.reset()  # the acquirer forgets: no trace to find
    operation = PaymentOperation.objects.get()
    much_later = timezone.now() + timedelta(seconds=POLICY.max_age + 1)
    report = operation_reconciliation_run(
        operation.pk, client=acquirer_client(), policy=POLICY, clock=lambda: much_later
    )
    assert report.result is ReconciliationResult.NEEDS_REVIEW
    operation.refresh_from_db()
    assert operation.status == "needs_review"
    assert Payment.objects.get(pk=payment["id"]).status == "capture_pending"


def test_expired_authorization_holds_are_voided(merchant_a, sandbox):
    payment = manual_payment(merchant_a)
    fresh = manual_payment(merchant_a)
    later = timezone.now() + timedelta(days=7, seconds=1)
    Payment.objects.filter(pk=fresh["id"]).update(created_at=later)
    voids = authorization_holds_expire(
        client=acquirer_client(), hold_seconds=7 * 86400, clock=lambda: later
    )
    assert len(voids) == 1
    assert Payment.objects.get(pk=payment["id"]).status == "canceled"
    assert Payment.objects.get(pk=fresh["id"]).status == "requires_capture"
    void = PaymentOperation.objects.get()
    assert (void.kind, void.reason, void.idempotency_key) == ("void", "hold_expired", None)
    assert sandbox.charges(payment["id"])[0]["voided"] is True
