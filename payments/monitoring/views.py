"""``GET /metrics`` (:func:`metrics_view`) and the Celery worker's exposition
(:func:`worker_metrics_server_start`): the registries that put the project's metrics together.

* In-process counters: :mod:`payments.monitoring.metrics` (payments) and
  :mod:`payments.acquirer.metrics`
  (the gateway client), in the default registry, or every process's files when
  ``PROMETHEUS_MULTIPROC_DIR`` is set.
* Scrape-time gauges: :class:`payments.monitoring.metrics.PaymentsCollector` (PostgreSQL),
  :class:`payments.acquirer.collectors.ResilienceCollector` (the acquirer client's shared state),
  :class:`heartbeats.metrics.HeartbeatCollector` (the Celery processes' heartbeats) and
  :class:`webhooks.metrics.WebhooksCollector` (the webhook backlog), in a registry of their
  own, served by the web only.

django-prometheus adds the request, response and latency metrics (``django_http_*``).

Processes: counters live in the process that increments them. With several gunicorn workers,
set ``PROMETHEUS_MULTIPROC_DIR`` (an empty directory per deployment) so that ``/metrics``
aggregates all workers; the Celery worker, which counts reconciliations, serves its own
exposition with :func:`worker_metrics_server_start`.
"""

from __future__ import annotations

import hmac
import logging
import os
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    multiprocess,
    start_http_server,
)

from heartbeats.metrics import HeartbeatCollector
from payments.acquirer.collectors import ResilienceCollector
from payments.monitoring.metrics import PaymentsCollector
from webhooks.metrics import WebhooksCollector

__all__ = ["metrics_view", "scrape_collector_register", "worker_metrics_server_start"]

logger = logging.getLogger(__name__)

_PAYMENTS_COLLECTOR = PaymentsCollector()
_RESILIENCE_COLLECTOR = ResilienceCollector()
_HEARTBEAT_COLLECTOR = HeartbeatCollector()
_WEBHOOKS_COLLECTOR = WebhooksCollector()


def _scrape_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_PAYMENTS_COLLECTOR)
    registry.register(_RESILIENCE_COLLECTOR)
    registry.register(_HEARTBEAT_COLLECTOR)
    registry.register(_WEBHOOKS_COLLECTOR)
    return registry


_DATABASE_REGISTRY = _scrape_registry()
_REGISTERED: list = []


def scrape_collector_register(collector) -> None:
    """Add a scrape-time collector (``describe()`` and ``collect()``, as prometheus_client's
    custom collectors) to the web's ``/metrics``: how an app this one may not import (the
    ledger audit, from its ``AppConfig.ready``) serves its gauges. Registering twice is a
    no-op."""
    if collector not in _REGISTERED:
        _DATABASE_REGISTRY.register(collector)
        _REGISTERED.append(collector)


def _process_registry() -> CollectorRegistry:
    """The in-process metrics: the default registry, or every process's files (multiprocess)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: Prometheus text format, in-process metrics then the scrape-time gauges
    (database, acquirer resilience state).

    When ``settings.METRICS_BEARER_TOKEN`` is set, and always under the production settings
    (``REQUIRE_PRODUCTION_SETTINGS``: an empty token then admits nobody), the scrape must send
    ``Authorization: Bearer <token>`` (RFC 6750; the scheme is case-insensitive, the token
    compared in constant time), else ``401`` with ``WWW-Authenticate: Bearer``. Keep
    ``/metrics`` off the public network either way: it tells how many payments are stuck.
    """
    token = getattr(settings, "METRICS_BEARER_TOKEN", "")
    if (token or getattr(settings, "REQUIRE_PRODUCTION_SETTINGS", False)) and not (
        token and _bearer_token_matches(request.headers.get("authorization", ""), token)
    ):
        return HttpResponse(status=401, headers={"WWW-Authenticate": "Bearer"})
    started = time.monotonic()
    body = generate_latest(_process_registry()) + generate_latest(_DATABASE_REGISTRY)
    logger.debug("metrics rendered in %.3f s", time.monotonic() - started)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def _bearer_token_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` value is ``Bearer <token>`` (scheme in any case)."""
    scheme, _, sent = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(sent.encode(), token.encode())


def worker_metrics_server_start(port: int, addr: str = "127.0.0.1") -> None:
    """Serve this process's counters (the Celery worker's) on ``http://addr:port/metrics``.

    With ``PROMETHEUS_MULTIPROC_DIR`` set, serves every process sharing that directory (the
    worker's pool children). Without the database gauges: the web's ``/metrics`` has those.
    """
    start_http_server(port, addr=addr, registry=_process_registry())
