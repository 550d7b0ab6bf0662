"""The trace context our own code reads and writes: OpenTelemetry's API only (ADR 0044).

Everything here is a no-op, or returns an empty value, when tracing is off: without the SDK
(observability/tracing.py sets it up only when an exporter is configured) the API's tracer
makes non-recording spans and the current span context is invalid. So the apps call these
helpers unconditionally and pay a context-variable look-up when tracing is off.

* :data:`tracer` makes the service's own spans (named ``payments ...``; attributes by
  OpenTelemetry's semantic conventions where one exists, else under ``payments.``).
* :func:`current_traceparent` is the W3C ``traceparent`` of the running span, stored with a
  payment and a webhook event (``trace_context``) so work done later by a sweep joins the
  payment's trace.
* :func:`payment_trace_span` starts a span in the trace a stored ``traceparent`` names: the
  reconciliation of a payment and the delivery of an event, whoever runs them.
* :func:`add_trace_ids` is the structlog processor putting ``trace_id`` and ``span_id`` beside
  ``request_id`` in every log line (observability/log_config.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

import card_data

__all__ = [
    "PAYMENT_ID",
    "add_trace_ids",
    "current_traceparent",
    "payment_trace_span",
    "span_note",
    "tracer",
]

#: The service's own spans' instrumentation scope.
tracer = trace.get_tracer("payments")

#: Our attribute naming the payment (no semantic convention exists for one).
PAYMENT_ID = "payments.payment.id"

_W3C = TraceContextTextMapPropagator()


def current_traceparent() -> str:
    """The running span's W3C ``traceparent`` (``00-<32 hex>-<16 hex>-<2 hex>``, 55
    characters), or ``""`` when no span is recording a trace here (tracing off, or none
    running), or when it holds what reads as a card number: a merchant's ``traceparent`` is
    continued, so its trace id is text a client chose, and a stored text never keeps one
    (tests/integration/test_stored_text.py)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return ""
    value = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    return "" if card_data.contains_card_number(value) else value


def span_note(attributes: Mapping[str, AttributeValue | None]) -> None:
    """Put ``attributes`` (None values left out) on the running span when it records: a fact
    found on the way (the idempotency outcome, a payment's id, a result)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({name: got for name, got in attributes.items() if got is not None})


def _stored_context(traceparent: str) -> trace.SpanContext | None:
    if not traceparent:
        return None
    carried = trace.get_current_span(_W3C.extract({"traceparent": traceparent}))
    found = carried.get_span_context()
    return found if found.is_valid else None


@contextmanager
def payment_trace_span(
    name: str, traceparent: str, attributes: Mapping[str, AttributeValue] | None = None
) -> Iterator[trace.Span]:
    """Run the block in a new span ``name`` that belongs to the trace ``traceparent`` names
    (a payment's or an event's stored ``trace_context``).

    When the running span is already in that trace (a task enqueued on commit carries its
    request's context), the new span is its child. Otherwise (a beat sweep, a command, an
    operator's task) the new span's parent is the stored context and it links to the running
    span, so the trace of the payment holds the work and the sweep's trace points to it. An
    empty or invalid ``traceparent`` (tracing was off when the payment was made): a plain
    child of the running span."""
    stored = _stored_context(traceparent)
    running = trace.get_current_span().get_span_context()
    if stored is None or (running.is_valid and running.trace_id == stored.trace_id):
        with tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span
        return
    links = [trace.Link(running)] if running.is_valid else None
    parent = trace.set_span_in_context(trace.NonRecordingSpan(stored))
    with tracer.start_as_current_span(
        name, context=parent, links=links, attributes=attributes
    ) as span:
        yield span


def add_trace_ids(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: the running span's ``trace_id`` (32 hex) and ``span_id`` (16 hex)
    into the line, when a trace is being recorded; nothing otherwise (tracing off)."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event_dict.setdefault("trace_id", f"{context.trace_id:032x}")
        event_dict.setdefault("span_id", f"{context.span_id:016x}")
    return event_dict
