"""OpenTelemetry tracing, set up once per process, off unless an exporter is configured
(ADR 0044).

:func:`tracing_setup` is called by each process's entry point (config/wsgi.py in every
gunicorn worker after the fork, config/celery_app.py in every Celery pool process and in
beat, manage.py for management commands). It does nothing, not even import the SDK, unless
the environment names an exporter (:func:`tracing_configured`): ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (OTLP over HTTP/protobuf), or
``OTEL_TRACES_EXPORTER=console``; ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``
keep it off. Then it installs the SDK's tracer provider (the sampler, the batch processor's
limits, the resource and the exporter read the standard ``OTEL_*`` variables:
docs/configuration.md), and the OpenTelemetry project's instrumentations of Django, Celery,
httpx, psycopg and redis.

Two choices of ours:

* Every exporter is wrapped in :class:`RedactingSpanExporter`: the log redaction
  (observability/log_filters.py) over every span's name, attributes, events (an exception's
  message and stack trace) and status text, before anything leaves the process. The
  instrumentations record URLs with their query strings, SQL and Redis commands: none should
  hold a secret, and this is the net under that, as the formatter is for log lines.
* The propagator is W3C Trace Context alone (:class:`TraceparentOnlyPropagator`): a client's
  ``traceparent`` is continued, but its ``tracestate`` and ``baggage`` (free text a merchant
  chooses) are dropped, so they never reach the acquirer or another merchant's webhook.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import CarrierT, Getter, default_getter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from observability.log_filters import redact

__all__ = [
    "RedactingSpanExporter",
    "TraceparentOnlyPropagator",
    "tracing_configured",
    "tracing_flush",
    "tracing_setup",
]

#: Variables naming an OTLP endpoint: tracing is on when one is set.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: ``OTEL_TRACES_EXPORTER`` values understood here (the SDK's names).
EXPORTERS = ("otlp", "console", "none")

_lock = threading.Lock()
_provider: Any = None  # the process's SDK TracerProvider, once set up
_provider_pid: int | None = None


def tracing_configured(environ: Mapping[str, str]) -> bool:
    """True when ``environ`` asks for traces: an OTLP endpoint variable set, or
    ``OTEL_TRACES_EXPORTER=console``; False when ``OTEL_SDK_DISABLED`` is ``true`` or
    ``OTEL_TRACES_EXPORTER`` is ``none``. Raises ``ValueError`` for an exporter name other
    than those of :data:`EXPORTERS` (a typo must not silently turn tracing off)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    chosen = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if chosen and chosen not in EXPORTERS:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER must be one of {', '.join(EXPORTERS)}, not {chosen!r}"
        )
    if chosen == "none":
        return False
    return chosen == "console" or any(environ.get(name) for name in ENDPOINT_VARIABLES)


class TraceparentOnlyPropagator(TraceContextTextMapPropagator):
    """W3C Trace Context, continuing a valid incoming ``traceparent`` (an invalid one is
    ignored: a new trace starts) without its ``tracestate``. Outgoing requests (the acquirer,
    webhooks, Celery messages) carry our ``traceparent`` only."""

    def extract(
        self,
        carrier: CarrierT,
        context: Context | None = None,
        getter: Getter[CarrierT] = default_getter,
    ) -> Context:
        """The context with the carrier's parent span context, its trace state emptied."""
        extracted = super().extract(carrier, context, getter)
        found = trace.get_current_span(extracted).get_span_context()
        if not found.is_valid or not found.trace_state:
            return extracted
        bare = trace.SpanContext(
            found.trace_id, found.span_id, is_remote=True, trace_flags=found.trace_flags
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(bare), context)


def _redacted_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return type(value)(redact(item) if isinstance(item, str) else item for item in value)
    return value


def _redacted_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {name: _redacted_value(value) for name, value in (attributes or {}).items()}


class RedactingSpanExporter:
    """A ``SpanExporter`` that hands ``inner`` copies of the spans with every string (the
    name, attribute values, event names and attributes, link attributes, the status
    description) passed through :func:`observability.log_filters.redact`. Runs in the batch
    processor's thread, for sampled spans only: the request path does not pay for it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def export(self, spans: Sequence[Any]) -> Any:
        """Export the redacted copies; ``inner``'s result."""
        return self.inner.export([self._redacted(span) for span in spans])

    def shutdown(self) -> None:
        """Shut ``inner`` down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush ``inner``."""
        return bool(self.inner.force_flush(timeout_millis))

    @staticmethod
    def _redacted(span: Any) -> Any:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import Link, Status

        status = span.status
        if status.description:
            status = Status(status.status_code, redact(status.description))
        return ReadableSpan(
            name=redact(span.name),
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=_redacted_attributes(span.attributes),
            events=[
                Event(
                    redact(event.name),
                    _redacted_attributes(event.attributes),
                    timestamp=event.timestamp,
                )
                for event in span.events
            ],
            links=[
                Link(link.context, _redacted_attributes(link.attributes)) for link in span.links
            ],
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )


def _exporter(environ: Mapping[str, str]) -> Any:
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout: the OTEL_EXPORTER_OTLP_* variables


def tracing_setup(
    service_name: str,
    *,
    environ: Mapping[str, str] | None = None,
    exporter: Any = None,
    sampler: Any = None,
    instrument: bool = True,
) -> bool:
    """Set up tracing for this process, once; return True when it is on.

    ``service_name``: ``service.name`` unless ``OTEL_SERVICE_NAME`` names one (``payments-web``,
    ``payments-worker``, ``payments-beat``, ``payments-manage``). ``environ`` (default
    ``os.environ``) decides (:func:`tracing_configured`); a given ``exporter`` (tests, the
    benchmark) turns it on regardless and is flushed span by span (a ``SimpleSpanProcessor``),
    else the configured exporter behind a ``BatchSpanProcessor``; both behind
    :class:`RedactingSpanExporter`. ``sampler``: default the SDK's from ``OTEL_TRACES_SAMPLER``
    (``parentbased_always_on`` unless set). ``instrument``: also instrument Django, Celery,
    httpx, psycopg and redis. A second call in the same process returns what the first
    decided and changes nothing, and so does a call in a forked child of a set-up process."""
    global _provider, _provider_pid
    environ = os.environ if environ is None else environ
    with _lock:
        if _provider_pid == os.getpid():
            return _provider is not None
        if _provider is not None:
            # A forked child of a set-up process (a Celery pool process of a worker whose
            # pool runs in threads): the set-up is inherited, the batch processor's thread
            # restarted by the SDK after the fork.
            _provider_pid = os.getpid()
            return True
        if exporter is None and not tracing_configured(environ):
            _provider, _provider_pid = None, os.getpid()
            return False
        from opentelemetry import propagate
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        defaults = {} if environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
        provider = TracerProvider(resource=Resource.create(defaults), sampler=sampler)
        if exporter is None:
            processor: Any = BatchSpanProcessor(RedactingSpanExporter(_exporter(environ)))
        else:
            processor = SimpleSpanProcessor(RedactingSpanExporter(exporter))
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        propagate.set_global_textmap(TraceparentOnlyPropagator())
        if instrument:
            _instrument()
        _provider, _provider_pid = provider, os.getpid()
        return True


def _instrument() -> None:
    """The OpenTelemetry project's instrumentations: Django (a middleware put first in
    ``MIDDLEWARE``: call before the WSGI application loads), Celery (a message's context in
    its headers, a span per publish and per run), httpx (every client: the acquirer, the
    webhooks; ``traceparent`` sent), psycopg (a span per statement, parameters never
    recorded) and redis (a span per command and pipeline)."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    for instrumentor in (
        DjangoInstrumentor(),
        CeleryInstrumentor(),
        HTTPXClientInstrumentor(),
        PsycopgInstrumentor(),
        RedisInstrumentor(),
    ):
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()


def tracing_flush(timeout_millis: int = 5000) -> None:
    """Export the spans still buffered (a Celery pool process about to exit: its ``atexit``
    may not run). Does nothing when tracing is off."""
    if _provider is not None and _provider_pid == os.getpid():
        _provider.force_flush(timeout_millis)
