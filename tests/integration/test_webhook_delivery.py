"""Webhook delivery (issue 13) against a real receiver on a local socket, real PostgreSQL, an
injected clock and random source: signatures checked with ``standardwebhooks``, the retry
schedule, the disable rules, the per-endpoint breaker and concurrency cap, leases."""

from __future__ import annotations

import json
import socket
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone
from prometheus_client import REGISTRY

from card_data import contains_card_number
from gateway_client import BreakerConfig, MemoryStore
from merchants.models import Merchant
from tests.support.fake_time import FakeClock
from tests.support.processes import wait_until
from tests.support.webhook_events import event_written
from tests.support.webhook_receiver import Receiver, running_receiver, verify
from webhooks.delivery import (
    AttemptOutcome,
    DeliveryPolicy,
    DeliveryRuntime,
    claim_due,
    endpoint_breaker,
)
from webhooks.dispatch import deliver_claimed, deliver_due
from webhooks.models import Delivery, DeliveryAttempt, Event, WebhookEndpoint
from webhooks.outbox import event_record
from webhooks.serializers import event_document
from webhooks.services import endpoint_create, endpoint_enable, endpoint_rotate_secret
from webhooks.tasks import deliver_event_task

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QUIET_BREAKER = BreakerConfig(window_size=1000, minimum_calls=1000)


@pytest.fixture(scope="module")
def receiver():
    with running_receiver() as server:
        yield server


class Harness:
    """One merchant, the fake clock, a breaker store on that clock, and the runtime."""

    def __init__(self, receiver: Receiver, **policy) -> None:
        self.receiver = receiver
        self.clock = FakeClock(START)
        self.merchant = Merchant.objects.create(name=f"m-{id(self)}")
        self.store = MemoryStore(clock=lambda: self.clock.now.timestamp())
        self.breaker_config = policy.pop("breaker", None)
        options = {"timeout": 5.0, "connect_timeout": 1.0, "allow_local": True, "threads": 4}
        self.policy = DeliveryPolicy(**(options | policy))
        self.runtime = DeliveryRuntime(
            self.policy,
            clock=self.clock,
            random=lambda: 0.5,
            breaker=lambda endpoint_id: endpoint_breaker(
                endpoint_id, store=self.store, config=self.breaker_config
            ),
        )

    def endpoint(self, path: str, behaviours: list, events=("*",)) -> tuple[WebhookEndpoint, str]:
        url = self.receiver.script(path, behaviours)
        answer = endpoint_create(
            merchant=self.merchant, url=url, enabled_events=list(events), clock=self.clock
        )
        document = json.loads(answer.body)
        return WebhookEndpoint.objects.get(pk=document["id"]), document["secret"]

    def event(self, object_id: str = "pay_1", event_type: str = "payment.succeeded") -> Event:
        return event_written(self.merchant.pk, object_id, event_type=event_type, now=self.clock.now)

    def deliver(self):
        """Everything due now, at most ``threads`` in flight (claims end when one finds nothing
        and nothing is in flight: the fake clock does not move, so a retry is not due again)."""
        return deliver_due(runtime=self.runtime, budget_seconds=120)


def delivered_count() -> float:
    return REGISTRY.get_sample_value("webhooks_deliveries_total", {"outcome": "delivered"}) or 0.0


def delivery_of(endpoint: WebhookEndpoint) -> Delivery:
    return Delivery.objects.get(endpoint=endpoint)


def test_a_delivery_is_signed_as_standard_webhooks_says(receiver):
    """The body is the event as GET /events shows it; standardwebhooks' verifier accepts the
    headers; the attempt is stored with its status, duration and body, never the signature."""
    h = Harness(receiver)
    endpoint, secret = h.endpoint("/ok", [200])
    event = h.event()
    counted = delivered_count()
    assert h.deliver() == [AttemptOutcome.DELIVERED]
    assert delivered_count() == counted + 1  # webhooks_deliveries_total{outcome="delivered"}
    (got,) = receiver.at("/ok")
    assert verify(secret, got, now=h.clock.now) == event_document(event)
    assert got.headers["webhook-id"] == event.id
    assert got.headers["webhook-timestamp"] == str(int(START.timestamp()))
    delivery = delivery_of(endpoint)
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("delivered", 1, None)
    (attempt,) = DeliveryAttempt.objects.all()
    assert (attempt.status_code, attempt.outcome, attempt.response_body) == (
        200, "delivered", '{"ok": true}',
    )  # fmt: skip
    stored = json.dumps(list(DeliveryAttempt.objects.values()), default=str)
    assert got.headers["webhook-signature"].split(",", 1)[1] not in stored
    assert secret not in stored


def test_failures_are_retried_on_the_schedule_with_full_jitter(receiver):
    """500, a closed connection and a redirect (never followed) each fail; the next attempt is
    due after random() x the schedule's bound (30 s, 5 min, 30 min); the 4th is delivered."""
    h = Harness(receiver)
    endpoint, secret = h.endpoint("/flaky", [500, "close", "redirect", 200])
    h.event()
    expected = [AttemptOutcome.HTTP_ERROR, AttemptOutcome.CONNECTION_ERROR, AttemptOutcome.REDIRECT]
    for outcome, bound in zip(expected, (30, 300, 1800), strict=True):
        assert h.deliver() == [outcome]
        delivery = delivery_of(endpoint)
        assert delivery.next_attempt_at == h.clock.now + timedelta(seconds=0.5 * bound)
        h.clock.advance(0.5 * bound - 1)
        assert h.deliver() == []  # not due yet
        h.clock.advance(1)
    assert h.deliver() == [AttemptOutcome.DELIVERED]
    assert receiver.at("/redirected") == []
    got = receiver.at("/flaky")
    assert len(got) == 4 and len({r.headers["webhook-id"] for r in got}) == 1
    assert verify(secret, got[-1], now=h.clock.now)["type"] == "payment.succeeded"
    codes = DeliveryAttempt.objects.order_by("number").values_list("status_code", flat=True)
    assert list(codes) == [500, None, 302, 200]


def test_410_disables_the_endpoint_and_enabling_it_delivers_what_is_still_due(receiver):
    h = Harness(receiver)
    endpoint, _ = h.endpoint("/gone", [410, 200])
    h.event("pay_1")
    assert h.deliver() == [AttemptOutcome.GONE]
    endpoint.refresh_from_db()
    assert (endpoint.status, endpoint.disabled_reason) == ("disabled", "gone")
    h.event("pay_2")  # waits while the endpoint is disabled
    h.clock.advance(3600)
    assert h.deliver() == []
    assert (
        endpoint_enable(endpoint_id=endpoint.id, operator="alice", note="fixed", clock=h.clock) == 2
    )
    assert sorted(h.deliver()) == [AttemptOutcome.DELIVERED, AttemptOutcome.DELIVERED]
    assert {json.loads(r.body)["data"]["object"]["id"] for r in receiver.at("/gone")[1:]} == {
        "pay_1", "pay_2",
    }  # fmt: skip


def test_three_days_of_failures_fail_the_delivery_and_disable_the_endpoint(receiver):
    """Every attempt fails: retries until the 3-day window ends (then ``failed``), and the
    endpoint, failing since the first attempt, is disabled."""
    h = Harness(receiver, breaker=QUIET_BREAKER)
    endpoint, _ = h.endpoint("/down", [500])
    h.event()
    for _ in range(100):
        h.deliver()
        delivery = delivery_of(endpoint)
        if delivery.next_attempt_at is None:
            break
        h.clock.now = delivery.next_attempt_at
    endpoint.refresh_from_db()
    assert delivery.status == "failed"
    assert (endpoint.status, endpoint.disabled_reason) == ("disabled", "failing")
    attempts = list(DeliveryAttempt.objects.order_by("number").values_list("started_at", flat=True))
    assert attempts[1] - attempts[0] == timedelta(seconds=15)
    assert timedelta(days=2.5) < attempts[-1] - attempts[0] < timedelta(days=3)
    assert len(receiver.at("/down")) == len(attempts)


def test_the_breaker_holds_a_dead_endpoints_backlog_and_spares_the_others(receiver):
    """After 10 failures the endpoint's breaker opens: its other due deliveries are not sent
    (they wait the open period), while another endpoint of the merchant still receives."""
    breaker = BreakerConfig(window_size=20, minimum_calls=10, open_duration=60)
    h = Harness(
        receiver,
        breaker=breaker,
        endpoint_concurrency=50,
        merchant_concurrency=50,
        batch_size=50,
        threads=1,
    )
    dead, _ = h.endpoint("/dead", [500])
    h.endpoint("/alive", [200])
    for n in range(14):
        h.event(f"pay_{n}")
    outcomes = h.deliver() + h.deliver()
    assert outcomes.count(AttemptOutcome.HTTP_ERROR) == 10
    assert outcomes.count(AttemptOutcome.BREAKER_OPEN) == 4
    assert outcomes.count(AttemptOutcome.DELIVERED) == 14
    assert len(receiver.at("/dead")) == 10
    held = Delivery.objects.filter(endpoint=dead, attempts=0)
    assert held.count() == 4
    assert {d.next_attempt_at for d in held} == {h.clock.now + timedelta(seconds=60)}


def test_a_hanging_endpoint_does_not_delay_another(receiver):
    """One event to an endpoint that hangs and to one that answers: the second is delivered
    while the first's request is still held open (it has no attempt recorded yet)."""
    h = Harness(receiver, timeout=30.0)
    hanging, _ = h.endpoint("/hang", ["hang"])
    quick, _ = h.endpoint("/quick", [200])
    h.event()
    worker = threading.Thread(target=h.deliver)
    worker.start()
    try:
        wait_until(
            lambda: delivery_of(quick).status == "delivered", timeout=20,
            what="the quick endpoint's delivery",
        )  # fmt: skip
        assert DeliveryAttempt.objects.filter(endpoint=hanging).count() == 0
        assert len(receiver.at("/hang")) == 1
    finally:
        receiver.release()
        worker.join(40)
    assert delivery_of(hanging).status == "pending"


def test_claims_cap_each_endpoint_and_never_share_a_delivery(receiver):
    """A claim takes at most ``endpoint_concurrency`` of one endpoint's deliveries, held leases
    included; a second claim takes none of the leased ones; an expired lease is claimable again,
    and the first claimer's token no longer sends anything."""
    h = Harness(receiver, endpoint_concurrency=2, batch_size=10)
    h.endpoint("/cap", [200])
    for n in range(5):
        h.event(f"pay_{n}")
    first, first_token = claim_due(now=h.clock.now, policy=h.policy)
    second, _ = claim_due(now=h.clock.now, policy=h.policy)
    assert (len(first), second) == (2, [])
    h.clock.advance(h.policy.lease + 1)
    third, third_token = claim_due(now=h.clock.now, policy=h.policy)
    assert third == first
    assert deliver_claimed(first, first_token, runtime=h.runtime) == [None, None]
    assert deliver_claimed(third, third_token, runtime=h.runtime) == [
        AttemptOutcome.DELIVERED, AttemptOutcome.DELIVERED,
    ]  # fmt: skip


def test_a_url_that_now_resolves_to_a_private_address_is_not_called(receiver):
    """The URL is checked again before each attempt (DNS can change): not sent, retried."""
    h = Harness(receiver)
    h.endpoint("/rebind", [200])
    h.event()
    private = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 80))]
    h.runtime = DeliveryRuntime(
        h.policy, clock=h.clock, random=lambda: 0.5, resolver=lambda *a, **k: private,
        breaker=h.runtime.breaker,
    )  # fmt: skip
    assert h.deliver() == [AttemptOutcome.URL_REFUSED]
    assert receiver.at("/rebind") == []
    assert DeliveryAttempt.objects.get().error == "forbidden_address"


def test_after_a_rotation_both_secrets_sign_for_24_hours(receiver):
    h = Harness(receiver)
    endpoint, old = h.endpoint("/rotate", [200])
    new = json.loads(
        endpoint_rotate_secret(merchant=h.merchant, endpoint_id=endpoint.id, clock=h.clock).body
    )["secret"]
    h.event("pay_1")
    h.deliver()
    got = receiver.at("/rotate")[-1]
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    assert verify(old, got, now=h.clock.now) == verify(new, got, now=h.clock.now)
    h.clock.advance(24 * 3600)
    h.event("pay_2")
    h.deliver()
    got = receiver.at("/rotate")[-1]
    assert len(got.headers["webhook-signature"].split(" ")) == 1
    assert verify(new, got, now=h.clock.now)["data"]["object"]["id"] == "pay_2"


def test_a_merchants_answer_is_stored_without_card_numbers_secrets_or_nul(receiver):
    """The answer body is the merchant's text, kept for support: card numbers (spelled as the
    audit spelled them), keys and signing secrets are replaced before it is stored, and a NUL
    byte, which PostgreSQL text cannot hold, does not fail the attempt."""
    from tests.support.card_spellings import spellings_with_pans
    from webhooks.signing import new_secret

    leaked_secret = new_secret()
    pairs = [pair for entries in spellings_with_pans().values() for pair in entries[::10]]
    answer = json.dumps({"echo": [text for _, text in pairs], "secret": leaked_secret})
    h = Harness(receiver)
    h.endpoint("/echo", [answer.encode() + b"\x00tail"])
    h.event()
    assert h.deliver() == [AttemptOutcome.DELIVERED]
    (attempt,) = DeliveryAttempt.objects.all()
    stored = attempt.response_body
    assert stored.endswith("\ufffdtail") and "[card number redacted]" in stored
    assert leaked_secret[len("whsec_") :] not in stored
    assert [pan for pan, _ in pairs if pan in stored] == []
    assert not contains_card_number(stored)
    assert len(pairs) >= 70


def test_a_claim_goes_round_robin_across_merchants_within_their_caps(receiver):
    """Merchant A's 48 older due deliveries (3 events to 16 endpoints), then neighbour B's
    one: FIFO would lease 20 of A's; the claim leases A's oldest, B's, then A's up to its cap
    of 4, in that order. A second claim while A's leases are held takes nothing of A's."""
    a = Harness(receiver, batch_size=20, merchant_concurrency=4, endpoint_concurrency=2)
    b = Harness(receiver, batch_size=20, merchant_concurrency=4, endpoint_concurrency=2)
    b.clock = a.clock
    for n in range(16):
        a.endpoint(f"/a{n}", [200])
    b.endpoint("/b", [200])
    for n in range(3):
        a.event(f"pay_a{n}")
    a.clock.advance(1)
    b.event("pay_b")
    ids, _ = claim_due(now=a.clock.now, policy=a.policy)
    merchants = dict(Delivery.objects.values_list("id", "endpoint__merchant_id"))
    assert [merchants[i] for i in ids] == [a.merchant.pk, b.merchant.pk] + [a.merchant.pk] * 3
    assert claim_due(now=a.clock.now, policy=a.policy)[0] == []
    a.clock.advance(a.policy.lease + 1)  # the leases ran out (a killed worker's): again
    again, _ = claim_due(now=a.clock.now, policy=a.policy)
    assert [merchants[i] for i in again] == [merchants[i] for i in ids]


def test_the_event_task_fans_out_then_delivers_beyond_the_merchants_cap(receiver, settings):
    """The task enqueued on commit: the event, written alone, is fanned out and delivered to
    its 5 endpoints in one run, batch after batch within the merchant's cap of 2."""
    settings.WEBHOOK_MERCHANT_CONCURRENCY = 2
    merchant = Merchant.objects.create(name="task")
    for n in range(5):
        endpoint_create(
            merchant=merchant, url=receiver.script(f"/task{n}", [200]), enabled_events=["*"]
        )
    with transaction.atomic():
        event = event_record(
            merchant_id=merchant.pk, event_type="payment.succeeded", object_id="pay_t",
            obj={"id": "pay_t", "object": "payment"}, now=timezone.now(),
        )  # fmt: skip
    assert not Delivery.objects.exists()
    assert deliver_event_task(event.id) == 5
    assert set(Delivery.objects.values_list("status", flat=True)) == {"delivered"}
    assert all(len(receiver.at(f"/task{n}")) == 1 for n in range(5))


def test_a_merchant_another_claimer_is_counting_is_skipped_not_waited_for(receiver):
    """While another claimer holds merchant A (its claim not yet committed, so its leases not
    yet counted), a claim takes none of A's deliveries, rather than over-filling A's cap, and
    takes B's at once."""
    a = Harness(receiver)
    b = Harness(receiver)
    b.clock = a.clock
    a.endpoint("/held-a", [200])
    b.endpoint("/held-b", [200])
    a.event("pay_a")
    b.event("pay_b")
    holding, release = threading.Event(), threading.Event()

    def other_claimer() -> None:
        try:
            with transaction.atomic():
                Merchant.objects.select_for_update(no_key=True).get(pk=a.merchant.pk)
                holding.set()
                release.wait(20)
        finally:
            connections.close_all()

    other = threading.Thread(target=other_claimer)
    other.start()
    try:
        assert holding.wait(10)
        ids, _ = claim_due(now=a.clock.now, policy=a.policy)
        assert [
            delivery_of(e).pk for e in WebhookEndpoint.objects.filter(merchant=b.merchant)
        ] == ids
    finally:
        release.set()
        other.join(20)
    ids, _ = claim_due(now=a.clock.now, policy=a.policy)
    assert ids == [Delivery.objects.get(endpoint__merchant=a.merchant).pk]
