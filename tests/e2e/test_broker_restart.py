"""The Celery worker survives its broker being killed and restarted, again and again.

The worker runs as the Procfile runs it (prefork, two processes, without mingle and gossip),
against a Redis of this test's own (tests/support/private_redis.py), which is SIGKILLed with
tasks in flight (unacknowledged messages to restore) and started again, three times. After each
restart the worker must still be alive and run a task sent after that restart: the round's
marker, a purge with a task id of its own, whose success the worker logs (the round's expired
key must be gone too; any purge may have deleted it, so only the id proves the round). Then it
must beat again. docs/operations.md ("The Celery worker and its broker") has what failed here
and why.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import uuid

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
    pytest.mark.broker_restarts,  # also `make test-broker-restarts RUNS=n`, each run counted
    pytest.mark.django_db(transaction=True),
]

#: Every task sent: short (tens of ms), so some finish while the worker reconnects, which is
#: what stalled mingle (docs/operations.md).
PURGE = "payments.tasks.purge_expired_idempotency_keys"
RESTARTS = 3


#: A uuid's hex digits as letters (see _marker_id).
_DIGITS_AS_LETTERS = str.maketrans("0123456789", "qrstuvwxyz")


def _marker_id(round_: int) -> str:
    """A task id of its own for the round's marker, in letters only: the worker's log redacts
    long runs of digits (card numbers), which a uuid's hex may hold."""
    return f"round-{round_}-" + uuid.uuid4().hex.translate(_DIGITS_AS_LETTERS)


def _tail(log_path, lines: int = 80) -> str:
    """The log's last ``lines`` lines, the newest first (a long report is cut at its end)."""
    return "\n".join(reversed(log_path.read_text().splitlines()[-lines:]))


def _send(broker_url: str, queue: str, task: str, count: int = 1, task_id: str | None = None):
    """Publish ``count`` ``task`` messages to the private broker through an app of their own
    (never the current one: the service's own app must stay as the other tests left it)."""
    with Celery(broker=broker_url, set_as_current=False) as producer:
        for _ in range(count):
            producer.send_task(task, queue=queue, task_id=task_id)


def test_the_worker_keeps_processing_tasks_across_broker_restarts(tmp_path):
    queue = f"test-{tmp_path.name}"
    words = shlex.split(procfile_commands()["worker"])
    env_prefix, command = words[:2], words[2:]  # `env WORKER_QUEUES=tasks celery ...`
    assert env_prefix == ["env", "WORKER_QUEUES=tasks"] and command[0] == "celery"
    log_path = tmp_path / "worker.log"
    with PrivateRedis(tmp_path) as broker, log_path.open("w") as log:
        env = service_env(
            CELERY_BROKER_URL=broker.broker_url,
            CELERY_DEFAULT_QUEUE=queue,
            HEARTBEAT_INTERVAL_SECONDS="1",
            WORKER_QUEUES="tasks",
        )
        worker = subprocess.Popen(
            [sys.executable, "-m", *command],  # the Procfile's `celery ...`, this interpreter
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            for round_ in range(RESTARTS + 1):
                # Sent after this round's restart (the first round: after the start); the worker
                # logs its success under its own id, which no other message has.
                key, marker = f"round-{round_}", _marker_id(round_)
                expired_key(key)
                _send(broker.broker_url, queue, PURGE, task_id=marker)
                try:
                    wait_until(
                        lambda key=key, marker=marker: (
                            f"{PURGE}[{marker}] succeeded" in log_path.read_text()
                            and not IdempotencyKey.objects.filter(key=key).exists()
                        ),
                        timeout=60,
                        what=f"the worker to run task {marker}, sent after {round_} restarts",
                    )
                except AssertionError as exc:
                    # The worker's log as it is now (what it did while we waited), its end first.
                    raise AssertionError(
                        f"{exc}; the worker's log, from its end:\n{_tail(log_path)}"
                    ) from None
                if round_ == RESTARTS:
                    break
                _send(broker.broker_url, queue, PURGE, 20)  # in flight when the broker dies
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
