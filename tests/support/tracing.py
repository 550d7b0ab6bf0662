"""Tracing for the tests: the process's set-up (observability/tracing.py) with the SDK's
in-memory exporter, on while a ``with traced()`` block runs.

The SDK's tracer provider can be installed once per process, so the first block installs it
(behind the same redacting exporter as production) and every block instruments the libraries
on entry and removes the instrumentation on exit (Django's middleware leaves ``MIDDLEWARE``),
with the sampler switched off between blocks and the span ids then all zero (invalid): the
rest of a pytest worker's tests run as if tracing were off (no ``trace_id`` in their log lines,
no ``trace_context`` stored). ``trace_of(spans, span)`` and ``by_name`` read what was exported.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Sampler,
    SamplingResult,
)

from observability.tracing import tracing_setup

__all__ = ["by_name", "traced"]


class _Switch(Sampler):
    """Every span sampled while ``on``, none otherwise (no parent's flag consulted)."""

    on = False

    def should_sample(self, parent_context: Context | None, *args, **kwargs) -> SamplingResult:
        chosen = ALWAYS_ON if self.on else ALWAYS_OFF
        return chosen.should_sample(parent_context, *args, **kwargs)

    def get_description(self) -> str:
        return f"Switch(on={self.on})"


class _Ids(IdGenerator):
    """Random ids while ``on``; zeros (an invalid context: nothing current) otherwise."""

    on = False
    _random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self._random.generate_span_id() if self.on else 0

    def generate_trace_id(self) -> int:
        return self._random.generate_trace_id() if self.on else 0


_EXPORTER = InMemorySpanExporter()
_SWITCH = _Switch()
_IDS = _Ids()
_INSTRUMENTORS = (
    DjangoInstrumentor,
    CeleryInstrumentor,
    HTTPXClientInstrumentor,
    PsycopgInstrumentor,
    RedisInstrumentor,
)


@contextmanager
def traced() -> Iterator[InMemorySpanExporter]:
    """Tracing on, every span sampled and exported (redacted) to the returned exporter."""
    if tracing_setup("payments-test", exporter=_EXPORTER, sampler=_SWITCH, instrument=False):
        # Before any tracer exists: the provider hands its id generator to each tracer it makes.
        trace.get_tracer_provider().id_generator = _IDS  # type: ignore[attr-defined]
    for instrumentor in _INSTRUMENTORS:
        instrumentor().instrument()
    _SWITCH.on = _IDS.on = True
    _EXPORTER.clear()
    try:
        yield _EXPORTER
    finally:
        _SWITCH.on = _IDS.on = False
        for instrumentor in _INSTRUMENTORS:
            instrumentor().uninstrument()
        _EXPORTER.clear()


def by_name(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The spans called ``name``, in the order they ended."""
    return [span for span in spans if span.name == name]
