"""``GET /readyz``: whether this process can serve payments (the database answers).

``/healthz`` (payments.api.views) says the process is up; ``/readyz`` says what serving payments
needs is reachable, for load balancers and docker-compose healthchecks. Only the database
decides: not ready answers ``503`` ``application/problem+json`` (code ``not_ready``) naming the
failed checks. The broker is checked and reported, in the body (``"status": "degraded"``,
``"broker": "unavailable"``) and in ``payments_dependency_up{dependency="broker"}``, but it
never takes the web tier out of rotation: a payment needs no broker (tasks are enqueued after
commit, ``robust``, and the reconciliation sweep finds whatever a lost enqueue left), and
pulling every instance because Redis blinked would turn a broker outage into a payments
outage. The acquirer is not checked either: a down acquirer is handled by the payment flow
(503 with ``Retry-After``, reconciliation). No answer reveals a host name, a URL or an error
message.
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
from prometheus_client import Gauge

from payments.core.problem_format import PROBLEM_CONTENT_TYPE, problem_body

logger = logging.getLogger(__name__)

#: Seconds each check may take (a healthcheck must answer well within its own timeout).
CHECK_TIMEOUT_SECONDS = 2.0
#: The broker's: shorter, so a blackholed broker never makes the probe itself time out.
BROKER_CHECK_TIMEOUT_SECONDS = 1.0

DEPENDENCY_UP = Gauge(
    "payments_dependency_up",
    "1 when the last /readyz check of this dependency passed, 0 when it failed.",
    ["dependency"],
    multiprocess_mode="mostrecent",
)


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
        connect_timeout=BROKER_CHECK_TIMEOUT_SECONDS,
        transport_options={
            **options,
            "socket_connect_timeout": BROKER_CHECK_TIMEOUT_SECONDS,
            "socket_timeout": BROKER_CHECK_TIMEOUT_SECONDS,
        },
    ) as broker:
        broker.ensure_connection(
            max_retries=1, interval_start=0, timeout=BROKER_CHECK_TIMEOUT_SECONDS
        )


#: Check name -> function that raises when the dependency is not reachable.
CHECKS: dict[str, Callable[[], None]] = {"database": database_ready, "broker": broker_ready}
#: The checks that decide readiness; the others are reported only.
REQUIRED_CHECKS = frozenset({"database"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """200 ``{"status": "ready" | "degraded", "checks": {...}}`` while the database answers
    (``degraded``: a reported-only check, the broker, failed); 503 problem ``not_ready``
    when a required check failed. Each result also sets ``payments_dependency_up``."""
    results: dict[str, str] = {}
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - a probe: any failure of a check means "not ready"
            logger.warning("readiness check %s failed: %s", name, type(exc).__name__)
            results[name] = "unavailable"
        DEPENDENCY_UP.labels(dependency=name).set(1 if results[name] == "ok" else 0)
    failed = sorted(name for name, value in results.items() if value != "ok")
    if not REQUIRED_CHECKS & set(failed):
        return HttpResponse(
            json.dumps({"status": "degraded" if failed else "ready", "checks": results}),
            content_type="application/json",
        )
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
