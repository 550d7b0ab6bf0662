"""At least once at the receiver (issue 13): a Celery worker SIGKILLed in the middle of a
delivery attempt (the receiver holds the request open), a new worker started, and the event
still arrives, signed, with the same webhook-id."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess

import pytest
from django.db import transaction
from django.utils import timezone

from merchants.models import Merchant
from tests.support.processes import CELERY_WORKER, ROOT, service_env, wait_until
from tests.support.webhook_receiver import running_receiver, verify
from webhooks.models import Delivery
from webhooks.outbox import event_record
from webhooks.services import endpoint_create

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def start_worker(env: dict[str, str], tmp_path, name: str) -> subprocess.Popen:
    """A worker with an embedded beat (the sweep every second), in its own process group."""
    log = (tmp_path / f"{name}.log").open("w")
    return subprocess.Popen(
        [*CELERY_WORKER, "--beat", "--schedule", str(tmp_path / f"{name}-beat")],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(15)


def test_a_worker_killed_mid_attempt_still_delivers_the_event(tmp_path):
    env = service_env(
        WEBHOOK_SWEEP_INTERVAL_SECONDS="1",
        WEBHOOK_LEASE_SECONDS="2",
        WEBHOOK_TIMEOUT_SECONDS="30",
    )
    with running_receiver() as receiver:
        merchant = Merchant.objects.create(name="kill-test")
        answer = endpoint_create(
            merchant=merchant, url=receiver.script("/kill", ["hang", 200]), enabled_events=["*"]
        )
        secret = json.loads(answer.body)["secret"]
        with transaction.atomic():
            event = event_record(
                merchant_id=merchant.pk, event_type="payment.succeeded", object_id="pay_k",
                obj={"id": "pay_k", "object": "payment"}, now=timezone.now(),
            )  # fmt: skip
        first = start_worker(env, tmp_path, "first")
        try:
            wait_until(
                lambda: len(receiver.at("/kill")) == 1, timeout=60,
                what="the first worker's attempt:\n" + (tmp_path / "first.log").read_text(),
            )  # fmt: skip
        finally:
            kill_group(first)  # SIGKILL while the receiver holds the request open
        assert Delivery.objects.get().status == "pending"
        second = start_worker(env, tmp_path, "second")
        try:
            wait_until(
                lambda: Delivery.objects.get().status == "delivered", timeout=60,
                what="the new worker's delivery:\n" + (tmp_path / "second.log").read_text(),
            )  # fmt: skip
        finally:
            kill_group(second)
        got = receiver.at("/kill")
    assert [r.answered for r in got] == ["hang", 200]
    assert {r.headers["webhook-id"] for r in got} == {event.id}
    assert verify(secret, got[-1])["id"] == event.id
