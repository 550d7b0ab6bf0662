"""The stack floor's endpoint (bench/peers/floor_views.py) does the minimal floor's work and
no less: the seven statements of bench/floor/payment.pgbench, the acquirer's charge between
its two transactions, and a 201. Real PostgreSQL and the sandbox over HTTP."""

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
#: A statement's kind and table: "INSERT INTO floor_payment" -> ("INSERT", "floor_payment").
STATEMENT = re.compile(r"^(INSERT INTO|UPDATE) (floor_\w+)", re.MULTILINE)


def shapes(sql: str) -> list[tuple[str, str]]:
    return [(kind.split()[0], table) for kind, table in STATEMENT.findall(sql)]


def test_the_floor_view_sends_the_minimal_floors_statements_in_order():
    script = (FLOOR / "payment.pgbench").read_text()
    view = "\n".join((*floor_views.PHASE_1, *floor_views.PHASE_2))
    assert len(shapes(script)) == 6  # + BEGIN/COMMIT twice: the README's seven statements
    assert shapes(view) == shapes(script)


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
