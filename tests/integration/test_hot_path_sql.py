"""The SQL of ``POST /payments`` on its hot path, against real PostgreSQL (ADR 0026): the exact
statements of a fresh payment, a replay and a ``409``, counted with Django's
``CaptureQueriesContext`` (counts and shapes, never times), and the plain payment document
equal to ``PaymentSerializer``'s. ``bench/throughput.py`` runs the same statements in pgbench
(its script is checked against them here too)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.throughput import EXPECTED_FRESH, captured_shapes, pgbench_script, script_shapes
from idempotency.fingerprint import request_fingerprint
from idempotency.services import idempotency_key_claim
from payments.core.answers import payment_document
from payments.core.documents import PaymentSerializer
from payments.models import Payment, PaymentStatus
from tests.factories import PaymentFactory
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)

#: A fresh payment with a new key, the API key served from the process's cache: the list the
#: throughput benchmark enforces before it measures.
FRESH = EXPECTED_FRESH
#: The API key's look-up when the process has not seen it in API_KEY_CACHE_SECONDS.
API_KEY = ["SELECT merchants_apikey", "UPDATE merchants_apikey"]


def _post(merchant, key: str, *, sql: list[str] | None = None):
    with CaptureQueriesContext(connection) as queries:
        answer = merchant.create_payment(PAYMENT_BODY, key=key)
    statements = [q["sql"] for q in queries.captured_queries]
    if sql is not None:
        sql.extend(statements)
    return answer, captured_shapes(statements)


def test_a_fresh_payment_is_five_statements_and_the_first_request_adds_the_api_key(
    merchant_a, sandbox
):
    """The first request of a key looks it up (and writes last_used_at); the next ones are
    served from the cache: the phase-1 statement, then phase 2's transaction."""
    first, shapes = _post(merchant_a, uuid.uuid4().hex)
    assert first.status_code == 201
    assert shapes == API_KEY + FRESH
    second, shapes = _post(merchant_a, uuid.uuid4().hex)
    assert second.status_code == 201 and second.json()["status"] == "succeeded"
    assert shapes == FRESH


def test_a_replay_is_one_statement(merchant_a, sandbox):
    """A replay of a final answer: the claim's one statement, which finds the stored answer."""
    key = uuid.uuid4().hex
    first, _ = _post(merchant_a, key)
    replay, shapes = _post(merchant_a, key)
    assert replay.status_code == 201 and replay["Idempotent-Replayed"] == "true"
    assert replay.content == first.content
    assert shapes == ["INSERT idempotency_idempotencykey"]
    assert sandbox.stats()["charges_total"] == 1


def test_a_409_is_one_statement(merchant_a, sandbox):
    """A key still in progress (its request running): 409 from the same one statement."""
    key = uuid.uuid4().hex
    validated = {k: PAYMENT_BODY[k] for k in ("amount", "currency", "payment_method", "reference")}
    now = timezone.now()
    with transaction.atomic():
        idempotency_key_claim(
            merchant_id=merchant_a.merchant.pk, key=key, method="POST", route="/payments",
            fingerprint=request_fingerprint("POST", "/payments", validated), now=now,
            retention=timedelta(days=1), lock_timeout=timedelta(seconds=60),
        )  # fmt: skip
    _post(merchant_a, uuid.uuid4().hex)  # the API key into the cache
    answer, shapes = _post(merchant_a, key)
    assert answer.status_code == 409 and answer.json()["code"] == "idempotency_key_in_use"
    assert shapes == ["INSERT idempotency_idempotencykey"]


def test_the_benchmarks_pgbench_script_runs_these_statements(merchant_a, sandbox):
    """bench/throughput.py's same-SQL floor is a fresh payment's statements, its payment id and
    idempotency key made new on every pgbench transaction."""
    _post(merchant_a, uuid.uuid4().hex)
    key, sql = uuid.uuid4().hex, []
    answer, _ = _post(merchant_a, key, sql=sql)
    script = pgbench_script(sql, answer.json()["id"], key)
    assert script_shapes(script) == FRESH
    assert answer.json()["id"] not in script and key not in script
    assert script.count("pay_:client_id-:k") >= 4 and "'pgbench-:client_id-:k'" in script


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"status": PaymentStatus.DECLINED, "decline_code": "do_not_honor"},
        {"status": PaymentStatus.FAILED, "failure_code": "acquirer_rejected"},
        {"status": PaymentStatus.REQUIRES_CAPTURE, "capture_method": "manual", "reference": None},
        {"description": "Zürich 東京", "amount": 1999, "amount_refunded": 5},
    ],
)
def test_the_payment_document_is_the_serializers(changes):
    """payment_document (the hot path's) and PaymentSerializer (GET, lists) agree exactly."""
    payment = PaymentFactory(**changes)
    payment = Payment.objects.get(pk=payment.pk)
    assert payment_document(payment) == PaymentSerializer(payment).data


def _prepared_on_this_connection() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_the_hot_path_statements_are_prepared_once_per_connection(merchant_a, sandbox):
    """ADR 0031: after two fresh payments on one connection, the claim, phase 2 and the outbox
    statement are each prepared once (server-bound, ``$n`` parameters) and nothing of Django's
    own cursors is; with ``prepare_threshold`` None (behind PgBouncer) none is prepared."""
    connection.close()
    for _ in range(2):
        answer, _ = _post(merchant_a, uuid.uuid4().hex)
        assert answer.status_code == 201
    prepared = _prepared_on_this_connection()
    assert sorted(text.split(" AS (")[0] for text in prepared) == [
        "WITH claimed_key",
        "WITH new_event",
        "WITH updated_payment",
    ]
    assert all("$1" in text for text in prepared)

    connection.close()
    connection.ensure_connection()
    connection.connection.prepare_threshold = None
    answer, _ = _post(merchant_a, uuid.uuid4().hex)
    assert answer.status_code == 201
    assert _prepared_on_this_connection() == []
