"""Deferred submission over real HTTP with the sandbox (payments/authorization/deferral.py,
deferred.py).

``"allow_deferred": true`` and no acquirer able to take the payment now: ``202 deferred`` with a
``not_before``, nothing sent; the key answers its current state; the sweep submits it once when
the acquirer recovers, at the acquirer's pace; past the maximum age it fails; two sweeps never
submit one payment twice; a sweep killed after its commit is resolved by reconciliation.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from datetime import datetime, timedelta

import httpx
import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from config.celery_app import app
from idempotency.models import IdempotencyKey
from merchant_client import MerchantClient, Pending, ServiceUnavailable
from payments.acquirer.client import acquirer_client
from payments.authorization.deferral import DeferralPolicy
from payments.authorization.deferred_sweep import deferred_sweep
from payments.authorization.deferred_tasks import submit_due_deferred_payments
from payments.core.crashpoints import DEFERRED_CRASH_POINTS
from payments.models import Payment, PaymentEventType
from payments.reconciliation.payments import ReconciliationPolicy, reconciliation_sweep
from tests.support.api import PAYMENT_BODY
from tests.support.processes import ROOT, service_env, wait_until
from webhooks.models import Event

pytestmark = pytest.mark.django_db(transaction=True)

DEFERRABLE = PAYMENT_BODY | {"allow_deferred": True}
#: No pace of our own in these tests (the campaign measures it); batches as the settings say.
POLICY = DeferralPolicy(submit_rate=0, batch_size=50)


def later(seconds: float):
    """A clock ``seconds`` ahead of now: every deferred payment is due by then."""
    return lambda: timezone.now() + timedelta(seconds=seconds)


def open_breaker() -> None:
    acquirer_client().breakers.force_open("authorize", actor="test", reason="outage drill")


def close_breaker() -> None:
    acquirer_client().breakers.reset("authorize", actor="test", reason="recovered")


def deferred_payment(merchant, key: str) -> Payment:
    """A payment made deferred by the open breaker (the breaker is left open)."""
    open_breaker()
    response = merchant.create_payment(DEFERRABLE, key=key)
    assert response.status_code == 202, response.content
    return Payment.objects.get(pk=response.json()["id"])


def test_open_breaker_defers_sends_nothing_and_the_sweep_submits_it_once(merchant_a, sandbox):
    open_breaker()
    response = merchant_a.create_payment(DEFERRABLE, key="renewal-1")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "deferred"
    not_before = datetime.fromisoformat(body["not_before"])
    assert not_before.tzinfo is not None
    assert not_before >= datetime.fromisoformat(body["created_at"])
    assert int(response["Retry-After"]) >= 1
    assert response["Location"] == f"/payments/{body['id']}"
    assert sandbox.stats()["requests_total"] == 0

    retry = merchant_a.create_payment(DEFERRABLE, key="renewal-1")
    assert retry.status_code == 202
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.content == response.content
    assert sandbox.stats()["requests_total"] == 0

    close_breaker()
    report = deferred_sweep(client=acquirer_client(), policy=POLICY, clock=later(3600))
    assert report.submitted == [body["id"]]
    stats = sandbox.stats()
    assert stats["charges_by_reference"] == {body["id"]: 1}
    assert stats["requests_by_idempotency_key"] == {f"authorize-{body['id']}": 1}
    payment = Payment.objects.get(pk=body["id"])
    assert (payment.status, payment.not_before) == ("succeeded", None)
    types = list(payment.events.values_list("type", flat=True))
    assert PaymentEventType.PAYMENT_DEFERRED in types
    assert PaymentEventType.DEFERRED_SUBMITTED in types
    assert Event.objects.filter(object_id=payment.pk, type="payment.succeeded").count() == 1
    assert not Event.objects.filter(object_id=payment.pk, type__startswith="payment.deferred")

    # The key answers what is true now; a second sweep finds nothing to send.
    now = merchant_a.create_payment(DEFERRABLE, key="renewal-1")
    assert (now.status_code, now.json()["status"]) == (201, "succeeded")
    assert (
        deferred_sweep(client=acquirer_client(), policy=POLICY, clock=later(7200)).submitted == []
    )
    assert sandbox.stats()["charges_total"] == 1


def test_without_allow_deferred_the_open_breaker_is_still_a_503(merchant_a, sandbox):
    open_breaker()
    for body in (PAYMENT_BODY, PAYMENT_BODY | {"allow_deferred": False}):
        response = merchant_a.create_payment(body, key="plain-1")
        assert response.status_code == 503
        assert response["Content-Type"] == "application/problem+json"
        assert response.json()["code"] == "acquirer_unavailable"
        assert int(response["Retry-After"]) >= 1
    assert Payment.objects.count() == 0
    assert IdempotencyKey.objects.count() == 0


def test_allow_deferred_false_keeps_the_old_fingerprint(merchant_a, sandbox):
    first = merchant_a.create_payment(PAYMENT_BODY, key="fp-1")
    assert first.status_code == 201
    same = merchant_a.create_payment(PAYMENT_BODY | {"allow_deferred": False}, key="fp-1")
    assert (same.status_code, same.content) == (201, first.content)
    other = merchant_a.create_payment(DEFERRABLE, key="fp-1")
    assert other.status_code == 422


def test_a_first_attempt_certainly_not_applied_is_deferred(merchant_a, sandbox, single_attempt):
    """A 503 before processing: deferred (the attempt recorded), then submitted after."""
    sandbox.set_condition("outage", duration_seconds=3600, failure=503, retry_after=1)
    response = merchant_a.create_payment(DEFERRABLE, key="renewal-503")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "deferred"
    payment = Payment.objects.get(pk=body["id"])
    assert (payment.not_before - payment.updated_at).total_seconds() >= 1  # the acquirer's wait
    assert payment.events.filter(type=PaymentEventType.ACQUIRER_ATTEMPT).count() == 1
    assert sandbox.stats()["charges_total"] == 0

    sandbox.clear_conditions()
    client = acquirer_client()
    report = deferred_sweep(client=client, policy=POLICY, clock=later(3600))
    assert report.stopped == "rate_gate"  # the 503's Retry-After closed the shared gate
    wait_until(lambda: client.gate.remaining(client.scope) == 0, timeout=5, what="the gate")
    report = deferred_sweep(client=client, policy=POLICY, clock=later(3600))
    assert report.submitted == [payment.pk]
    payment.refresh_from_db()
    assert payment.status == "succeeded"
    assert sandbox.stats()["charges_by_reference"] == {payment.pk: 1}


def test_a_submission_certainly_not_applied_defers_again_and_stops_the_batch(
    merchant_a, sandbox, single_attempt
):
    first = deferred_payment(merchant_a, "again-1")
    second = deferred_payment(merchant_a, "again-2")
    close_breaker()
    sandbox.set_condition("outage", duration_seconds=3600, failure=503)
    clock = later(3600)
    report = deferred_sweep(
        client=acquirer_client(), policy=POLICY, clock=clock, random=lambda: 0.5
    )
    assert report.stopped == "refused"
    assert len(report.deferred_again) == 1
    assert report.submitted == []
    again = Payment.objects.get(pk=report.deferred_again[0])
    assert again.status == "deferred"
    assert again.deferred_attempts == 2
    assert again.not_before > clock() - timedelta(seconds=5)
    untouched = ({first.pk, second.pk} - {again.pk}).pop()
    assert Payment.objects.get(pk=untouched).deferred_attempts == 1
    assert sandbox.stats()["requests_by_endpoint"]["POST /charges"]["total"] == 1
    assert sandbox.stats()["charges_total"] == 0


def test_the_sweep_sends_nothing_while_the_breaker_is_open(merchant_a, sandbox):
    deferred_payment(merchant_a, "held-1")
    deferred_payment(merchant_a, "held-2")
    report = deferred_sweep(client=acquirer_client(), policy=POLICY, clock=later(3600))
    assert (report.stopped, report.submitted) == ("breaker", [])
    assert set(Payment.objects.values_list("status", flat=True)) == {"deferred"}
    assert sandbox.stats()["requests_total"] == 0


def test_past_the_maximum_age_it_fails_acquirer_unavailable(merchant_a, sandbox):
    payment = deferred_payment(merchant_a, "old-1")
    report = deferred_sweep(
        client=acquirer_client(), policy=POLICY, clock=later(POLICY.max_age + 1)
    )
    assert report.expired == [payment.pk]
    payment.refresh_from_db()
    assert (payment.status, payment.failure_code) == ("failed", "acquirer_unavailable")
    assert Event.objects.filter(object_id=payment.pk, type="payment.failed").count() == 1
    replay = merchant_a.create_payment(DEFERRABLE, key="old-1")
    assert replay.status_code == 201
    assert (replay.json()["status"], replay.json()["failure_code"]) == (
        "failed",
        "acquirer_unavailable",
    )
    assert sandbox.stats()["requests_total"] == 0


def test_two_sweeps_at_once_never_submit_one_payment_twice(merchant_a, sandbox):
    ids = {deferred_payment(merchant_a, f"par-{i}").pk for i in range(16)}
    close_breaker()
    sandbox.set_condition("latency", distribution="fixed", ms=20)
    reports = []
    start = threading.Barrier(4)

    def sweep() -> None:
        try:
            start.wait()
            reports.append(
                deferred_sweep(client=acquirer_client(), policy=POLICY, clock=later(3600))
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    submitted = [pk for report in reports for pk in report.submitted]
    assert sorted(submitted) == sorted(ids)  # each once, by one sweep
    assert sum(1 for report in reports if report.submitted) >= 2  # they did run at once
    stats = sandbox.stats()
    assert stats["charges_by_reference"] == dict.fromkeys(ids, 1)
    assert set(stats["requests_by_idempotency_key"].values()) == {1}
    assert set(Payment.objects.values_list("status", flat=True)) == {"succeeded"}


@pytest.mark.parametrize("crash_point", DEFERRED_CRASH_POINTS)
def test_a_sweep_killed_after_its_commit_is_resolved_by_reconciliation(
    merchant_a, sandbox, crash_point
):
    payment = deferred_payment(merchant_a, f"crash-{crash_point}")
    close_breaker()  # this process's: the killed one has its own, in memory, closed
    Payment.objects.filter(pk=payment.pk).update(not_before=timezone.now())
    env = service_env(
        ACQUIRER_BASE_URL=sandbox.url,
        ACQUIRER_API_KEY=sandbox.api_key,
        PAYMENTS_CRASH_POINT=crash_point,
    )
    command = [sys.executable, "manage.py", "submit_deferred_payments"]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert run.returncode == -9, run.stderr.decode()[-2000:]
    payment.refresh_from_db()
    assert payment.status == "processing"  # committed before the call: reconciliation's now
    assert payment.next_check_at is not None
    sent = sandbox.stats()["charges_total"]
    assert sent == (1 if crash_point == "deferred_after_acquirer_answer" else 0)

    reports = reconciliation_sweep(
        client=acquirer_client(),
        policy=ReconciliationPolicy(grace=0),
        clock=lambda: payment.next_check_at + timedelta(seconds=1),
    )
    assert [report.payment_id for report in reports] == [payment.pk]
    payment.refresh_from_db()
    assert payment.status == "succeeded"
    assert sandbox.stats()["charges_by_reference"] == {payment.pk: 1}
    replay = merchant_a.create_payment(DEFERRABLE, key=f"crash-{crash_point}")
    assert (replay.status_code, replay.json()["status"]) == (201, "succeeded")


def _non_booleans(seed: int = 24, count: int = 40) -> list[object]:
    """JSON values that are not booleans: the strings and numbers that look like one, and a
    seeded mix of integers, floats, strings, null, lists and objects."""
    rnd = random.Random(seed)
    corpus: list[object] = [1, 0, -1, 1.0, 0.0, "true", "false", "True", "1", "yes", "", None]
    corpus += [[], {}, [True], {"allow_deferred": True}]
    makers = (
        # Short numbers: a long digit run is refused earlier, as card data.
        lambda: rnd.randint(-(10**6), 10**6),
        lambda: round(rnd.uniform(-1e4, 1e4), 2),
        lambda: "".join(rnd.choice("truefalsyTRUE01 ") for _ in range(rnd.randint(1, 8))),
        lambda: [rnd.choice([True, False, 1, "x"]) for _ in range(rnd.randint(0, 3))],
        lambda: {rnd.choice(["a", "true"]): rnd.choice([True, 0])},
    )
    while len(corpus) < count:
        corpus.append(rnd.choice(makers)())
    return corpus


def test_allow_deferred_refuses_every_non_boolean(merchant_a, sandbox):
    for value in _non_booleans():
        body = json.dumps(PAYMENT_BODY | {"allow_deferred": value})
        response = merchant_a.create_payment(body)
        assert response.status_code == 400, value
        assert response["Content-Type"] == "application/problem+json"
        problem = response.json()
        assert problem["code"] == "validation_error"
        assert [error["field"] for error in problem["errors"]] == ["allow_deferred"]
    assert Payment.objects.count() == 0
    assert sandbox.stats()["requests_total"] == 0


class DjangoTransport(httpx.BaseTransport):
    """httpx requests answered by this process's Django (the real API, in process)."""

    def __init__(self) -> None:
        self.client = Client()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        skip = {"content-type", "content-length", "host"}
        headers = {
            f"HTTP_{name.upper().replace('-', '_')}": value
            for name, value in request.headers.items()
            if name.lower() not in skip
        }
        answer = self.client.generic(
            request.method,
            request.url.raw_path.decode(),
            request.read(),
            content_type=request.headers.get("content-type", ""),
            **headers,
        )
        return httpx.Response(
            answer.status_code, headers=list(answer.items()), content=answer.content
        )


def test_the_merchant_client_sends_allow_deferred_and_reads_a_deferred_payment(merchant_a, sandbox):
    open_breaker()
    api = MerchantClient("http://testserver", merchant_a.api_key, transport=DjangoTransport())
    result = api.create_payment(
        1999, "EUR", "tok_visa", allow_deferred=True, idempotency_key="mc-1"
    )
    assert isinstance(result, Pending)
    payment = result.object
    assert (payment.status, payment.final) == ("deferred", False)
    assert payment.not_before is not None and payment.not_before.tzinfo is not None
    assert result.retry_after is not None and result.retry_after >= 1
    with pytest.raises(ServiceUnavailable):  # without it: the 503 of today
        api.create_payment(1999, "EUR", "tok_visa", idempotency_key="mc-2")
    assert sandbox.stats()["requests_total"] == 0


def test_the_schema_and_the_admin_know_the_deferred_state(merchant_a, sandbox, client):
    schema = client.get("/openapi.json").json()
    body = schema["components"]["schemas"]["PaymentCreateInputRequest"]["properties"]
    assert body["allow_deferred"]["type"] == "boolean"
    payment = schema["components"]["schemas"]["Payment"]["properties"]
    assert payment["not_before"]["format"] == "date-time"
    assert payment["not_before"]["nullable"] is True
    statuses = {
        value
        for component in schema["components"]["schemas"].values()
        for value in component.get("enum", [])
    }
    assert "deferred" in statuses

    deferred = deferred_payment(merchant_a, "admin-1")
    close_breaker()
    other = merchant_a.create_payment(PAYMENT_BODY, key="admin-2").json()["id"]
    staff = User.objects.create_superuser("ops", password="pw")
    client.force_login(staff)
    listing = client.get("/admin/payments/payment/", {"status": "deferred"})
    assert {p.pk for p in listing.context["cl"].result_list} == {deferred.pk}
    assert other not in listing.content.decode()
    page = client.get(f"/admin/payments/payment/{quote(deferred.pk)}/change/").content.decode()
    assert "Deferred submission" in page and "Not before" in page


def test_beat_runs_the_sweep_task_and_celery_imports_it(merchant_a, sandbox, settings):
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "payments.deferred_tasks.submit_due_deferred_payments" in tasks
    app.loader.import_default_modules()
    assert "payments.deferred_tasks.submit_due_deferred_payments" in app.tasks

    payment = deferred_payment(merchant_a, "beat-1")
    close_breaker()
    Payment.objects.filter(pk=payment.pk).update(not_before=timezone.now())
    settings.DEFERRED_SUBMIT_RATE_PER_SECOND = 0
    assert submit_due_deferred_payments() == 1
    payment.refresh_from_db()
    assert payment.status == "succeeded"
