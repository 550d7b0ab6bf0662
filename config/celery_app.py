"""The Celery application.

Settings come from Django settings under the ``CELERY_`` namespace (see
``config/settings/base.py``). Tasks are discovered in the installed apps.
"""

import os

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

from heartbeats.celery import HeartbeatStep, forget_worker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("payment_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Each worker's heartbeat while its consumer runs; beat's comes from CELERY_BEAT_SCHEDULER.
app.steps["consumer"].add(HeartbeatStep)
worker_shutdown.connect(forget_worker)


@worker_ready.connect
def _serve_worker_metrics(**kwargs) -> None:
    """With CELERY_METRICS_PORT set, serve the worker's counters (reconciliation outcomes,
    acquirer attempts) at http://CELERY_METRICS_ADDR:CELERY_METRICS_PORT/metrics. Set
    PROMETHEUS_MULTIPROC_DIR too when the pool has several processes."""
    port = os.environ.get("CELERY_METRICS_PORT")
    if port:
        # Not at the top: this module is imported with the settings (config/__init__.py), before
        # Django's app registry is ready, and payments.metrics_views imports models. No cycle.
        from payments.metrics_views import worker_metrics_server_start

        worker_metrics_server_start(
            int(port), addr=os.environ.get("CELERY_METRICS_ADDR", "127.0.0.1")
        )
