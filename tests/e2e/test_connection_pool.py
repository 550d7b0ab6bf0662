"""The web process's database pool over real HTTP (ADR 0048): no connection is held while the
acquirer thinks, and an exhausted pool answers ``503`` with ``Retry-After`` instead of hanging.

One gunicorn worker whose pool holds ONE connection (``DATABASE_POOL_MAX_SIZE=1``) and waits
at most 0.5 s for it (gunicorn's gthread, and again the run-slot worker with ONE run slot,
``WEB_RUN_SLOTS=1``, ADR 0053), and the sandbox acquirer
answering after 1.5 s. While the sandbox holds an authorization (its ``requests_in_flight``),
another request of the same worker needs a connection and a slot: it gets both, so the
payment's request thread gave back its connection and lent its slot for the call. Then the
test holds a payment's row lock from its own connection, so a capture of that payment waits on
the lock holding the only connection and the only slot; a request meanwhile is queued until
the slot's hold limit (2 s here, above the sandbox's 1.5 s, so the first request can only have
been served through the lend around the acquirer call) lends it, and finds the pool empty: an
answer, not a hang.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from merchants.services import merchant_create
from tests.support.processes import (
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    answers_healthz,
    database_url_for_subprocess,
    free_port,
    service_env,
    wait_until,
)
from tests.support.sandbox import SandboxProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BODY = {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa", "capture_method": "manual"}


@pytest.fixture(params=["gthread", "config.gunicorn_worker.RunSlotThreadWorker"])
def stack(request, transactional_db, tmp_path) -> Iterator[dict]:
    """The sandbox and one gunicorn worker with a pool of one connection and one run slot;
    yields their URLs."""
    with SandboxProcess.start() as sandbox:
        port = free_port()
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="1",
            WEB_THREADS="4",
            WEB_WORKER_CLASS=request.param,  # gunicorn's own pool, and the default run slots
            WEB_RUN_SLOTS="1",
            # Above the sandbox's 1.5 s: the request served during the payment's call got the
            # slot lent around that call, not through the hold limit.
            WEB_RUN_SLOT_HOLD_LIMIT_SECONDS="2",
            DATABASE_LOCK_TIMEOUT_MS="10000",  # the capture waits on the lock past the limit
            DATABASE_POOL_MIN_SIZE="1",
            DATABASE_POOL_MAX_SIZE="1",
            DATABASE_POOL_TIMEOUT_SECONDS="0.5",
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
            ACQUIRER_READ_TIMEOUT_SECONDS="5",
        )
        env.pop("DATABASE_POOL", None)  # the Procfile's server turns it on by default
        log = (tmp_path / "gunicorn.log").open("w")
        web = subprocess.Popen(GUNICORN, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: answers_healthz(url), timeout=STARTUP_SECONDS, what="gunicorn")
            yield {"url": url, "sandbox": sandbox, "log": tmp_path / "gunicorn.log"}
        finally:
            web.terminate()
            try:
                web.wait(10)
            except subprocess.TimeoutExpired:
                web.kill()
            log.close()


def test_no_connection_is_held_during_the_acquirer_call_and_an_empty_pool_answers_503(stack):
    url, sandbox = stack["url"], stack["sandbox"]
    _merchant, issued = merchant_create(name="pool-merchant")
    headers = {"Authorization": f"Bearer {issued.raw}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        assert client.get("/payments").status_code == 200  # the worker is up, its pool open

        sandbox.set_condition("latency", distribution="fixed", ms=1500)
        answers: dict[str, httpx.Response] = {}
        paying = threading.Thread(
            target=lambda: answers.update(
                paid=client.post("/payments", json=BODY, headers={"Idempotency-Key": "pool-1"})
            )
        )
        paying.start()
        wait_until(lambda: sandbox.stats()["requests_in_flight"] == 1, timeout=10, what="the call")
        during = client.get("/payments")  # needs the pool's only connection
        still_in_flight = sandbox.stats()["requests_in_flight"]
        paying.join(30)
        assert during.status_code == 200, stack["log"].read_text()[-3000:]
        assert still_in_flight == 1  # answered while the acquirer still held the payment
        assert answers["paid"].status_code == 201, answers["paid"].text
        payment_id = answers["paid"].json()["id"]
        sandbox.clear_conditions()

        # The pool's one connection waits on a row lock the test holds: the pool is empty.
        with psycopg.connect(database_url_for_subprocess()) as locker:
            locker.execute("SELECT 1 FROM payments_payment WHERE id = %s FOR UPDATE", [payment_id])
            capturing = threading.Thread(
                target=lambda: answers.update(
                    capture=client.post(
                        f"/payments/{payment_id}/capture", headers={"Idempotency-Key": "pool-2"}
                    )
                )
            )
            capturing.start()
            wait_until(
                lambda: lock_waiters(locker) == 1, timeout=10, what="the capture on the lock"
            )
            exhausted = client.get("/payments")
            locker.rollback()
        capturing.join(30)
    assert exhausted.status_code == 503
    assert exhausted.headers["Retry-After"] == "1"
    assert exhausted.headers["Content-Type"] == "application/problem+json"
    assert exhausted.json()["code"] == "service_unavailable"
    assert "database connection" in exhausted.json()["detail"]
    assert answers["capture"].status_code in (200, 503)  # the lock came back, or lock_timeout
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        assert client.get("/payments").status_code == 200  # the pool is whole again


def lock_waiters(conn: psycopg.Connection) -> int:
    """Backends of this database (not ``conn``'s) waiting on a lock."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]
