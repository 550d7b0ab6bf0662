"""
The spans of a call to the acquirer: one per call and one per attempt (ADR 0044).

OpenTelemetry's API only, which is a no-op until the process installs an SDK (the payment
service does when an exporter is configured; observability/tracing.py): the client stays
framework-free, and without tracing each span is a shared non-recording object. The call's
span (`acquirer <operation>`) holds an attempt's span per request sent (or per stop before
sending), and each attempt's span holds the HTTP client span httpx's instrumentation makes.

An attempt's span says what its log line says (`_attempt_log.py`), from the same
`AttemptRecord`: attributes named by OpenTelemetry's semantic conventions where one exists
(`http.response.status_code`, `error.type`, `http.request.resend_count`), ours under
`payments.` otherwise. Never the API key, a header, the card token or a body.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from .types import AttemptRecord

__all__ = ["attempt_span_end", "attempt_span_start", "call_span"]

_tracer = trace.get_tracer("gateway_client")


@contextmanager
def call_span(
    operation: str, acquirer: str, reference: str, request_id: str | None
) -> Iterator[trace.Span]:
    """The span of one call (`acquirer authorize`, `acquirer lookup`, ...), current inside
    the block; an error leaving the block is recorded on it."""
    attributes: dict[str, AttributeValue] = {
        "payments.acquirer.name": acquirer,
        "payments.acquirer.operation": operation,
        "payments.acquirer.reference": reference,
    }
    if request_id is not None:
        attributes["payments.request_id"] = request_id
    with _tracer.start_as_current_span(f"acquirer {operation}", attributes=attributes) as span:
        yield span


def attempt_span_start(operation: str) -> trace.Span:
    """A new attempt's span, started (not current: the loop makes it current around the
    admission and the exchange, and `attempt_span_end` ends it once the decision is made)."""
    return _tracer.start_span(f"acquirer {operation} attempt")


def attempt_span_end(span: trace.Span | None, acquirer: str, record: AttemptRecord) -> None:
    """Put `record` (the attempt's log line) on `span` and end it; nothing for None."""
    if span is None:
        return
    if span.is_recording():
        span.set_attributes(_attributes(acquirer, record))
        if record.error is not None and record.decision == "raise":
            span.set_status(trace.StatusCode.ERROR, record.stop_reason or record.error)
    span.end()


def _attributes(acquirer: str, record: AttemptRecord) -> dict[str, AttributeValue]:
    found: dict[str, AttributeValue | None] = {
        "payments.acquirer.name": acquirer,
        "payments.attempt.number": record.attempt,
        "payments.attempt.sent": record.sent,
        "payments.attempt.outcome": record.outcome,
        "payments.attempt.decision": record.decision,
        "payments.attempt.stop_reason": record.stop_reason,
        "payments.attempt.wait_seconds": record.wait,
        "payments.attempt.wait_source": record.wait_source,
        "payments.attempt.server_wait_seconds": record.server_wait,
        "payments.retry_budget.retries_available": record.budget_retries,
        "payments.rate_gate.remaining_seconds": record.gate_remaining,
        "payments.rate_gate.waited_seconds": record.gate_waited,
        "payments.breaker.state": record.breaker_state,
        "payments.acquirer.request_id": record.provider_request_id,
        "http.response.status_code": record.status_code,
        "error.type": record.error,
        "http.request.resend_count": record.attempt - 1 if record.attempt > 1 else None,
    }
    return {name: value for name, value in found.items() if value is not None}
