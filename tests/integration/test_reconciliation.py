"""Reconciliation on real PostgreSQL against the sandbox acquirer, with an injected clock."""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.utils import timezone

from idempotency.models import IdempotencyKey
from payments.acquirer.client import acquirer_client
from payments.models import Payment, PaymentEvent
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    ReconciliationResult,
    payment_reconcile,
    reconciliation_backoff,
    reconciliation_backoff_bound,
    reconciliation_claim_due,
    reconciliation_claim_payment,
    reconciliation_sweep,
)
from tests.factories import MerchantFactory, PaymentFactory
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = ReconciliationPolicy(
    grace=60, backoff_base=30, backoff_cap=1800, max_age=6 * 3600, max_attempts=5
)


def reconcile(payment_id: str, at: datetime, random=lambda: 0.5):
    """Claim then reconcile one payment at the injected instant ``at``."""
    assert reconciliation_claim_payment(payment_id=payment_id, now=at, policy=POLICY)
    return payment_reconcile(
        payment_id=payment_id,
        client=acquirer_client(),
        policy=POLICY,
        clock=lambda: at,
        random=random,
    )


def crashed_payment(merchant, created_at: datetime, payment_method: str = "tok_visa") -> Payment:
    """A payment whose request died right after phase 1: processing, key in progress."""
    key = IdempotencyKey.objects.create(
        merchant=merchant, key=f"crash-{created_at.timestamp()}", method="POST", route="/payments",
        request_fingerprint="0" * 64, status="in_progress", locked_at=created_at,
        created_at=created_at, expires_at=created_at + timedelta(days=1),
    )  # fmt: skip
    return PaymentFactory(
        merchant=merchant, idempotency_key=key, status="processing", payment_method=payment_method,
        created_at=created_at, next_check_at=created_at + timedelta(seconds=60),
    )  # fmt: skip


def test_timeout_after_commit_is_resolved_and_the_key_replays_the_final_answer(
    merchant_a, sandbox, single_attempt
):
    """202 processing, then a look-up finds the charge: succeeded; the key replays the 201."""
    body = {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    first = merchant_a.create_payment(body, key="rec-1")
    payment_id = first.json()["id"]
    assert first.status_code == 202
    outcome = reconcile(payment_id, timezone.now() + timedelta(seconds=3))
    assert outcome.result is ReconciliationResult.RESOLVED
    payment = Payment.objects.get(pk=payment_id)
    assert payment.status == "succeeded"
    assert payment.acquirer_reference.startswith("ch_")
    assert payment.next_check_at is None
    replay = merchant_a.create_payment(body, key="rec-1")
    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json()["status"] == "succeeded"
    assert sandbox.stats()["charges_total"] == 1


def test_500_after_commit_is_resolved_by_look_up(merchant_a, sandbox, single_attempt):
    """The acquirer's 500 after recording: the look-up finds the charge; one charge."""
    payment_id = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_500_after_commit"}
    ).json()["id"]
    assert reconcile(payment_id, timezone.now()).result is ReconciliationResult.RESOLVED
    assert Payment.objects.get(pk=payment_id).status == "succeeded"
    assert sandbox.stats()["charges_total"] == 1


def test_crashed_request_is_left_alone_within_grace_then_resent_once(merchant_a, sandbox):
    """Died after phase 1, never sent: not re-sent within the grace period; after it, re-sent
    with the payment's own acquirer key: succeeded, one charge, the key completed with 201."""
    t0 = timezone.now() - timedelta(seconds=120)
    payment = crashed_payment(merchant_a.merchant, t0)
    IdempotencyKey.objects.update(locked_at=t0 - timedelta(minutes=5))  # the request is dead
    waiting = reconcile(payment.id, t0 + timedelta(seconds=59))
    assert waiting.result is ReconciliationResult.WAITING
    assert waiting.next_check_at == t0 + timedelta(seconds=59 + 15)  # backoff, after grace
    assert sandbox.stats()["charges_total"] == 0
    resolved = reconcile(payment.id, t0 + timedelta(seconds=74))
    assert resolved.result is ReconciliationResult.RESOLVED
    assert sandbox.charges(payment.id)[0]["status"] == "approved"
    assert sandbox.stats()["charges_total"] == 1
    key = IdempotencyKey.objects.get()
    assert (key.status, key.response_status) == ("completed", 201)


def test_a_live_request_holding_the_key_is_not_touched(merchant_a, sandbox):
    """A key locked a moment ago belongs to a running request: checked again after the lock."""
    now = timezone.now()
    payment = crashed_payment(merchant_a.merchant, now - timedelta(seconds=5))
    IdempotencyKey.objects.update(locked_at=now - timedelta(seconds=5))
    outcome = reconcile(payment.id, now)
    assert outcome.result is ReconciliationResult.IN_FLIGHT
    assert outcome.next_check_at == now + timedelta(seconds=55)
    assert sandbox.stats()["requests_total"] == 0


def test_acquirer_down_schedules_the_next_check_never_fails_the_payment(merchant_a, settings):
    """Connection refused on look-up: still processing, next check by full-jitter backoff."""
    settings.ACQUIRER_BASE_URL = "http://127.0.0.1:9"
    now = timezone.now()
    payment = crashed_payment(merchant_a.merchant, now - timedelta(minutes=10))
    IdempotencyKey.objects.update(locked_at=now - timedelta(minutes=10))
    outcome = reconcile(payment.id, now, random=lambda: 0.5)
    payment.refresh_from_db()
    assert outcome.result is ReconciliationResult.RETRY_LATER
    assert payment.status == "processing"
    assert payment.next_check_at == now + timedelta(seconds=15)  # 0.5 x min(1800, 30 x 2^0)
    assert payment.reconciliation_lease_until is None
    event = payment.events.get(type="reconciliation_attempt")
    assert event.data["error"] == "ConnectionFailedError"


def test_backoff_grows_with_attempts(merchant_a, settings):
    """The n-th failed check waits random() x min(1800, 30 x 2^(n-1)) seconds."""
    settings.ACQUIRER_BASE_URL = "http://127.0.0.1:9"
    now = timezone.now()
    payment = crashed_payment(merchant_a.merchant, now - timedelta(minutes=10))
    IdempotencyKey.objects.update(locked_at=now - timedelta(minutes=10))
    Payment.objects.filter(pk=payment.pk).update(reconciliation_attempts=3)  # the 4th check
    outcome = reconcile(payment.id, now, random=lambda: 0.999)
    assert outcome.next_check_at == now + timedelta(seconds=0.999 * 240)


@pytest.mark.parametrize(
    ("attempt", "bound"),
    [
        (0, 30),
        (1, 60),
        (2, 120),
        (3, 240),
        (4, 480),
        (5, 960),
        (6, 1800),
        (7, 1800),
        (10_000, 1800),
    ],
)
def test_backoff_bound_schedule(attempt, bound):
    """From 30 s doubling, capped at 30 min (the only cap), no overflow for huge attempts."""
    assert reconciliation_backoff_bound(attempt, base=30, cap=1800) == bound


def test_backoff_draws_inside_the_bound():
    """Full jitter: uniform(0, bound) from the injected random source."""
    assert reconciliation_backoff(2, base=30, cap=1800, random=lambda: 0.0) == 0
    assert reconciliation_backoff(2, base=30, cap=1800, random=lambda: 0.25) == 30


def test_unresolvable_payment_reaches_needs_review_at_max_age(merchant_a, sandbox):
    """Unknown to the acquirer at the maximum age: needs_review with a reason, never re-sent."""
    t0 = timezone.now() - timedelta(hours=7)
    payment = crashed_payment(merchant_a.merchant, t0)
    outcome = reconcile(payment.id, t0 + timedelta(hours=6))
    payment.refresh_from_db()
    assert outcome.result is ReconciliationResult.NEEDS_REVIEW
    assert payment.status == "needs_review"
    event = payment.events.get(type="needs_review")
    assert "maximum age" in event.data["reason"]
    assert sandbox.stats()["charges_total"] == 0


def test_too_many_attempts_reach_needs_review(merchant_a, settings):
    """After max_attempts failed checks the payment goes to a human."""
    settings.ACQUIRER_BASE_URL = "http://127.0.0.1:9"
    now = timezone.now()
    payment = crashed_payment(merchant_a.merchant, now - timedelta(minutes=30))
    Payment.objects.filter(pk=payment.pk).update(reconciliation_attempts=POLICY.max_attempts)
    assert reconcile(payment.id, now).result is ReconciliationResult.NEEDS_REVIEW
    assert (
        "5 reconciliation attempts"
        in Payment.objects.get().events.get(type="needs_review").data["reason"]
    )


def test_found_at_max_age_is_still_resolved(merchant_a, sandbox, single_attempt):
    """A late look-up that finds the charge resolves it rather than escalating."""
    payment_id = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_500_after_commit"}
    ).json()["id"]
    later = timezone.now() + timedelta(hours=7)
    assert reconcile(payment_id, later).result is ReconciliationResult.RESOLVED


def test_two_sweeps_in_parallel_transition_each_payment_once(sandbox):
    """100 due payments, two sweeps at once until nothing is due: 100 transitions, 100 charges."""
    merchant = MerchantFactory()
    t0 = timezone.now() - timedelta(minutes=10)
    for _ in range(100):
        PaymentFactory(merchant=merchant, status="processing", created_at=t0, next_check_at=t0)
    policy = ReconciliationPolicy(grace=60, batch_size=10)
    errors: list[BaseException] = []

    def sweep_until_done() -> None:
        try:
            while reconciliation_sweep(client=acquirer_client(), policy=policy):
                pass
        except BaseException as exc:  # noqa: BLE001 - a thread: every error is surfaced below
            errors.append(exc)
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=sweep_until_done) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert PaymentEvent.objects.filter(type="reconciled").count() == 100
    assert Payment.objects.filter(status="succeeded").count() == 100
    assert sandbox.stats()["charges_total"] == 100


def test_claim_skips_rows_held_by_another_worker(merchant_a):
    """A payment under lease is not claimed again until the lease ends."""
    now = timezone.now()
    payment = PaymentFactory(merchant=merchant_a.merchant, status="processing", next_check_at=now)
    assert reconciliation_claim_due(now=now, policy=POLICY) == [payment.id]
    assert (
        reconciliation_claim_due(now=now + timedelta(seconds=POLICY.lease - 1), policy=POLICY) == []
    )
    assert reconciliation_claim_due(now=now + timedelta(seconds=POLICY.lease), policy=POLICY) == [
        payment.id
    ]
    assert Payment.objects.get().reconciliation_attempts == 2


def test_resolved_payments_are_not_claimed(merchant_a):
    """Only processing payments are reconciled."""
    PaymentFactory(merchant=merchant_a.merchant, status="succeeded", next_check_at=timezone.now())
    assert reconciliation_claim_due(now=timezone.now(), policy=POLICY) == []


def test_command_reconciles_one_payment_and_prints_it(merchant_a, sandbox, capsys, single_attempt):
    """`reconcile_payments --payment ID` runs the same code and says what it did."""
    payment_id = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_500_after_commit"}
    ).json()["id"]
    call_command("reconcile_payments", "--payment", payment_id)
    assert f"{payment_id}: resolved succeeded" in capsys.readouterr().out
    assert Payment.objects.get(pk=payment_id).status == "succeeded"


def test_command_dry_run_changes_nothing(merchant_a, sandbox, capsys, single_attempt):
    """--dry-run looks up and prints; the payment stays processing."""
    payment_id = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_500_after_commit"}
    ).json()["id"]
    call_command("reconcile_payments", "--payment", payment_id, "--dry-run")
    out = capsys.readouterr().out
    assert "approved" in out and "dry run" in out
    assert Payment.objects.get(pk=payment_id).status == "processing"


def test_command_dry_run_reports_processing_payments_not_yet_due(
    merchant_a, sandbox, capsys, single_attempt
):
    """Two processing payments whose first check is still ahead: both examined and looked up,
    each said not due yet, and nothing changes (it used to say "0 examined")."""
    ids = [
        merchant_a.create_payment(
            {**PAYMENT_BODY, "payment_method": "tok_500_after_commit"}
        ).json()["id"]
        for _ in range(2)
    ]
    Payment.objects.filter(pk__in=ids).update(next_check_at=timezone.now() + timedelta(minutes=5))
    call_command("reconcile_payments", "--dry-run")
    out = capsys.readouterr().out
    assert "2 processing payment(s) examined, 0 due now" in out
    for payment_id in ids:
        assert re.search(rf"{payment_id}: processing, next check in \d+ s, .*approved", out), out
    assert set(Payment.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        "processing"
    }


def test_max_age_must_stay_well_below_acquirer_key_retention(settings):
    """A maximum age over half the acquirer's key retention is a configuration error."""
    settings.RECONCILIATION_MAX_AGE_SECONDS = 20 * 3600
    assert [e.id for e in run_checks()] == ["payments.E001"]


def test_within_grace_the_next_check_is_not_before_the_grace_ends(merchant_a, sandbox):
    """A short backoff draw never brings a re-send before the grace period ends."""
    t0 = timezone.now() - timedelta(seconds=120)
    payment = crashed_payment(merchant_a.merchant, t0)
    IdempotencyKey.objects.update(locked_at=t0 - timedelta(minutes=5))
    waiting = reconcile(payment.id, t0 + timedelta(seconds=10), random=lambda: 0.0)
    assert waiting.next_check_at == t0 + timedelta(seconds=60)


@pytest.mark.parametrize("token", ["tok_reset_after_commit", "tok_500_after_commit"])
def test_resend_that_fails_after_commit_is_resolved_with_one_charge(merchant_a, sandbox, token):
    """A re-send the acquirer records and then answers badly (reset, 500): the client's retry or
    the next check gets the recorded charge back: succeeded, exactly one charge."""
    t0 = timezone.now() - timedelta(minutes=5)
    payment = crashed_payment(merchant_a.merchant, t0, payment_method=token)
    IdempotencyKey.objects.update(locked_at=t0)
    now = timezone.now()
    for _ in range(3):  # at most a few checks; each uses the same acquirer idempotency key
        if reconcile(payment.id, now).result is ReconciliationResult.RESOLVED:
            break
        now += timedelta(hours=1)
    assert Payment.objects.get().status == "succeeded"
    assert sandbox.stats()["charges_total"] == 1


def test_lagging_look_up_is_not_resent_before_grace_and_charges_once(merchant_a, sandbox):
    """The acquirer's look-up lags 90 s: nothing is re-sent within the grace period; after it,
    the re-send with the same key gets the recorded charge back: still exactly one charge."""
    body = {**PAYMENT_BODY, "payment_method": "tok_lookup_lag_90"}
    t0 = timezone.now()
    payment_id = merchant_a.create_payment(body).json()["id"]
    Payment.objects.filter(pk=payment_id).update(status="processing", created_at=t0)  # unknown
    within = reconcile(payment_id, t0 + timedelta(seconds=30))
    assert within.result is ReconciliationResult.WAITING
    assert sandbox.stats()["requests_by_status"].get("201", 0) == 1  # only the first request
    after = reconcile(payment_id, t0 + timedelta(seconds=61))
    assert after.result is ReconciliationResult.RESOLVED
    assert sandbox.stats()["charges_total"] == 1


def test_look_up_answered_429_waits_for_retry_after(merchant_a, sandbox):
    """The acquirer answers the look-up 429 with Retry-After: 600: one look-up, no re-send, and
    the next check is not before the acquirer's time (the sweep does not take it earlier)."""
    sandbox.set_condition(
        "outage", duration_seconds=3600, failure=429, retry_after=600, endpoints=["GET /charges"]
    )
    now = timezone.now()
    payment = crashed_payment(merchant_a.merchant, now - timedelta(minutes=10))
    IdempotencyKey.objects.update(locked_at=now - timedelta(minutes=10))
    outcome = reconcile(payment.id, now, random=lambda: 0.0)
    assert outcome.result is ReconciliationResult.RETRY_LATER
    assert outcome.next_check_at >= now + timedelta(seconds=600)
    assert sandbox.stats()["requests_by_endpoint"]["GET /charges"]["429"] == 1
    assert sandbox.stats()["requests_by_endpoint"]["GET /charges"]["total"] == 1
    assert "POST /charges" not in sandbox.stats()["requests_by_endpoint"]
    assert reconciliation_claim_due(now=now + timedelta(seconds=300), policy=POLICY) == []
    event = Payment.objects.get().events.get(type="reconciliation_attempt")
    assert event.data["error"] == "RateLimitedError"


def test_operator_reconcile_of_needs_review_looks_up_and_resolves(
    merchant_a, sandbox, single_attempt
):
    """An operator's "Reconcile now" on a needs_review payment the acquirer has: resolved."""
    payment_id = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_500_after_commit"}
    ).json()["id"]
    Payment.objects.filter(pk=payment_id).update(status="needs_review")
    now = timezone.now()
    assert not reconciliation_claim_payment(payment_id=payment_id, now=now, policy=POLICY)
    assert reconciliation_claim_payment(
        payment_id=payment_id, now=now, policy=POLICY, include_review=True
    )
    outcome = payment_reconcile(payment_id=payment_id, client=acquirer_client(), policy=POLICY)
    assert outcome.result is ReconciliationResult.RESOLVED
    assert Payment.objects.get(pk=payment_id).status == "succeeded"
    assert sandbox.stats()["charges_total"] == 1


def test_operator_reconcile_of_needs_review_never_resends(merchant_a, sandbox):
    """Unknown to the acquirer: it stays needs_review, with an event; nothing is sent."""
    t0 = timezone.now() - timedelta(hours=7)
    payment = crashed_payment(merchant_a.merchant, t0)
    Payment.objects.filter(pk=payment.pk).update(status="needs_review")
    assert reconciliation_claim_payment(
        payment_id=payment.id, now=timezone.now(), policy=POLICY, include_review=True
    )
    outcome = payment_reconcile(payment_id=payment.id, client=acquirer_client(), policy=POLICY)
    assert outcome.result is ReconciliationResult.NEEDS_REVIEW
    assert Payment.objects.get().status == "needs_review"
    assert sandbox.stats()["requests_by_endpoint"].get("POST /charges") is None
    assert payment.events.get(type="reconciliation_attempt").data["operator_requested"] is True


def test_open_breaker_defers_the_check_and_never_fails_the_payment(merchant_a, sandbox):
    """The look-up breaker is open: nothing is sent, the next check waits for the probes."""
    acquirer_client().breakers.force_open("lookup", actor="test", reason="drill")
    now = timezone.now()
    payment = crashed_payment(merchant_a.merchant, now - timedelta(minutes=10))
    IdempotencyKey.objects.update(locked_at=now - timedelta(minutes=10))
    outcome = reconcile(payment.id, now, random=lambda: 0.0)
    payment.refresh_from_db()
    assert outcome.result is ReconciliationResult.RETRY_LATER
    assert payment.status == "processing"
    assert payment.events.get(type="reconciliation_attempt").data["error"] == "CircuitOpenError"
    assert sandbox.stats()["requests_total"] == 0


def test_an_unexpected_error_frees_the_lease_at_once(merchant_a, sandbox):
    """A bug mid-check (not an acquirer failure) re-raises, and the payment is free for the next
    sweep instead of waiting for its lease to run out."""

    class BrokenClient:
        config = acquirer_client().config  # the payment's acquirer's: reconciliation uses it
        dialect = acquirer_client().dialect  # whether it has a look-up

        def lookup(self, reference, policy=None, request_id=None):
            raise RuntimeError("a bug")

    now = timezone.now()
    payment = crashed_payment(merchant_a.merchant, now - timedelta(minutes=10))
    IdempotencyKey.objects.update(locked_at=now - timedelta(minutes=10))
    assert reconciliation_claim_payment(payment_id=payment.id, now=now, policy=POLICY)
    with pytest.raises(RuntimeError):
        payment_reconcile(payment_id=payment.id, client=BrokenClient(), policy=POLICY)
    payment.refresh_from_db()
    assert payment.reconciliation_lease_until is None
    assert payment.status == "processing"
