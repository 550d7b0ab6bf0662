"""Tracing's set-up and our pieces of it (observability/tracing.py, trace_context.py; ADR 0044):
when it is on, what a client's trace context may bring in, the redaction of exported spans,
the stored context a sweep joins, and the trace ids in log lines."""

from __future__ import annotations

import io
import json
import logging
import logging.config

import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from observability.log_config import logging_config
from observability.log_filters import redact
from observability.trace_context import (
    add_trace_ids,
    current_traceparent,
    payment_trace_span,
    tracer,
)
from observability.tracing import (
    RedactingSpanExporter,
    TraceparentOnlyPropagator,
    tracing_configured,
)
from tests.support.tracing import by_name, traced

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
CARD = "4242 4242 4242 4242"
KEY = "sk_live_" + "a1B2c3D4" * 4


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "web", "OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
    ],
)
def test_tracing_is_on_only_when_an_exporter_is_configured(environ, on):
    assert tracing_configured(environ) is on


def test_an_unknown_exporter_name_is_an_error_not_tracing_off():
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER must be one of"):
        tracing_configured({"OTEL_TRACES_EXPORTER": "jaegr"})


def test_a_clients_traceparent_is_kept_and_its_tracestate_dropped():
    carrier = {"traceparent": f"00-{TRACE}-{SPAN}-01", "tracestate": f"merchant={KEY}"}
    found = trace.get_current_span(TraceparentOnlyPropagator().extract(carrier))
    context = found.get_span_context()
    assert (f"{context.trace_id:032x}", f"{context.span_id:016x}") == (TRACE, SPAN)
    assert context.is_remote and context.trace_flags.sampled
    assert not context.trace_state
    sent: dict[str, str] = {}
    TraceparentOnlyPropagator().inject(sent, trace.set_span_in_context(found))
    assert sent == {"traceparent": f"00-{TRACE}-{SPAN}-01"}


@pytest.mark.parametrize(
    "traceparent",
    [
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero span id
        f"ff-{TRACE}-{SPAN}-01",  # version ff is forbidden
        f"00-{TRACE.upper()}-{SPAN}-01",  # upper case
        f"00-{TRACE}-{SPAN}",  # no flags
        "4242424242424242",
        "",
    ],
)
def test_an_invalid_traceparent_is_ignored(traceparent):
    extracted = TraceparentOnlyPropagator().extract({"traceparent": traceparent})
    assert not trace.get_current_span(extracted).get_span_context().is_valid


def test_exported_spans_are_redacted_like_log_lines():
    """Name, attributes (strings and lists of strings), events, links and the status text go
    through the log redaction; numbers and booleans are left alone."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(exporter)))
    local = provider.get_tracer("test")
    with local.start_as_current_span(f"GET /payments/{CARD}") as linked:
        pass
    with local.start_as_current_span(
        "POST /payments",
        links=[trace.Link(linked.get_span_context(), {"why": f"token={KEY}"})],
        attributes={"http.url": f"/payments?api_key={KEY}&reference=x", "amount": 1999},
    ) as span:
        span.set_attribute("headers", [f"authorization: Bearer {KEY}", "accept: */*"])
        span.add_event("note", {"text": f"card {CARD}"})
        span.record_exception(ValueError(f"bad card {CARD}"))
        span.set_status(trace.StatusCode.ERROR, f"refused {KEY}")
    first, second = exporter.get_finished_spans()
    assert first.name == "GET /payments/[card number redacted]"
    assert second.attributes["http.url"] == "/payments?api_key=[redacted]&reference=x"
    assert second.attributes["amount"] == 1999
    assert second.attributes["headers"] == ("authorization: [redacted]", "accept: */*")
    assert second.events[0].attributes["text"] == "card [card number redacted]"
    assert CARD not in json.dumps(dict(second.events[1].attributes))
    assert second.links[0].attributes["why"] == "token=[redacted]"
    assert second.status.description == "refused sk_live_[redacted]"
    exported = second.to_json() + first.to_json()
    assert KEY not in exported and CARD not in exported
    assert second.context == span.get_span_context()  # the same span, its text redacted


def test_nothing_is_current_without_a_span():
    assert current_traceparent() == ""
    assert add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}


def test_a_sweep_joins_the_stored_trace_and_links_its_own():
    """The stored traceparent is the parent; the running span (the sweep's) a link. In the
    same trace already (a task enqueued on commit): a plain child. Nothing stored: a child."""
    with traced() as exporter:
        with tracer.start_as_current_span("request"):
            stored = current_traceparent()
        with tracer.start_as_current_span("sweep") as sweep:
            with payment_trace_span("reconcile payment", stored, {"payments.payment.id": "p"}):
                inside = current_traceparent()
            with payment_trace_span("deliver", "") as plain:
                pass
        task_context = _context_of(stored)
        with (
            tracer.start_as_current_span("task", context=task_context),
            payment_trace_span("reconcile payment", stored) as child,
        ):
            pass
        spans = exporter.get_finished_spans()
    request, joined = by_name(spans, "request")[0], by_name(spans, "reconcile payment")
    assert stored == (
        f"00-{request.context.trace_id:032x}-{request.context.span_id:016x}-"
        f"{int(request.context.trace_flags):02x}"
    )
    assert joined[0].parent.span_id == request.context.span_id
    assert joined[0].context.trace_id == request.context.trace_id
    assert [link.context for link in joined[0].links] == [sweep.get_span_context()]
    assert inside.split("-")[1] == f"{request.context.trace_id:032x}"
    assert by_name(spans, "deliver")[0].parent.span_id == sweep.get_span_context().span_id
    assert plain.get_span_context().trace_id == sweep.get_span_context().trace_id
    with tracer.start_as_current_span("after the block"):
        assert current_traceparent() == ""  # tracing as if off again for the next tests
    task = by_name(spans, "task")[0]
    assert child.get_span_context().trace_id == request.context.trace_id
    assert joined[1].parent.span_id == task.context.span_id and not joined[1].links


def _context_of(traceparent: str):
    return TraceparentOnlyPropagator().extract({"traceparent": traceparent})


def test_every_log_line_carries_the_trace_and_span_ids():
    """A line of the production formatter (observability/log_config.py) carries the running
    span's ids beside the request id."""
    structured = logging_config(log_format="json", level="INFO")["formatters"]["structured"]
    formatter = logging.config.DictConfigurator({}).configure_formatter(dict(structured))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("payments.test_tracing")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with traced(), tracer.start_as_current_span("request") as span:
            structlog.contextvars.bind_contextvars(request_id="req_1")
            logger.warning("stdlib line")
    finally:
        structlog.contextvars.clear_contextvars()
        logger.removeHandler(handler)
        logger.propagate = True
    line = json.loads(stream.getvalue())
    context = span.get_span_context()
    assert line["request_id"] == "req_1"
    assert (line["trace_id"], line["span_id"]) == (
        f"{context.trace_id:032x}",
        f"{context.span_id:016x}",
    )


@pytest.mark.parametrize(
    "trace_id", ["4242424242424242424242424242424a", "a0123456789012345678901234567890"]
)
def test_a_trace_id_with_a_long_run_of_digits_is_not_redacted(trace_id):
    assert redact(f'"trace_id": "{trace_id}", "span_id": "a123456789012345"') == (
        f'"trace_id": "{trace_id}", "span_id": "a123456789012345"'
    )
    assert redact("trace 4242424242424242") == "trace [card number redacted]"
