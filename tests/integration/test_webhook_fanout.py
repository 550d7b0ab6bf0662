"""The fan-out out of the payment's transaction (issue 26, ADR 0042), on real PostgreSQL: the
change writes one outbox row; a worker expands it into exactly one delivery per endpoint,
whoever expands it, however often, and whoever dies in the middle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from merchants.models import Merchant
from payments.core.payment_states import payment_lock, payment_transition
from payments.models import PaymentEventType
from tests.factories import PaymentFactory
from tests.support.processes import ROOT, service_env, wait_until
from webhooks.fanout import event_fan_out, events_fan_out_pending
from webhooks.models import Delivery, Event, WebhookEndpoint
from webhooks.outbox import event_record

#: Tests with a second connection (threads, a process) need committed rows; the others run in
#: the test's transaction (the fan-out's own is then a savepoint), which is much faster.
committed = pytest.mark.django_db(transaction=True)


def endpoints(merchant, n: int, *, created_at=None, events=("*",)) -> list[WebhookEndpoint]:
    at = created_at or timezone.now() - timedelta(minutes=1)
    fields = {"enabled_events": list(events), "secret": "whsec_" + "A" * 44, "created_at": at}
    return [
        WebhookEndpoint.objects.create(
            merchant=merchant, url=f"http://127.0.0.1:9/{i}", updated_at=at, **fields
        )
        for i in range(n)
    ]


def recorded(merchant, now=None) -> Event:
    with transaction.atomic():
        return event_record(
            merchant_id=merchant.pk, event_type="payment.succeeded", object_id="pay_f",
            obj={"id": "pay_f"}, now=now or timezone.now(),
        )  # fmt: skip


def per_endpoint(event: Event) -> dict[str, int]:
    found: dict[str, int] = {}
    for endpoint_id in Delivery.objects.filter(event=event).values_list("endpoint_id", flat=True):
        found[endpoint_id] = found.get(endpoint_id, 0) + 1
    return found


@pytest.mark.django_db
def test_the_payments_transaction_writes_one_row_whatever_the_endpoints():
    """A status change with the cap of endpoints (16) writes the event only: one INSERT
    statement for the outbox, no delivery, the same statements as with none."""
    statements = {}
    for count in (0, 16):
        payment = PaymentFactory(status="processing")
        endpoints(payment.merchant, count)
        with CaptureQueriesContext(connection) as queries, transaction.atomic():
            payment_transition(
                payment=payment_lock(payment.pk), to_status="succeeded",
                event_type=PaymentEventType.AUTHORIZATION_APPROVED, now=timezone.now(),
            )  # fmt: skip
        statements[count] = [
            q["sql"].split(" ", 3)[:3]
            for q in queries.captured_queries
            if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
        ]
        assert not Delivery.objects.filter(event__object_id=payment.pk).exists()
    assert statements[0] == statements[16]
    event = Event.objects.filter(object_id=payment.pk).get()
    assert event.fanned_out_at is None  # subscribed endpoints: the worker's to expand
    assert event_fan_out(event.id, now=timezone.now()) == 16


@pytest.mark.django_db
def test_an_event_nobody_is_subscribed_to_is_born_fanned_out():
    """No endpoint (or none for the type, or only ones created later): nothing to expand, no
    task enqueued; an endpoint created afterwards never receives it."""
    merchant = Merchant.objects.create(name="quiet")
    endpoints(merchant, 2, events=["refund.failed"])
    now = timezone.now()
    endpoints(merchant, 1, created_at=now + timedelta(seconds=1))
    event = recorded(merchant, now)
    assert event.fanned_out_at == now
    assert Event.objects.get(pk=event.pk).fanned_out_at == now
    assert event_fan_out(event.id, now=now) is None
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_endpoints_created_after_the_event_do_not_receive_it():
    """Decided by the endpoint's created_at against the event's, however late the fan-out."""
    merchant = Merchant.objects.create(name="late")
    now = timezone.now()
    before = endpoints(merchant, 2, created_at=now - timedelta(seconds=1))
    at_once = endpoints(merchant, 1, created_at=now)
    event = recorded(merchant, now)
    endpoints(merchant, 3, created_at=now + timedelta(microseconds=1))
    assert event_fan_out(event.id, now=now + timedelta(hours=1)) == 3
    assert set(per_endpoint(event)) == {e.id for e in before + at_once}


@pytest.mark.django_db
def test_a_second_fan_out_and_the_sweep_add_nothing():
    merchant = Merchant.objects.create(name="twice")
    endpoints(merchant, 3)
    event = recorded(merchant)
    assert events_fan_out_pending(now=timezone.now()) == 3  # the sweep expands what is left
    assert event_fan_out(event.id, now=timezone.now()) is None
    assert events_fan_out_pending(now=timezone.now()) == 0
    assert set(per_endpoint(event).values()) == {1}


@pytest.mark.django_db
def test_the_unique_constraint_is_the_backstop_for_a_delivery_already_there():
    """An event marked unexpanded again while one endpoint already has its delivery (as after
    a crash between two writes, were they ever split): the fan-out adds the others only."""
    merchant = Merchant.objects.create(name="backstop")
    first, *rest = endpoints(merchant, 4)
    event = recorded(merchant)
    event_fan_out(event.id, now=timezone.now())
    Delivery.objects.exclude(endpoint=first).delete()
    Event.objects.filter(pk=event.pk).update(fanned_out_at=None)
    assert event_fan_out(event.id, now=timezone.now()) == 3
    assert per_endpoint(event) == {e.id: 1 for e in [first, *rest]}


def _fan_out_in_thread(event_id: str, results: list, *, hold: threading.Event | None = None,
                       fail: bool = False) -> threading.Thread:  # fmt: skip
    """A second worker: fan out in a thread (its own connection); with ``hold``, keep the
    transaction open until it is set, then commit, or roll back when ``fail``."""

    def expand() -> None:
        with transaction.atomic():
            results.append(event_fan_out(event_id, now=timezone.now()))
            if hold is not None:
                hold.wait(30)
            if fail:
                raise RuntimeError("the worker dies before its commit")

    def run() -> None:
        try:
            expand()
        except RuntimeError:
            results.append("rolled back")
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


@committed
@pytest.mark.parametrize("first_commits", [True, False])
def test_two_workers_expanding_at_once_make_one_delivery_per_endpoint(first_commits):
    """The first holds its expansion uncommitted; the second waits on the event's row lock;
    the first commits (the second then inserts nothing) or rolls back (the second inserts
    every delivery). Exactly one delivery per endpoint either way."""
    merchant = Merchant.objects.create(name="race")
    made = endpoints(merchant, 16)
    event = recorded(merchant)
    hold, first, second = threading.Event(), [], []
    a = _fan_out_in_thread(event.id, first, hold=hold, fail=not first_commits)
    wait_until(lambda: first == [16], timeout=10, what="the first expansion")
    b = _fan_out_in_thread(event.id, second)
    wait_until(lambda: _waiting_on_a_lock() == 1, timeout=10, what="the second one waiting")
    assert second == []
    hold.set()
    a.join(10)
    b.join(10)
    assert first == ([16] if first_commits else [16, "rolled back"])
    assert second == ([None] if first_commits else [16])
    assert per_endpoint(event) == {e.id: 1 for e in made}


CRASHING_WORKER = """
import sys, time
import django
django.setup()
from django.db import transaction
from django.utils import timezone
from webhooks.fanout import event_fan_out
with transaction.atomic():  # the expansion done, its commit never reached
    print(event_fan_out(sys.argv[1], now=timezone.now()), flush=True)
    time.sleep(600)
"""


@committed
def test_a_worker_killed_mid_expansion_leaves_one_delivery_per_endpoint():
    """A real process expands the event and is SIGKILLed before its commit, while a second
    worker waits for the event's row: PostgreSQL rolls the first back, the second expands it,
    and a third finds nothing to do. Exactly one delivery per endpoint."""
    merchant = Merchant.objects.create(name="crash")
    made = endpoints(merchant, 16)
    event = recorded(merchant)
    worker = subprocess.Popen(
        [sys.executable, "-c", CRASHING_WORKER, event.id], cwd=ROOT, env=service_env(),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert worker.stdout.readline().strip() == "16"  # inserted, not committed
        second: list = []
        waiting = _fan_out_in_thread(event.id, second)
        wait_until(lambda: _waiting_on_a_lock() == 1, timeout=10, what="the second worker")
        assert not Delivery.objects.exists()
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        worker.stdout.close()
    waiting.join(10)
    assert second == [16]
    assert event_fan_out(event.id, now=timezone.now()) is None
    assert per_endpoint(event) == {e.id: 1 for e in made}
    assert Event.objects.get(pk=event.pk).fanned_out_at is not None
