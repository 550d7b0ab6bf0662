"""Tracing set up as a process's entry point does it (manage.py, config/wsgi.py and
config/celery_app.py call ``tracing_setup`` before Django loads the application): the SDK's
tracing not even imported without an exporter (redis-py imports the SDK's metrics on its
own), the SDK, the redacting batch exporter and Django's instrumentation (first in
``MIDDLEWARE``) with one (ADR 0044). Each in a fresh Python, both at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from observability.tracing import tracing_setup
on = tracing_setup("payments-probe")
from django.conf import settings
from opentelemetry import trace
provider = trace.get_tracer_provider()
processors = getattr(getattr(provider, "_active_span_processor", None), "_span_processors", ())
exporters = [type(p.span_exporter.inner).__name__ for p in processors]
print(on, type(provider).__name__, "opentelemetry.sdk.trace" in sys.modules,
      settings.MIDDLEWARE[0].rsplit(".", 1)[-1], exporters)
"""


def _start(**otel: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ |= {"DJANGO_SETTINGS_MODULE": "config.settings.test", **otel}
    return subprocess.Popen(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=environ, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _output(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-2000:]
    return out.strip().splitlines()[-1]


def test_a_process_sets_tracing_up_only_when_an_exporter_is_configured():
    off = _start()
    on = _start(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_BSP_SCHEDULE_DELAY="60000")
    assert _output(off) == "False ProxyTracerProvider False RequestContextMiddleware []"
    assert _output(on) == "True TracerProvider True _DjangoMiddleware ['OTLPSpanExporter']"
