"""``GET /readyz``: whether this process can serve payments (the database and the broker answer).

``/healthz`` (payments.apis) says the process is up; ``/readyz`` says its dependencies are
reachable, for load balancers and docker-compose healthchecks. Not ready answers ``503``
``application/problem+json`` (code ``not_ready``) naming the failed checks; neither answer
reveals a host name, a URL or an error message. The acquirer is deliberately not checked: a
down acquirer is handled by the payment flow (503 with ``Retry-After``, reconciliation), and
taking every instance out of rotation because of it would make the outage worse.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

from payments.problems import PROBLEM_CONTENT_TYPE, problem_body

logger = logging.getLogger(__name__)

#: Seconds each check may take (a healthcheck must answer well within its own timeout).
CHECK_TIMEOUT_SECONDS = 2.0


def database_ready() -> None:
    """Raise unless PostgreSQL answers ``SELECT 1`` on the default connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def broker_ready() -> None:
    """Raise unless the Celery broker (``CELERY_BROKER_URL``) accepts a connection."""
    options = dict(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {})
    with Connection(
        settings.CELERY_BROKER_URL,
        connect_timeout=CHECK_TIMEOUT_SECONDS,
        transport_options={
            **options,
            "socket_connect_timeout": CHECK_TIMEOUT_SECONDS,
            "socket_timeout": CHECK_TIMEOUT_SECONDS,
        },
    ) as broker:
        broker.ensure_connection(max_retries=1, interval_start=0, timeout=CHECK_TIMEOUT_SECONDS)


#: Check name -> function that raises when the dependency is not reachable.
CHECKS: dict[str, Callable[[], None]] = {"database": database_ready, "broker": broker_ready}


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """200 ``{"status": "ready", "checks": {...}}`` or 503 problem ``not_ready``."""
    results: dict[str, str] = {}
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - a probe: any failure of a check means "not ready"
            logger.warning("readiness check %s failed: %s", name, type(exc).__name__)
            results[name] = "unavailable"
    if all(value == "ok" for value in results.values()):
        return HttpResponse(
            json.dumps({"status": "ready", "checks": results}),
            content_type="application/json",
        )
    failed = sorted(name for name, value in results.items() if value != "ok")
    document = json.loads(
        problem_body(
            status_code=503,
            code="not_ready",
            title="The service is not ready",
            detail="Unreachable: " + ", ".join(failed) + ".",
        )
    )
    document["checks"] = results
    return HttpResponse(json.dumps(document), status=503, content_type=PROBLEM_CONTENT_TYPE)
