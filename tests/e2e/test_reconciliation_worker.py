"""Reconciliation by a real Celery worker on Redis, behind gunicorn, against the sandbox."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from payments.models import Payment
from tests.support.processes import (
    CELERY_WORKER,
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    answers_healthz,
    free_port,
    service_env,
    wait_until,
)
from tests.support.redis import suite_broker_url
from tests.support.sandbox import SandboxProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@contextmanager
def process(command: list[str], env: dict[str, str], log_path) -> Iterator[subprocess.Popen]:
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def stack(transactional_db, redis_url, tmp_path) -> Iterator[dict]:
    """Sandbox, gunicorn and a Celery worker sharing a Redis queue of their own."""
    with ExitStack() as stack:
        sandbox = stack.enter_context(SandboxProcess.start())
        port = free_port()
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="1",
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
            ACQUIRER_RETRY_MAX_ATTEMPTS="1",  # one attempt: ambiguous answers stay 202 here
            ACQUIRER_READ_TIMEOUT_SECONDS="1",
            CELERY_BROKER_URL=suite_broker_url(redis_url),
            CELERY_DEFAULT_QUEUE=f"test-{uuid.uuid4().hex}",
            RECONCILIATION_FIRST_CHECK_SECONDS="1",
        )
        stack.enter_context(process(GUNICORN, env, tmp_path / "web.log"))
        stack.enter_context(process(CELERY_WORKER, env, tmp_path / "worker.log"))
        url = f"http://127.0.0.1:{port}"

        wait_until(lambda: answers_healthz(url), timeout=STARTUP_SECONDS, what="gunicorn")
        yield {"url": url, "sandbox": sandbox, "env": env, "logs": tmp_path}


def test_worker_resolves_timeout_after_commit(stack, merchant_a):
    """202 processing, resolved to succeeded by the worker; the replay then answers the final
    201; exactly one charge at the sandbox."""
    headers = {"Authorization": f"Bearer {merchant_a.api_key}", "Idempotency-Key": "worker-1"}
    body = {"amount": 1999, "currency": "EUR", "payment_method": "tok_timeout_after_commit"}
    first = httpx.post(f"{stack['url']}/payments", json=body, headers=headers, timeout=30)
    assert first.status_code == 202
    payment_id = first.json()["id"]
    wait_until(
        lambda: Payment.objects.get(pk=payment_id).status == "succeeded",
        timeout=30,
        what="the worker to reconcile the payment",
    )
    replay = httpx.post(f"{stack['url']}/payments", json=body, headers=headers, timeout=30)
    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json()["status"] == "succeeded"
    assert stack["sandbox"].stats()["charges_total"] == 1
    assert "reconcile " + payment_id in (stack["logs"] / "worker.log").read_text()


def test_worker_killed_mid_task_resolves_the_payment_exactly_once(
    transactional_db, merchant_a, redis_url, tmp_path
):
    """SIGKILL of the worker process while its re-send is at the acquirer: the task is
    re-queued, the lease keeps a second run off until it ends, then the sweep resolves the
    payment once; one charge at the acquirer."""
    import psutil

    from tests.factories import PaymentFactory

    with ExitStack() as stack:
        sandbox = stack.enter_context(SandboxProcess.start())
        env = service_env(
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
            CELERY_BROKER_URL=suite_broker_url(redis_url),
            CELERY_DEFAULT_QUEUE=f"test-{uuid.uuid4().hex}",
            RECONCILIATION_LEASE_SECONDS="8",
            CELERY_TASK_TIME_LIMIT_SECONDS="7",
            RECONCILIATION_SWEEP_INTERVAL_SECONDS="1",
        )
        past = timezone.now() - timedelta(minutes=5)
        payment = PaymentFactory(
            merchant=merchant_a.merchant, status="processing", payment_method="tok_slow_3000",
            created_at=past, next_check_at=past,
        )  # fmt: skip
        worker_command = [
            sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "prefork",
            "--concurrency", "1", "--loglevel", "INFO", "--without-heartbeat", "--without-gossip",
            "--without-mingle",
        ]  # fmt: skip
        worker = stack.enter_context(process(worker_command, env, tmp_path / "worker.log"))
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             "from payments.reconciliation.tasks import payment_reconcile_task as t; "
             f"t.delay({payment.id!r})"],
            cwd=ROOT, env=env, check=True, timeout=60, capture_output=True,
        )  # fmt: skip
        wait_until(
            lambda: sandbox.stats()["requests_in_flight"] >= 1,
            timeout=30,
            what="the re-send to reach the acquirer",
        )
        children = psutil.Process(worker.pid).children()
        assert len(children) == 1
        children[0].kill()  # SIGKILL mid-task
        beat = [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
                "--schedule", str(tmp_path / "beat-schedule")]  # fmt: skip
        stack.enter_context(process(beat, env, tmp_path / "beat.log"))
        wait_until(
            lambda: Payment.objects.get(pk=payment.pk).status == "succeeded",
            timeout=60,
            what="the payment to be resolved after the kill",
        )
        assert payment.events.filter(type="reconciled").count() == 1
        assert sandbox.stats()["charges_total"] == 1
    assert "WorkerLostError" in (tmp_path / "worker.log").read_text()
