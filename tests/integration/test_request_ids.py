"""Request ids and the request line (observability/request_context.py), through the Django test
client with real PostgreSQL and the sandbox acquirer over HTTP; the JSON lines are read from the
configured handler (its redacting formatter included)."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
import structlog
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import path

from config.celery_app import _bind_task_context, _publish_request_id
from config.urls import urlpatterns as service_urls
from observability.log_filters import RedactingProcessorFormatter
from observability.request_context import (
    REQUEST_ID_HEADER,
    REQUEST_LINE_WRITTEN,
    current_request_id,
    new_request_id,
    request_line_note,
    valid_request_id,
)
from payments.models import PaymentEvent
from tests.support.api import PAYMENT_BODY

#: The payment flow calls the acquirer outside any transaction: no test-wide transaction.
in_database = pytest.mark.django_db(transaction=True)

CARD = "4111111111111111"


def _crash(request):
    card, token = request.GET.get("card"), request.GET.get("token")
    raise RuntimeError(f"crashed on card {card} token={token}")


#: The service's URLs plus one view that raises: what an unexpected bug looks like.
urlpatterns = [*service_urls, path("test-crash", _crash)]


@pytest.fixture
def log_lines():
    """The JSON lines the configured root handler writes during the test, parsed."""
    handlers = [
        h
        for h in logging.getLogger().handlers
        if isinstance(h.formatter, RedactingProcessorFormatter)
    ]
    assert handlers, "the settings' LOGGING installs the redacting formatter on the root"
    stream = io.StringIO()
    previous = [h.setStream(stream) for h in handlers]
    lines: list[dict] = []

    def read() -> list[dict]:
        text = stream.getvalue()
        lines[:] = [json.loads(line) for line in text.splitlines() if line.strip()]
        return lines

    read.text = stream.getvalue  # type: ignore[attr-defined]
    try:
        yield read
    finally:
        for handler, old in zip(handlers, previous, strict=True):
            handler.setStream(old)


def request_lines(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line.get("logger") == "payments.request"]


@pytest.mark.parametrize(
    ("value", "adopted"),
    [
        ("abc-123_X.y:z", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("", False),
        ("has space", False),
        ("new\nline", False),
        ("é", False),
        (CARD, False),
        ("order-4111-1111-1111-1111", False),
        ("sk_live_abcdef", False),
    ],
)
def test_valid_request_id(value, adopted):
    """1-128 of A-Z a-z 0-9 . _ : -, and nothing the log redaction would hide."""
    assert valid_request_id(value) is adopted


def test_new_request_ids_are_valid_and_distinct():
    ids = {new_request_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(valid_request_id(i) and re.fullmatch(r"req_[a-z2-7]{24}", i) for i in ids)


@in_database
def test_every_answer_carries_a_request_id(merchant_a, sandbox, log_lines):
    """Success, replay, validation error, 401, unknown URL: each answer has its own id, the
    one of its request line; a replay gets the new request's id."""
    first = merchant_a.create_payment(PAYMENT_BODY, key="rid-1")
    replay = merchant_a.create_payment(PAYMENT_BODY, key="rid-1")
    invalid = merchant_a.create_payment({**PAYMENT_BODY, "amount": "x"})
    unauthenticated = Client().get("/payments")
    unknown = merchant_a.client.get("/nowhere")
    answers = [first, replay, invalid, unauthenticated, unknown]
    ids = [answer[REQUEST_ID_HEADER] for answer in answers]
    assert len(set(ids)) == len(ids)
    assert all(valid_request_id(i) for i in ids)
    assert replay["Idempotent-Replayed"] == "true"
    lines = request_lines(log_lines())
    assert [line["request_id"] for line in lines] == ids
    assert [line["status"] for line in lines] == [201, 201, 400, 401, 404]


@in_database
def test_a_valid_client_id_is_adopted_and_an_invalid_one_replaced(merchant_a, sandbox):
    mine = merchant_a.create_payment(PAYMENT_BODY, HTTP_X_REQUEST_ID="client-7f3a")
    assert mine[REQUEST_ID_HEADER] == "client-7f3a"
    for bad in (CARD, "x" * 300, "a b"):
        answer = merchant_a.create_payment(PAYMENT_BODY, HTTP_X_REQUEST_ID=bad)
        assert answer[REQUEST_ID_HEADER] != bad
        assert valid_request_id(answer[REQUEST_ID_HEADER])
        assert CARD not in answer.content.decode()


@in_database
def test_the_request_line_and_the_attempt_line_carry_the_request(merchant_a, sandbox, log_lines):
    """One request line with merchant, route, status, duration, idempotency outcome and
    payment id; the acquirer attempt line of the same request carries the id as a field (the
    id the client sends as X-Request-Id); the events record it; the admin finds the payment
    by it."""
    answer = merchant_a.create_payment(PAYMENT_BODY, key="line-1", HTTP_X_REQUEST_ID="trace-1")
    payment_id = answer.json()["id"]
    lines = log_lines()
    (request,) = request_lines(lines)
    assert request | {"duration_ms": 0, "timestamp": ""} == request | {
        "request_id": "trace-1",
        "merchant_id": merchant_a.merchant.pk,
        "method": "POST",
        "route": "/payments",
        "status": 201,
        "idempotency": "new",
        "payment_id": payment_id,
        "payment_status": "succeeded",
        "authorize_outcome": "approved",
        "bytes": len(answer.content),
        "remote_addr": "127.0.0.1",
        "level": "info",
        "duration_ms": 0,
        "timestamp": "",
    }
    assert request["duration_ms"] > 0
    assert "path" not in request  # a routed request names its route, never its raw path
    # The outcome is a field of the request line, not a line of its own (ADR 0028); the
    # request line marks the WSGI environ so gunicorn writes no access line for it.
    assert not [line for line in lines if line["logger"] == "payments.authorization.create"]
    assert answer.wsgi_request.META[REQUEST_LINE_WRITTEN] is True
    attempts = [line for line in lines if line.get("gateway_operation") == "authorize"]
    assert [(a["request_id"], a["gateway_request_id"]) for a in attempts] == [("trace-1",) * 2]
    events = PaymentEvent.objects.filter(payment_id=payment_id)
    assert events.count() >= 2
    assert set(events.values_list("request_id", flat=True)) == {"trace-1"}


@in_database
def test_an_unrouted_request_line_names_its_path(merchant_a, log_lines):
    """No route matched: the line carries the path (no query string), as the access line did."""
    assert merchant_a.client.get("/nowhere/else", {"token": "x"}).status_code == 404
    (line,) = request_lines(log_lines())
    assert (line["route"], line["path"], line["status"]) == (None, "/nowhere/else", 404)


def test_request_line_note_outside_a_request_adds_nothing(caplog):
    """A task or a command has no request line: the caller is told to write its own, and the
    authorization's outcome gets its own INFO line there."""
    from types import SimpleNamespace

    from payments.authorization.create import _authorize_outcome_log
    from payments.core.attempts import AuthorizationOutcome

    assert request_line_note(payment_status="succeeded") is False
    caplog.set_level(logging.INFO, logger="payments.authorization.create")
    payment = SimpleNamespace(id="pay_0123456789abcdef01234567", status="succeeded")
    _authorize_outcome_log(payment, AuthorizationOutcome.APPROVED)  # type: ignore[arg-type]
    (record,) = [r for r in caplog.records if r.name == "payments.authorization.create"]
    assert record.getMessage() == (
        "payment pay_0123456789abcdef01234567 authorize outcome=approved status=succeeded"
    )


@in_database
def test_idempotency_outcomes_in_the_request_line(merchant_a, sandbox, log_lines):
    """new, replay, reused (422); an operation's route names its pattern and the payment."""
    manual = {**PAYMENT_BODY, "capture_method": "manual"}
    merchant_a.create_payment(manual, key="o-1")
    payment_id = merchant_a.create_payment(manual, key="o-1").json()["id"]
    merchant_a.create_payment({**PAYMENT_BODY, "amount": 5}, key="o-1")
    merchant_a.client.post(
        f"/payments/{payment_id}/void", {}, format="json", HTTP_IDEMPOTENCY_KEY="v-1"
    )
    lines = request_lines(log_lines())
    assert [(line["status"], line["idempotency"]) for line in lines] == [
        (201, "new"),
        (201, "replay"),
        (422, "reused"),
        (200, "new"),
    ]
    assert lines[3]["route"] == "/payments/<str:payment_id>/void"
    assert lines[3]["payment_id"] == payment_id


@in_database
def test_expected_errors_are_not_logged_at_error(merchant_a, settings, log_lines):
    """An unreachable acquirer's 503 is one WARNING request line; a 404 one INFO line; no
    django.request line repeats them (it logs every 5xx at ERROR); a health check is DEBUG."""
    settings.ACQUIRER_BASE_URL = "http://127.0.0.1:9"
    assert merchant_a.create_payment(PAYMENT_BODY).status_code == 503
    assert merchant_a.client.get("/payments/pay_unknown").status_code == 404
    assert Client().get("/healthz").status_code == 200  # DEBUG: below the test's INFO
    lines = log_lines()
    assert [(line["status"], line["level"]) for line in request_lines(lines)] == [
        (503, "warning"),
        (404, "info"),
    ]
    assert not [line for line in lines if line["logger"] == "django.request"]
    assert not [line for line in lines if line["level"] in ("error", "critical")]


@pytest.mark.urls(__name__)
@pytest.mark.django_db
def test_a_crash_traceback_is_redacted_in_json(log_lines):
    """An unexpected exception carrying a card number and a token: Django's ERROR line with its
    traceback, as JSON, with neither; the request line is ERROR with the same request id."""
    client = Client(raise_request_exception=False)
    answer = client.get("/test-crash", {"card": "4111 1111 1111 1111", "token": "tok-secret-9"})
    assert answer.status_code == 500
    text = log_lines.text()
    for secret in ("4111 1111 1111 1111", "4111+1111+1111+1111", CARD, "tok-secret-9"):
        assert secret not in text, secret
    lines = log_lines()
    (crash,) = [line for line in lines if line["logger"] == "django.request"]
    assert crash["level"] == "error"
    assert (
        "RuntimeError: crashed on card [card number redacted] token=[redacted]"
        in (crash["exception"])
    )
    assert crash["request_id"] == answer[REQUEST_ID_HEADER]
    assert request_lines(lines)[0]["level"] == "error"


def test_tasks_carry_the_request_id_in_their_headers():
    """Publishing inside a request puts its id in the message headers; the task runs with it
    bound (and a task without one gets a new id)."""
    structlog.contextvars.bind_contextvars(request_id="req_publisher")
    try:
        headers: dict = {}
        _publish_request_id(headers=headers)
        assert headers == {"request_id": "req_publisher"}
    finally:
        structlog.contextvars.clear_contextvars()

    class Task:
        name = "payments.tasks.reconcile_payment"

        def __init__(self, request):
            self.request = request

    _bind_task_context(task_id="t-1", task=Task({"request_id": "req_publisher"}))
    assert current_request_id() == "req_publisher"
    assert structlog.contextvars.get_contextvars()["task_id"] == "t-1"
    _bind_task_context(task_id="t-2", task=Task({"request_id": CARD}))
    assert current_request_id() != CARD
    structlog.contextvars.clear_contextvars()


@in_database
def test_admin_search_finds_a_payment_by_request_id(merchant_a, sandbox, admin_client):
    answer = merchant_a.create_payment(PAYMENT_BODY, HTTP_X_REQUEST_ID="find-me-42")
    page = admin_client.get("/admin/payments/payment/", {"q": "find-me-42"})
    assert answer.json()["id"] in page.content.decode()
    assert (
        "find-me-42"
        in admin_client.get(
            # The admin's own URL quoting: an id with "_40" after its prefix would otherwise
            # be read as "@" (django.contrib.admin.utils.unquote).
            f"/admin/payments/payment/{quote(answer.json()['id'])}/change/"
        ).content.decode()
    )
