"""Tracing set up as a process's entry point does it (manage.py, config/wsgi.py and
config/celery_app.py call ``tracing_setup`` before Django loads the application): the SDK's
tracing not even imported without an exporter (redis-py imports the SDK's metrics on its
own), the SDK, the redacting batch exporter and Django's instrumentation (first in
``MIDDLEWARE``) with one (ADR 0044), also when Django was set up first, as in a gunicorn
worker since ADR 0052. Each in a fresh Python."""

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


#: gunicorn's order since ADR 0052: Django set up in the master, tracing in the worker after the
#: fork, then the application; the instrumentations still reach the modules already imported.
PRELOADED = """
import django
django.setup()
import httpx, psycopg, redis
from observability.tracing import tracing_setup
on = tracing_setup("payments-web")
from django.core.wsgi import get_wsgi_application
get_wsgi_application()
from django.conf import settings
wrapped = [hasattr(f, "__wrapped__") for f in (httpx.HTTPTransport.handle_request,
           psycopg.Connection.connect, redis.Redis.execute_command)]
print(on, settings.MIDDLEWARE[0].rsplit(".", 1)[-1], wrapped)
"""


def _start(probe: str = PROBE, **otel: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ |= {"DJANGO_SETTINGS_MODULE": "config.settings.test", **otel}
    return subprocess.Popen(
        [sys.executable, "-c", probe], cwd=ROOT, env=environ, text=True,
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


def test_tracing_set_up_after_django_is_whole_as_in_a_gunicorn_worker():
    """ADR 0052: gunicorn's master sets Django up before the fork and each worker sets tracing
    up after it, before the application loads: Django's middleware still comes first, and the
    httpx, psycopg and Redis instrumentations wrap what the master had already imported."""
    on = _start(PRELOADED, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
                OTEL_BSP_SCHEDULE_DELAY="60000")  # fmt: skip
    assert _output(on) == "True _DjangoMiddleware [True, True, True]"
