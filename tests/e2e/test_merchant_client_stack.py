"""merchant_client against the real stack: gunicorn, a Celery worker and the sandbox acquirer as
subprocesses (one stack for the module), a TCP proxy that loses answers in between."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import call_command

from idempotency.models import IdempotencyKey
from merchant_client import (
    DEFAULT_POLICY,
    MerchantClient,
    OutcomeUnknown,
    Payment,
    Pending,
    ServiceUnavailable,
)
from merchants.services import merchant_create
from payments.models import Payment as PaymentRow
from resilience.clock import ManualClock
from tests.support.lossy_proxy import LossyProxy
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

# One stack and one merchant for the module, and one flush of the test database at its end
# (not one per test: each test uses its own keys and references). The tests read the database
# outside any transaction, as the service's processes write it.
pytestmark = [pytest.mark.e2e]


def stop_all(processes: list[subprocess.Popen]) -> None:
    """SIGQUIT every process at once (gunicorn's and Celery's quick shutdown: a test's stack
    has nothing to drain), then wait for each (SIGKILL after 15 s)."""
    for proc in processes:
        proc.send_signal(signal.SIGQUIT)
    for proc in processes:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, redis_url, tmp_path_factory) -> Iterator[dict]:
    """Sandbox, gunicorn (one attempt per acquirer call, 2 s read timeout) and a Celery worker
    (reconciliation 1 s after a 202), and a proxy in front of gunicorn."""
    logs = tmp_path_factory.mktemp("merchant-client-stack")
    with django_db_blocker.unblock(), ExitStack() as stack:
        stack.callback(call_command, "flush", verbosity=0, interactive=False)  # runs last
        sandbox = stack.enter_context(SandboxProcess.start(extra_args=("--hang-seconds", "3")))
        port = free_port()
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="1",
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
            ACQUIRER_RETRY_MAX_ATTEMPTS="1",  # one attempt: ambiguous answers stay 202 here
            ACQUIRER_READ_TIMEOUT_SECONDS="2",
            CELERY_BROKER_URL=suite_broker_url(redis_url),
            CELERY_DEFAULT_QUEUE=f"test-{uuid.uuid4().hex}",
            RECONCILIATION_FIRST_CHECK_SECONDS="1",
        )
        started = [
            subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            for command, log in (
                (GUNICORN, stack.enter_context(open(logs / "web.log", "w"))),
                (CELERY_WORKER, stack.enter_context(open(logs / "worker.log", "w"))),
            )
        ]
        stack.callback(stop_all, started)
        url = f"http://127.0.0.1:{port}"

        wait_until(lambda: answers_healthz(url), timeout=STARTUP_SECONDS, what="gunicorn")
        proxy = stack.enter_context(LossyProxy("127.0.0.1", port))
        yield {"url": url, "proxy": proxy, "sandbox": sandbox}


@pytest.fixture(scope="module")
def merchant_a(stack, django_db_blocker) -> SimpleNamespace:
    """The module's merchant and its API key."""
    with django_db_blocker.unblock():
        _, issued = merchant_create(name=f"merchant-client-{uuid.uuid4().hex[:8]}")
    return SimpleNamespace(api_key=issued.raw)


@pytest.fixture(autouse=True)
def database(django_db_blocker) -> Iterator[None]:
    """The tests read what the service's processes wrote (autocommit, no test transaction)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def sandbox(stack) -> SandboxProcess:
    stack["sandbox"].reset()
    return stack["sandbox"]


def charges_of(sandbox: SandboxProcess, payment_id: str) -> int:
    return sandbox.stats()["charges_by_reference"].get(payment_id, 0)


def test_a_lost_answer_is_re_sent_with_the_same_key_and_one_charge_exists(
    stack, sandbox, merchant_a
):
    """The proxy forwards the POST and drops the 201: the client re-sends the same key and
    gets the stored 201 replayed; one payment, one charge."""
    proxy: LossyProxy = stack["proxy"]
    proxy.drop_answers(1)
    sleeps: list[float] = []
    with MerchantClient(proxy.url, merchant_a.api_key, sleep=sleeps.append) as client:
        payment = client.create_payment(
            1999, "EUR", "tok_visa", reference="lost-1", idempotency_key="lost-1"
        )

    assert isinstance(payment, Payment) and payment.status == "succeeded"
    assert payment.replayed is True and payment.attempts == 2
    assert proxy.dropped == 1 and len(sleeps) == 1
    assert PaymentRow.objects.filter(reference="lost-1").count() == 1
    assert charges_of(sandbox, payment.id) == 1


def test_409_while_the_first_request_runs_waits_retry_after_and_returns_the_replay(
    stack, sandbox, merchant_a
):
    """A second sender of the same key gets 409 idempotency_key_in_use while the acquirer takes
    1.5 s; it sleeps Retry-After (1 s) plus jitter and returns the first request's 201."""
    url = stack["url"]
    first: dict[str, Any] = {}

    def send_first() -> None:
        with MerchantClient(url, merchant_a.api_key) as client:
            first["payment"] = client.create_payment(
                1999, "EUR", "tok_slow_1500", idempotency_key="in-use-1"
            )

    thread = threading.Thread(target=send_first)
    thread.start()
    wait_until(
        IdempotencyKey.objects.filter(key="in-use-1").exists, timeout=10, what="the first claim"
    )
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    with MerchantClient(url, merchant_a.api_key, sleep=sleep) as client:
        second = client.create_payment(1999, "EUR", "tok_slow_1500", idempotency_key="in-use-1")
    thread.join()

    assert isinstance(second, Payment) and second.replayed is True
    assert second.id == first["payment"].id and second.status == "succeeded"
    # Retry-After 1 plus full jitter: below 0.5 s before the first retry, 1 s before the second
    assert sleeps and 1.0 <= sleeps[0] <= 1.5 and all(1.0 <= wait <= 2.0 for wait in sleeps)
    assert charges_of(sandbox, second.id) == 1


def test_an_acquirer_outage_is_service_unavailable_after_the_attempts_the_deadline_allows(
    stack, sandbox, merchant_a
):
    """tok_fail_503_5: every request answers 503 acquirer_unavailable, Retry-After 10. With a
    15 s deadline the client sends twice (0 s, ~10 s) and returns at once with retry_after."""
    clock = ManualClock()
    policy = DEFAULT_POLICY.replace(deadline=15.0, max_attempts=10)
    with (
        MerchantClient(
            stack["url"], merchant_a.api_key, policy=policy, clock=clock, sleep=clock.sleep
        ) as client,
        pytest.raises(ServiceUnavailable) as raised,
    ):
        client.create_payment(1999, "EUR", "tok_fail_503_5", persist_key=lambda key: None)

    error = raised.value
    assert error.attempts == 2 and error.retry_after == 10.0
    assert error.code == "acquirer_unavailable" and error.problem["status"] == 503
    assert len(clock.sleeps) == 1 and 10.0 <= clock.sleeps[0] <= 10.5
    assert sandbox.stats()["charges_total"] == 0


def test_a_202_is_pending_then_wait_until_final_returns_the_reconciled_payment(
    stack, sandbox, merchant_a
):
    """tok_timeout_after_commit: the service's acquirer call times out after the charge was
    recorded -> 202 Pending; the worker reconciles; wait_until_final returns succeeded."""
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # poll more often than Retry-After asks: a quick test
        sleeps.append(seconds)
        time.sleep(min(seconds, 0.5))

    with MerchantClient(stack["url"], merchant_a.api_key, sleep=sleep) as client:
        pending = client.create_payment(
            1999, "EUR", "tok_timeout_after_commit", idempotency_key="pending-1"
        )
        assert isinstance(pending, Pending) and pending.object.status == "processing"
        assert pending.retry_after == 5.0
        final = client.wait_until_final(pending, timeout=30)

    assert isinstance(final, Payment) and final.status == "succeeded"
    assert final.id == pending.id and sleeps[0] >= 5.0  # Retry-After is the floor
    assert charges_of(sandbox, final.id) == 1


def test_a_restarted_job_with_its_persisted_key_makes_one_payment(
    stack, sandbox, merchant_a, tmp_path
):
    """The job stores its generated key, sends, and is killed (SIGKILL) while its request waits
    for an answer the proxy holds back; the restarted job re-sends the stored key and gets
    the first payment replayed: one payment, one charge."""
    proxy: LossyProxy = stack["proxy"]
    job_file = tmp_path / "job.json"
    job = {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa", "reference": "job-1"}
    job_file.write_text(json.dumps(job))
    command = [sys.executable, "-m", "tests.support.merchant_job", str(job_file)]
    proxy.hold_answers(1)
    first = subprocess.Popen(
        [*command, proxy.url, merchant_a.api_key], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proxy.answered.wait(30), "the job's request did not reach the service"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        proxy.release()
    stored_key = json.loads(job_file.read_text())["idempotency_key"]
    assert PaymentRow.objects.filter(reference="job-1").count() == 1

    again = subprocess.run(
        [*command, stack["url"], merchant_a.api_key],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    result = json.loads(again.stdout.strip().splitlines()[-1])

    assert result["replayed"] is True and result["status"] == "succeeded"
    assert PaymentRow.objects.filter(reference="job-1").count() == 1
    payment = PaymentRow.objects.get(reference="job-1")
    assert payment.id == result["id"] and payment.idempotency_key.key == stored_key
    assert charges_of(sandbox, payment.id) == 1


def test_a_request_cut_off_by_the_proxy_with_one_attempt_is_an_unknown_outcome(
    stack, sandbox, merchant_a
):
    """max_attempts=1: the lost answer is not retried; the error says the payment may exist."""
    proxy: LossyProxy = stack["proxy"]
    proxy.drop_answers(1)
    policy = DEFAULT_POLICY.replace(max_attempts=1)
    client = MerchantClient(proxy.url, merchant_a.api_key, policy=policy)
    with client, pytest.raises(OutcomeUnknown) as raised:
        client.create_payment(1999, "EUR", "tok_visa", idempotency_key="cut-1")
    assert raised.value.attempts == 1 and raised.value.idempotency_key == "cut-1"
    assert PaymentRow.objects.filter(idempotency_key__key="cut-1").count() == 1
