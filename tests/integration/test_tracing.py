"""One trace per payment (issue 32, ADR 0044), with the SDK's in-memory exporter in this
process: the API through Django's test client, the sandbox acquirer over real HTTP, the
Celery tasks run in-process (``apply``: as the worker would, outside the request), a real
webhook receiver; every span exported through the production redacting exporter."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from django.test import Client
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from campaigns.secrets import CARDS, FORMATTED, secret_probes
from observability.log_filters import redact
from payments.models import Payment
from payments.reconciliation.tasks import payment_reconcile_task
from tests.support.api import PAYMENT_BODY
from tests.support.keys import idempotency_key
from tests.support.tracing import by_name, traced
from tests.support.webhook_receiver import running_receiver
from webhooks.models import Event
from webhooks.services import endpoint_create
from webhooks.tasks import deliver_event_task

pytestmark = pytest.mark.django_db(transaction=True)

MERCHANT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
MERCHANT_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def exporter():
    with traced() as found:
        yield found


@pytest.fixture
def spans(exporter):
    exporter.clear()
    yield exporter
    exporter.clear()


@pytest.fixture(scope="module")
def receiver():
    with running_receiver() as server:
        yield server


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, (name, [span.name for span in spans])
    return found[0]


def hex_trace(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}"


def test_a_202_payment_is_one_trace_from_the_request_to_the_webhook(
    spans, merchant_a, sandbox, single_attempt, receiver, settings
):
    """The acquirer commits and the answer times out: a 202. The request, phase 1, the
    attempt (with its HTTP span), phase 2, then (outside the request, as the worker runs it)
    the reconciliation's look-up, and the webhook delivery: one trace, each span under the
    right parent, the task spans linked, the merchant's server given the trace's traceparent."""
    settings.ACQUIRER_READ_TIMEOUT_SECONDS = 0.3
    endpoint_create(
        merchant=merchant_a.merchant, url=receiver.script("/trace", [200]), enabled_events=["*"]
    )
    body = {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    answer = merchant_a.create_payment(body)
    assert answer.status_code == 202
    payment = Payment.objects.get(pk=answer.json()["id"])
    assert payment_reconcile_task.apply(args=[payment.pk]).get() == "resolved"
    event = Event.objects.get(object_id=payment.pk, type="payment.succeeded")
    assert deliver_event_task.apply(args=[event.pk]).get() == 1

    finished = list(spans.get_finished_spans())
    request = next(s for s in finished if s.kind is SpanKind.SERVER)
    trace_id = request.context.trace_id
    phase_one, phase_two = one(finished, "payment phase 1"), one(finished, "payment phase 2")
    authorize = one(finished, "acquirer authorize")
    attempt = one(finished, "acquirer authorize attempt")
    reconcile, lookup = one(finished, "reconcile payment"), one(finished, "acquirer lookup")
    deliver = one(finished, "webhook deliver")
    in_trace = [phase_one, phase_two, authorize, attempt, reconcile, lookup, deliver]
    assert {span.context.trace_id for span in in_trace} == {trace_id}
    # The request's own spans, in order, under it.
    for span in (phase_one, authorize, phase_two):
        assert span.parent.span_id == request.context.span_id, span.name
    assert phase_one.attributes["payments.idempotency.outcome"] == "new"
    statements = [s for s in finished if s.parent == phase_one.context]
    assert [s.attributes["db.system"] for s in statements] == ["postgresql"]  # the one claim
    assert phase_one.attributes["payments.payment.id"] == payment.pk
    assert attempt.parent.span_id == authorize.context.span_id
    assert attempt.attributes["payments.attempt.number"] == 1
    assert attempt.attributes["payments.attempt.decision"] == "raise"
    assert attempt.attributes["error.type"] == "ResponseTimeoutError"  # ambiguous: committed
    assert attempt.attributes["payments.attempt.stop_reason"] == "max_attempts"
    assert attempt.attributes["payments.acquirer.name"] == payment.acquirer
    assert authorize.attributes["payments.request_id"] == answer["Request-Id"]
    http = [s for s in finished if s.kind is SpanKind.CLIENT and s.parent == attempt.context]
    assert len(http) == 1  # httpx's span of the request the sandbox committed
    assert phase_two.attributes["payments.authorization.outcome"] == "unknown"
    # Enqueued on commit: the message left inside the request's trace (Celery's instrumentation
    # puts the context in its headers, so a worker's run is the publish span's child).
    published = one(finished, "apply_async/payments.tasks.reconcile_payment")
    assert published.kind is SpanKind.PRODUCER and published.context.trace_id == trace_id
    # Here the task runs outside the request (as a sweep or a command would run it): its own
    # trace, linked from the payment's.
    run = one(finished, "run/payments.tasks.reconcile_payment")
    assert run.context.trace_id != trace_id
    assert reconcile.parent.span_id == phase_one.context.span_id  # the stored trace_context
    assert [link.context.span_id for link in reconcile.links] == [run.context.span_id]
    assert reconcile.attributes["payments.reconciliation.result"] == "resolved"
    assert lookup.parent.span_id == reconcile.context.span_id
    lookup_attempt = one(finished, "acquirer lookup attempt")
    assert lookup_attempt.attributes["payments.attempt.outcome"] == "ok"
    # The event was recorded in the reconciliation's span; its delivery joins the trace.
    stored = event.trace_context.split("-")
    assert stored[1:3] == [f"{trace_id:032x}", f"{reconcile.context.span_id:016x}"]
    assert deliver.parent.span_id == reconcile.context.span_id
    enqueued = one(finished, "apply_async/webhooks.tasks.deliver_event")
    assert enqueued.context.trace_id == trace_id  # the event's delivery task, on commit
    assert deliver.attributes["payments.webhook.outcome"] == "delivered"
    posted = next(s for s in finished if s.kind is SpanKind.CLIENT and s.parent == deliver.context)
    (received,) = receiver.at("/trace")
    flags = int(posted.context.trace_flags)
    assert flags & 1  # sampled
    assert received.headers["traceparent"] == (
        f"00-{trace_id:032x}-{posted.context.span_id:016x}-{flags:02x}"
    )
    assert "tracestate" not in received.headers and "baggage" not in received.headers


def test_a_merchants_traceparent_is_continued_and_its_tracestate_and_baggage_dropped(
    spans, merchant_a, sandbox
):
    """A valid ``traceparent`` is the request span's parent; ``tracestate`` and ``baggage``
    (the merchant's free text) go nowhere; an invalid one starts a new trace."""
    answer = merchant_a.create_payment(
        PAYMENT_BODY,
        HTTP_TRACEPARENT=f"00-{MERCHANT_TRACE}-{MERCHANT_SPAN}-01",
        HTTP_TRACESTATE="merchant=sk_live_notsent",
        HTTP_BAGGAGE="user=alice",
    )
    assert answer.status_code == 201
    merchant_a.create_payment(PAYMENT_BODY, HTTP_TRACEPARENT=f"00-{'0' * 32}-{MERCHANT_SPAN}-01")
    requests = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert len(requests) == 2
    continued, refused = requests
    assert hex_trace(continued) == MERCHANT_TRACE
    assert f"{continued.parent.span_id:016x}" == MERCHANT_SPAN and continued.parent.is_remote
    assert continued.context.trace_state == {} or not continued.context.trace_state
    assert hex_trace(refused) not in (MERCHANT_TRACE, "0" * 32) and refused.parent is None
    payment = Payment.objects.get(pk=answer.json()["id"])
    assert payment.trace_context.startswith(f"00-{MERCHANT_TRACE}-")


def test_replays_and_refusals_name_their_idempotency_outcome(spans, merchant_a, sandbox):
    """The claim's outcome on the request's span: new, replay, reused (the key's other body)."""
    key = idempotency_key()
    merchant_a.create_payment(PAYMENT_BODY, key=key)
    merchant_a.create_payment(PAYMENT_BODY, key=key)
    assert merchant_a.create_payment({**PAYMENT_BODY, "amount": 1}, key=key).status_code == 422
    outcomes = [
        span.attributes.get("payments.idempotency.outcome")
        for span in spans.get_finished_spans()
        if "payments.idempotency.outcome" in (span.attributes or {})
    ]
    assert outcomes == ["new", "replay", "reused"]


def _probe_request(client: Client, api_key: str, index: int, spec: dict):
    spec = dict(spec)
    method, path = spec.pop("method", "POST"), spec.pop("path", "/payments")
    headers = {
        f"HTTP_{name.upper().replace('-', '_')}": value
        for name, value in spec.pop("headers", {}).items()
    }
    content_type = headers.pop("HTTP_CONTENT_TYPE", "application/json")
    if spec.pop("auth", True):
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {api_key}")
    if method == "POST":
        headers["HTTP_IDEMPOTENCY_KEY"] = spec.pop("idempotency_key", f"span-secrets-{index}")
    query = urlencode(spec.pop("params", {}))
    body = json.dumps(spec.pop("json")).encode() if "json" in spec else spec.pop("content", b"")
    target = f"{path}?{query}" if query else path
    return client.generic(method, target, body, content_type=content_type, **headers)


def test_no_secret_reaches_an_exported_span(spans, merchant_a, sandbox):
    """The secrets campaign's inputs (card numbers in every field, the query string, the path
    and the headers; API keys in the wrong places), sent through the traced API: no card
    number, merchant key or acquirer key in any exported span's name, attributes, events or
    status, and every span's text is its own redaction (nothing left to hide)."""
    client = Client()
    for index, (_, spec) in enumerate(secret_probes(merchant_a.api_key)):
        assert _probe_request(client, merchant_a.api_key, index, spec).status_code < 500
    exported = spans.get_finished_spans()
    assert len([s for s in exported if s.kind is SpanKind.SERVER]) == len(
        secret_probes(merchant_a.api_key)
    )
    assert by_name(exported, "acquirer authorize")  # a payment went through too
    text = "\n".join(_span_text(span) for span in exported)
    needles = {*CARDS, *FORMATTED, merchant_a.api_key, sandbox.api_key}
    assert [needle[:6] for needle in needles if needle in text] == []
    assert redact(text) == text


def _span_text(span: ReadableSpan) -> str:
    parts = [span.name, json.dumps(dict(span.attributes or {}), default=str)]
    parts += [event.name + json.dumps(dict(event.attributes or {})) for event in span.events]
    parts.append(span.status.description or "")
    return "\n".join(parts)
