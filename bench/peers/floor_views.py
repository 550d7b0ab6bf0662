"""The stack floor (bench only): the cheapest ``POST /payments`` this stack can serve.

The same libraries as the service (gunicorn as the Procfile runs it, Django's request handling,
psycopg on Django's persistent connection, httpx's transport as the gateway client sends) and
the minimal write floor's SQL (``bench/floor/payment.pgbench``: seven statements in two
transactions, prepared), with the acquirer called between the transactions. Nothing else: no
middleware (``bench.peers.floor_settings``), no authentication, no validation beyond
``json.loads``, no retry policy, no breaker, no log line of its own, no outbox, no metrics.

It is not a payment service. It measures how much of a payment's CPU the stack itself costs,
so that the service's cost can be read as the stack's plus its own (``bench/stack_floor.py``).
"""

from __future__ import annotations

import json
import os

import httpx
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

_TRANSPORT = httpx.HTTPTransport(trust_env=False)
_TIMEOUT = httpx.Timeout(3.0, connect=1.0).as_dict()
_ANSWER_PADDING = "x" * 300  # the stored answer is about 400 bytes, as the floor's

PHASE_1 = (
    "INSERT INTO floor_payment (public_id, merchant_id, amount, currency, status,"
    " payment_method) VALUES (%s, %s, %s, %s, 'processing', %s) RETURNING id",
    "INSERT INTO floor_idem (merchant_id, key, method, route, fingerprint, status, locked_at,"
    " payment_id, expires_at) VALUES (%s, %s, 'POST', '/payments', %s, 'in_progress', now(),"
    " %s, now() + interval '24 hours') RETURNING id",
    "INSERT INTO floor_event (payment_id, kind, data) VALUES (%s, 'created', '{}')",
)
PHASE_2 = (
    "UPDATE floor_payment SET status = %s, acquirer_reference = %s, updated_at = now()"
    " WHERE id = %s",
    "INSERT INTO floor_event (payment_id, kind, data) VALUES (%s, %s, %s)",
    "UPDATE floor_idem SET status = 'completed', locked_at = NULL, response_code = 201,"
    " response_headers = %s, response_body = %s WHERE id = %s",
)


def floor_health(request: HttpRequest) -> HttpResponse:
    """``200`` for the harness's start-up poll."""
    return HttpResponse(b"ok", content_type="text/plain")


@csrf_exempt
def floor_payment(request: HttpRequest) -> HttpResponse:
    """Phase 1, the acquirer's ``POST /charges``, phase 2, a ``201`` JSON answer."""
    body = json.loads(request.body)
    key = request.headers["Idempotency-Key"]
    public_id = "pay_" + os.urandom(12).hex()
    merchant = 1
    connection.ensure_connection()
    pg = connection.connection  # psycopg's own connection, autocommit, kept across requests
    with pg.transaction():
        payment_id = pg.execute(
            PHASE_1[0],
            [public_id, merchant, body["amount"], body["currency"], body["payment_method"]],
            prepare=True,
        ).fetchone()[0]
        key_id = pg.execute(
            PHASE_1[1], [merchant, key, "fingerprint", payment_id], prepare=True
        ).fetchone()[0]
        pg.execute(PHASE_1[2], [payment_id], prepare=True)
    charge = json.dumps({
        "amount": body["amount"], "currency": body["currency"],
        "payment_method": body["payment_method"], "reference": public_id,
    }).encode()  # fmt: skip
    sent = httpx.Request(
        "POST", f"{settings.ACQUIRER_BASE_URL}/charges", content=charge,
        headers={
            "Authorization": f"Bearer {settings.ACQUIRER_API_KEY}",
            "Content-Type": "application/json", "Idempotency-Key": f"authorize-{public_id}",
        },
        extensions={"timeout": _TIMEOUT},
    )  # fmt: skip
    response = _TRANSPORT.handle_request(sent)
    try:
        response.read()
    finally:
        response.close()
    reference = json.loads(response.content)["id"]
    status = "succeeded" if response.status_code == 201 else "failed"
    answer = json.dumps({
        "id": public_id, "status": status, "amount": body["amount"],
        "currency": body["currency"], "acquirer_reference": reference, "pad": _ANSWER_PADDING,
    })  # fmt: skip
    with pg.transaction():
        pg.execute(PHASE_2[0], [status, reference, payment_id], prepare=True)
        pg.execute(
            PHASE_2[1], [payment_id, status, json.dumps({"acquirer_reference": reference})],
            prepare=True,
        )  # fmt: skip
        pg.execute(
            PHASE_2[2],
            [json.dumps({"Location": f"/payments/{public_id}"}), answer.encode(), key_id],
            prepare=True,
        )
    return HttpResponse(answer, status=201, content_type="application/json")
