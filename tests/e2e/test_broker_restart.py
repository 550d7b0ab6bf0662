"""The Celery worker survives its broker being killed and restarted, again and again.

The worker runs as the Procfile runs it (prefork, two processes, gossip, mingle and heartbeat
on), against a Redis of this test's own (tests/support/private_redis.py), which is SIGKILLed
with tasks in flight (unacknowledged messages to restore) and started again, three times;
after each restart the worker must still be alive, execute a new task and beat again. Celery
5.7.0's worker exited here (``Unrecoverable error: AttributeError("'NoneType' object has no
attribute 'hostname'")`` while restoring the unacknowledged messages, in one run of two);
docs/operations.md ("The Celery worker and its broker") has the cause and the pin.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from celery import Celery
from django.utils import timezone

from heartbeats.models import Heartbeat
from idempotency.models import IdempotencyKey
from tests.e2e.test_celery_worker import expired_key
from tests.support.private_redis import PrivateRedis
from tests.support.processes import ROOT, service_env, wait_until
from tests.unit.test_layout import procfile_commands

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.broker_restarts,  # not in `make test`: docs/operations.md says why
    pytest.mark.django_db(transaction=True),
]

PURGE = "payments.tasks.purge_expired_idempotency_keys"
RESTARTS = 3


def _send(broker_url: str, queue: str, count: int) -> None:
    """Publish ``count`` purge tasks to the private broker through an app of their own (never
    the current one: the service's own app must stay as the other tests left it)."""
    with Celery(broker=broker_url, set_as_current=False) as producer:
        for _ in range(count):
            producer.send_task(PURGE, queue=queue)


def test_the_worker_keeps_processing_tasks_across_broker_restarts(tmp_path):
    queue = f"test-{tmp_path.name}"
    command = shlex.split(procfile_commands()["worker"])
    assert command[0] == "celery"
    log_path = tmp_path / "worker.log"
    with PrivateRedis(tmp_path) as broker, log_path.open("w") as log:
        env = service_env(
            CELERY_BROKER_URL=broker.broker_url,
            CELERY_DEFAULT_QUEUE=queue,
            HEARTBEAT_INTERVAL_SECONDS="1",
        )
        worker = subprocess.Popen(
            [sys.executable, "-m", *command],  # the Procfile's `celery ...`, this interpreter
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            for round_ in range(RESTARTS + 1):
                key = f"round-{round_}"
                expired_key(key)
                _send(broker.broker_url, queue, 1)
                wait_until(
                    lambda key=key: not IdempotencyKey.objects.filter(key=key).exists(),
                    timeout=60,
                    what=f"the worker to run a task after {round_} restarts:\n"
                    + log_path.read_text(),
                )
                if round_ == RESTARTS:
                    break
                _send(broker.broker_url, queue, 20)  # in flight when the broker dies
                broker.kill()
                restarted_at = timezone.now()
                broker.start()
                assert worker.poll() is None, log_path.read_text()
            assert worker.poll() is None, log_path.read_text()
            # The heartbeat goes on after the restarts (heartbeats/celery.py): the consumer's
            # restart records one, and its timer (every second here) keeps recording.
            wait_until(
                lambda: Heartbeat.objects.filter(kind="worker", seen_at__gt=restarted_at).exists(),
                timeout=30,
                what="a heartbeat after the last broker restart:\n" + log_path.read_text(),
            )
            assert Heartbeat.objects.filter(kind="worker").count() == 1
        finally:
            worker.terminate()
            try:
                worker.wait(60)  # a warm shutdown right after restarts can take ~10 s
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    text = log_path.read_text()
    assert worker.returncode == 0, text  # a warm shutdown, which forgets the heartbeat
    assert not Heartbeat.objects.filter(kind="worker").exists()
    assert text.count("Connection to broker lost") >= RESTARTS
    assert "Unrecoverable error" not in text, text
