"""WSGI entry point, served by gunicorn (see Procfile).

Defaults to the production settings: a process started without ``DJANGO_SETTINGS_MODULE``
fails closed (``make run`` and the tests choose theirs). A system check at Error level (a
missing production variable among them, config/checks.py) makes every worker exit at boot, and
gunicorn with it, before anything is served.

Tracing (ADR 0044) is set up here, once per worker: gunicorn imports this module in each
worker after the fork (no ``preload_app``), so the batch exporter's thread and the
instrumentations belong to the worker, and Django's instrumentation puts its middleware
in ``MIDDLEWARE`` before the application loads it. Off unless an exporter is configured.
Django itself is already set up by then: the master did it before the fork (ADR 0052).
"""

import os

from django.core.wsgi import get_wsgi_application

from observability.tracing import tracing_setup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
tracing_setup("payments-web")

application = get_wsgi_application()

from config.checks import refuse_to_start_on_errors  # noqa: E402  (needs the app registry)

refuse_to_start_on_errors("web")
