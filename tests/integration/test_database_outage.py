"""A database outage or timeout answers ``503 service_unavailable`` with ``Retry-After``, and
leaves the payment and its key as a crash at that line would: reconciliation resolves them.

Real PostgreSQL throughout: made unreachable through a TCP proxy the test cuts
(tests/support/tcp_proxy.py), or kept busy by a table lock another connection holds, so the
server's own ``lock_timeout`` ends the wait. docs/adr/0020-database-outages-and-timeouts.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from idempotency.models import IdempotencyKey
from payments.acquirer.client import acquirer_client
from payments.authorization import create as services
from payments.models import Payment
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    payment_reconcile,
    reconciliation_claim_payment,
)
from tests.support.api import PAYMENT_BODY
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.django_db(transaction=True)

POLICY = ReconciliationPolicy(
    grace=60, backoff_base=30, backoff_cap=1800, max_age=6 * 3600, max_attempts=5
)


def _reconnect(**changes) -> None:
    """Close the test's connection and change its settings; the next query reconnects."""
    connection.close()
    connection.settings_dict.update(changes)


@pytest.fixture
def database_proxy(transactional_db) -> Iterator[TcpProxy]:
    """The test's connections go to the real server through a proxy the test can cut."""
    saved = {name: connection.settings_dict[name] for name in ("HOST", "PORT", "OPTIONS")}
    host, port = saved["HOST"] or "127.0.0.1", int(saved["PORT"] or 5432)
    upstream = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    with TcpProxy(upstream) as proxy:
        # libpq's connect_timeout as configured, shorter: a blackholed connect ends sooner.
        options = {**saved["OPTIONS"], "connect_timeout": 2}
        _reconnect(HOST="127.0.0.1", PORT=str(proxy.port), OPTIONS=options)
        try:
            yield proxy
        finally:
            proxy.restore()
            _reconnect(**saved)


@pytest.fixture
def short_lock_timeout(transactional_db) -> Iterator[None]:
    """The configured ``lock_timeout``, shortened to 300 ms for the test's connection."""
    saved = connection.settings_dict["OPTIONS"]
    options = str(saved["options"])
    assert "lock_timeout=" in options  # set by config.database.connection_options
    shorter = " ".join(
        "lock_timeout=300" if part.startswith("lock_timeout=") else part
        for part in options.split(" ")
    )
    _reconnect(OPTIONS={**saved, "options": shorter})
    yield
    _reconnect(OPTIONS=saved)


def _request(call):
    """Make one request as a server does: Django's test client skips the end-of-request
    clean-up (``close_old_connections``) that drops a broken connection, so run it here."""
    close_old_connections()
    try:
        return call()
    finally:
        close_old_connections()


def _locker() -> psycopg.Connection:
    """Another session on the test database (directly, never through the proxy)."""
    return psycopg.connect(**connection.get_connection_params())


def _assert_unavailable(response) -> None:
    assert response.status_code == 503, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "service_unavailable"
    assert int(response["Retry-After"]) >= 1


def _body() -> dict:
    return {**PAYMENT_BODY, "reference": f"order-{uuid.uuid4().hex[:12]}"}


def _charges(sandbox, body: dict) -> int:
    """The acquirer's charges for every payment made with ``body``'s merchant reference."""
    payments = Payment.objects.filter(reference=body["reference"])
    return sum(len(sandbox.charges(payment.pk)) for payment in payments)


def _after_the_acquirer_call(monkeypatch, fault) -> None:
    """Run ``fault()`` right after the acquirer has answered, before phase 2."""
    authorize = services.payment_authorize_routed

    def authorize_then_fault(payment, **kwargs):
        attempt = authorize(payment, **kwargs)
        fault()
        return attempt

    monkeypatch.setattr(services, "payment_authorize_routed", authorize_then_fault)


def _assert_left_as_after_a_crash_then_reconciled(merchant, sandbox, body, key) -> None:
    """The payment is ``processing`` with its key locked (what a crash before phase 2
    leaves); once due, reconciliation finds the charge; the merchant's retry replays it."""
    payment = Payment.objects.get(reference=body["reference"])
    assert payment.status == "processing"
    assert payment.idempotency_key.status == IdempotencyKey.Status.IN_PROGRESS
    later = timezone.now() + timedelta(seconds=120)  # after the key's lock timeout
    assert reconciliation_claim_payment(payment_id=payment.pk, now=later, policy=POLICY)
    payment_reconcile(
        payment_id=payment.pk, client=acquirer_client(), policy=POLICY, clock=lambda: later
    )
    payment.refresh_from_db()
    assert payment.status == "succeeded"
    replay = merchant.create_payment(body, key=key)
    assert replay.status_code == 201
    assert replay["Idempotent-Replayed"] == "true"
    assert _charges(sandbox, body) == 1


def test_an_unreachable_database_answers_503_within_the_connect_timeout(
    merchant_a, sandbox, database_proxy
):
    """A blackholed server (connections accepted, never answered) ends at libpq's
    connect_timeout as a 503 problem with Retry-After; once it is back, the same key creates
    the payment, charged once."""
    body = _body()
    assert merchant_a.create_payment(_body()).status_code == 201  # through the proxy
    database_proxy.cut(blackhole=True)
    _assert_unavailable(_request(lambda: merchant_a.create_payment(body, key="outage-1")))
    database_proxy.restore()
    retried = _request(lambda: merchant_a.create_payment(body, key="outage-1"))
    assert retried.status_code == 201
    assert _charges(sandbox, body) == 1


def test_a_connection_lost_after_the_acquirer_call_ends_as_a_crash_before_phase_2(
    merchant_a, sandbox, database_proxy, monkeypatch
):
    """The acquirer charged, then the database went away: 503, the payment stays processing
    with its key locked (what a crash there leaves), reconciliation finds the charge, and the
    merchant's retry replays it; one charge."""
    _after_the_acquirer_call(monkeypatch, database_proxy.cut)
    body = _body()
    _assert_unavailable(_request(lambda: merchant_a.create_payment(body, key="outage-2")))
    monkeypatch.undo()
    database_proxy.restore()
    _assert_left_as_after_a_crash_then_reconciled(merchant_a, sandbox, body, "outage-2")


def test_a_table_lock_in_phase_1_answers_503_within_lock_timeout_and_writes_nothing(
    merchant_a, sandbox, short_lock_timeout
):
    """Another session holds the idempotency key table: the claim gives up at lock_timeout
    while the lock is still held; nothing was written, so the retry starts afresh."""
    body = _body()
    with _locker() as locker:
        locker.execute(f"LOCK TABLE {IdempotencyKey._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        _assert_unavailable(merchant_a.create_payment(body, key="locked-1"))
        assert locker.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert not Payment.objects.filter(reference=body["reference"]).exists()
    assert not IdempotencyKey.objects.filter(key="locked-1").exists()
    assert merchant_a.create_payment(body, key="locked-1").status_code == 201
    assert _charges(sandbox, body) == 1


def test_a_table_lock_in_phase_2_answers_503_and_reconciliation_resolves_the_payment(
    merchant_a, sandbox, short_lock_timeout, monkeypatch
):
    """The payments table is locked between the acquirer's answer and phase 2 (an operator's
    long migration, say): phase 2 gives up at lock_timeout, 503; the charge is found by
    reconciliation and replayed to the merchant, never made twice."""
    locker = _locker()
    _after_the_acquirer_call(
        monkeypatch,
        lambda: locker.execute(f"LOCK TABLE {Payment._meta.db_table} IN ACCESS EXCLUSIVE MODE"),
    )
    body = _body()
    with locker:
        _assert_unavailable(merchant_a.create_payment(body, key="locked-2"))
        assert locker.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    monkeypatch.undo()
    _assert_left_as_after_a_crash_then_reconciled(merchant_a, sandbox, body, "locked-2")


def test_a_view_outside_the_api_answers_503_too(client, database_proxy):
    """The admin's login (a Django view, not DRF's) during an outage: the middleware answers
    503 service_unavailable instead of Django's 500."""
    database_proxy.cut()
    response = _request(lambda: client.post("/admin/login/", {"username": "a", "password": "b"}))
    _assert_unavailable(response)
