"""Many deliveries in flight from one process (ADR 0050, ``webhooks.dispatch``), on real
PostgreSQL and a real receiver that holds requests open until the test lets them go: the
attempts overlap, the per-endpoint cap still holds, a hanging endpoint holds back no other
endpoint's deliveries (no batch to wait for), and each attempt's thread gives its connection
back. Counts, never times."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from django.db import connection

from gateway_client import MemoryStore
from merchants.models import Merchant
from tests.support.fake_time import FakeClock
from tests.support.holding_receiver import HoldingReceiver, holding_receiver
from tests.support.processes import wait_until
from tests.support.webhook_events import event_written
from webhooks.delivery import (
    AttemptOutcome,
    DeliveryPolicy,
    DeliveryRuntime,
    claim_due,
    connection_release_before_call,
    endpoint_breaker,
)
from webhooks.dispatch import deliver_due
from webhooks.models import Delivery, DeliveryAttempt
from webhooks.services import endpoint_create

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def receiver():
    with holding_receiver() as server:
        yield server


def runtime(clock: FakeClock, **policy) -> DeliveryRuntime:
    options = {"timeout": 60.0, "connect_timeout": 5.0, "allow_local": True} | policy
    store = MemoryStore(clock=lambda: clock.now.timestamp())
    return DeliveryRuntime(
        DeliveryPolicy(**options),
        clock=clock,
        random=lambda: 0.5,
        breaker=lambda endpoint_id: endpoint_breaker(endpoint_id, store=store),
    )


def merchant_with_endpoint(receiver: HoldingReceiver, group: str, clock: FakeClock) -> Merchant:
    merchant = Merchant.objects.create(name=f"dispatch-{group}")
    endpoint_create(merchant=merchant, url=receiver.url(group), enabled_events=["*"], clock=clock)
    return merchant


class Deliverer:
    """``deliver_due`` in a thread of its own, as a worker runs it; its outcomes when done."""

    def __init__(self, run: DeliveryRuntime) -> None:
        self.outcomes: list[AttemptOutcome | None] = []
        self.thread = threading.Thread(target=self._run, args=(run,))

    def _run(self, run: DeliveryRuntime) -> None:
        try:
            self.outcomes = deliver_due(runtime=run, budget_seconds=600)
        finally:
            connection.close()

    def __enter__(self) -> Deliverer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(120)
        assert not self.thread.is_alive()


def test_deliveries_to_several_slow_endpoints_overlap(receiver):
    """Six merchants' endpoints hold every request: all six attempts are held at once by one
    deliverer (six threads), then all are delivered once released."""
    clock = FakeClock(START)
    merchants = [merchant_with_endpoint(receiver, f"slow{n}", clock) for n in range(6)]
    for n, merchant in enumerate(merchants):
        receiver.hold(f"slow{n}")
        event_written(merchant.pk, f"pay_{n}", now=clock.now)
    with Deliverer(runtime(clock, threads=6)) as deliverer:
        wait_until(lambda: receiver.held_in_all() == 6, timeout=60, what="six held at once")
        receiver.release()
    assert deliverer.outcomes == [AttemptOutcome.DELIVERED] * 6
    assert [receiver.peak(f"slow{n}") for n in range(6)] == [1] * 6
    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}


def test_the_per_endpoint_cap_holds_with_many_slots_free(receiver):
    """Six events to one endpoint (cap 2) and eight slots: two attempts held, the others not
    claimed meanwhile (a claim now takes nothing); once released, all six are delivered, never
    more than two at once."""
    clock = FakeClock(START)
    merchant = merchant_with_endpoint(receiver, "capped", clock)
    receiver.hold("capped")
    for n in range(6):
        event_written(merchant.pk, f"pay_{n}", now=clock.now)
    run = runtime(clock, threads=8, endpoint_concurrency=2, merchant_concurrency=8)
    with Deliverer(run) as deliverer:
        wait_until(lambda: receiver.held("capped") == 2, timeout=60, what="two held")
        assert claim_due(now=clock.now, policy=run.policy)[0] == []
        assert Delivery.objects.filter(lease_token__isnull=False).count() == 2
        receiver.release("capped")
    assert deliverer.outcomes == [AttemptOutcome.DELIVERED] * 6
    assert receiver.peak("capped") == 2
    assert len(receiver.answered("capped")) == 6


def test_a_hanging_endpoint_holds_back_no_other_endpoints_deliveries(receiver):
    """Merchant A's endpoint hangs on both its slots; B's five deliveries, more than the slots
    left (two of four), are all delivered while A's two requests are still held (no attempt
    of A's recorded yet): the deliverer claims again as each of B's ends."""
    clock = FakeClock(START)
    a = merchant_with_endpoint(receiver, "hanging", clock)
    b = merchant_with_endpoint(receiver, "quick", clock)
    receiver.hold("hanging")
    for n in range(2):
        event_written(a.pk, f"pay_a{n}", now=clock.now)
    clock.advance(1)
    for n in range(5):
        event_written(b.pk, f"pay_b{n}", now=clock.now)
    run = runtime(clock, threads=4, endpoint_concurrency=2, merchant_concurrency=4)
    with Deliverer(run) as deliverer:
        wait_until(
            lambda: (
                len(receiver.answered("quick")) == 5
                and Delivery.objects.filter(endpoint__merchant=b, status="delivered").count() == 5
            ),
            timeout=60,
            what="B's five deliveries",
        )
        assert receiver.held("hanging") == 2
        assert not DeliveryAttempt.objects.filter(endpoint__merchant=a).exists()
        receiver.release("hanging")
    assert deliverer.outcomes.count(AttemptOutcome.DELIVERED) == 7


def test_the_connection_is_kept_without_a_pool_and_no_call_runs_in_a_transaction():
    """Without a pool (these settings, a prefork worker) the connection stays: closing would
    mean a reconnect per attempt. Inside a transaction the release refuses (no call out holds
    a lock). The pool's side is tests/e2e/test_webhooks_worker.py's, on a real pool."""
    from django.db import transaction

    connection.ensure_connection()
    connection_release_before_call()
    assert connection.connection is not None
    with transaction.atomic(), pytest.raises(RuntimeError, match="never inside a transaction"):
        connection_release_before_call()
