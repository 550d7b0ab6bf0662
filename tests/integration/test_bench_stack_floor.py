"""The stack floor's endpoint (bench/peers/floor_views.py) does the minimal floor's work and
no less: the six writes of bench/floor/payment.pgbench in two prepared statements, the
acquirer's charge between them, and a 201. Real PostgreSQL and the sandbox over HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from bench.peers import floor_views

FLOOR = Path(__file__).resolve().parents[2] / "bench" / "floor"
#: A write's kind and table: "INSERT INTO floor_payment" -> ("INSERT", "floor_payment").
STATEMENT = re.compile(r"\b(INSERT INTO|UPDATE) (floor_\w+)")


def shapes(sql: str) -> list[tuple[str, str]]:
    return [(kind.split()[0], table) for kind, table in STATEMENT.findall(sql)]


def test_the_floor_view_makes_the_minimal_floors_writes_in_order_in_two_statements():
    script = (FLOOR / "payment.pgbench").read_text()
    assert len(shapes(script)) == 6  # in two transactions (BEGIN ... COMMIT, twice)
    assert shapes(floor_views.PHASE_1) == shapes(script)[:3]
    assert shapes(floor_views.PHASE_2) == shapes(script)[3:]


@pytest.fixture
def floor_tables(django_db_blocker) -> Iterator[None]:
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute((FLOOR / "schema.sql").read_text())
    yield
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS floor_event, floor_payment, floor_idem")


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("bench.peers.floor_urls")
def test_a_floor_payment_writes_its_rows_and_charges_the_acquirer_once(floor_tables, sandbox):
    body = {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa"}
    answer = Client().post(
        "/bench/floor/payments", json.dumps(body), "application/json",
        HTTP_IDEMPOTENCY_KEY="floor-key-1",
    )  # fmt: skip
    assert answer.status_code == 201
    document = answer.json()
    assert document["status"] == "succeeded"
    [charge] = sandbox.charges(document["id"])
    assert charge["id"] == document["acquirer_reference"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, status, acquirer_reference, amount FROM floor_payment")
        [(payment_id, status, reference, amount)] = cursor.fetchall()
        cursor.execute("SELECT kind FROM floor_event WHERE payment_id = %s ORDER BY id",
                       [payment_id])  # fmt: skip
        kinds = [kind for (kind,) in cursor.fetchall()]
        cursor.execute("SELECT key, status, response_code, response_body FROM floor_idem")
        [(key, key_status, code, stored)] = cursor.fetchall()
    assert (status, reference, amount) == ("succeeded", charge["id"], 1999)
    assert kinds == ["created", "succeeded"]
    assert (key, key_status, code) == ("floor-key-1", "completed", 201)
    assert bytes(stored) == answer.content
    with connection.cursor() as cursor:  # the view's connection: both statements prepared
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [text for (text,) in cursor.fetchall()]
    assert any(text.startswith("WITH p AS (INSERT INTO floor_payment") for text in prepared)
    assert any(text.startswith("WITH u AS (UPDATE floor_payment") for text in prepared)
