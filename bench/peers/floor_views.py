"""The stack floor (bench only): the cheapest ``POST /payments`` this stack can serve.

The same libraries as the service (gunicorn as the Procfile runs it, Django's request handling,
psycopg on Django's persistent connection, httpx's transport as the gateway client sends) and
the minimal write floor's six writes (``bench/floor/payment.pgbench``). They are sent in the
fewest round trips the service's own hot path uses: one statement per phase, its writes in
CTEs, run in autocommit (a statement is its own transaction), bound by the server and prepared
per the connection's ``prepare_threshold`` (``idempotency/prepared_cursor.py``, ADR 0031), with
the acquirer called between the two. Nothing else: no middleware
(``bench.peers.floor_settings``), no authentication, no validation beyond ``json.loads``, no
retry policy, no breaker, no log line (gunicorn's access line is skipped as the service skips
it, ADR 0028), no outbox, no metrics.

It is not a payment service. It measures how much of a payment's CPU the stack itself costs,
so that the service's cost can be read as the stack's plus its own (``bench/stack_floor.py``).
"""

from __future__ import annotations

import json
import os

import httpx
import psycopg
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from observability.request_context import REQUEST_LINE_WRITTEN

_TRANSPORT = httpx.HTTPTransport(trust_env=False)
_TIMEOUT = httpx.Timeout(3.0, connect=1.0).as_dict()
_ANSWER_PADDING = "x" * 300  # the stored answer is about 400 bytes, as the floor's

#: Phase 1: the payment (processing), its idempotency key (in progress) and its first event.
PHASE_1 = (
    "WITH p AS (INSERT INTO floor_payment (public_id, merchant_id, amount, currency, status,"
    " payment_method) VALUES (%s, %s, %s, %s, 'processing', %s) RETURNING id),"
    " k AS (INSERT INTO floor_idem (merchant_id, key, method, route, fingerprint, status,"
    " locked_at, payment_id, expires_at) SELECT %s, %s, 'POST', '/payments', %s, 'in_progress',"
    " now(), p.id, now() + interval '24 hours' FROM p RETURNING id),"
    " e AS (INSERT INTO floor_event (payment_id, kind, data) SELECT p.id, 'created',"
    " '{}'::jsonb FROM p)"
    " SELECT p.id, k.id FROM p, k"
)
#: Phase 2: the outcome, its event, and the key completed with the stored answer.
PHASE_2 = (
    "WITH u AS (UPDATE floor_payment SET status = %s, acquirer_reference = %s,"
    " updated_at = now() WHERE id = %s RETURNING id),"
    " e AS (INSERT INTO floor_event (payment_id, kind, data) SELECT u.id, %s, %s::jsonb FROM u),"
    " k AS (UPDATE floor_idem SET status = 'completed', locked_at = NULL, response_code = 201,"
    " response_headers = %s::jsonb, response_body = %s WHERE id = %s RETURNING id)"
    " SELECT count(*) FROM k"
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
    # psycopg's own server-binding cursor on Django's connection (autocommit, kept across
    # requests); Django's cursors bind on the client and never prepare.
    cursor = psycopg.Cursor(connection.connection)
    cursor.execute(
        PHASE_1,
        [public_id, merchant, body["amount"], body["currency"], body["payment_method"],
         merchant, key, "fingerprint"],
    )  # fmt: skip
    payment_id, key_id = cursor.fetchone()
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
    cursor.execute(
        PHASE_2,
        [status, reference, payment_id, status, json.dumps({"acquirer_reference": reference}),
         json.dumps({"Location": f"/payments/{public_id}"}), answer.encode(), key_id],
    )  # fmt: skip
    cursor.close()
    request.META[REQUEST_LINE_WRITTEN] = True  # no access line either (observability/access_log.py)
    return HttpResponse(answer, status=201, content_type="application/json")
