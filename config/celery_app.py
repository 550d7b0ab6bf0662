"""The Celery application.

Settings come from Django settings under the ``CELERY_`` namespace (see
``config/settings/base.py``); without ``DJANGO_SETTINGS_MODULE``, the production ones. Tasks are
discovered in the installed apps. The worker and beat run the system checks at start and exit
on an Error (a missing production variable among them, config/checks.py): Celery's own Django
fixup runs them but ignores the result.
"""

import os
import sys

from celery import Celery
from celery.signals import beat_init, worker_init, worker_ready, worker_shutdown

from heartbeats.celery import HeartbeatStep, forget_worker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

app = Celery("payment_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Each worker's heartbeat while its consumer runs; beat's comes from CELERY_BEAT_SCHEDULER.
app.steps["consumer"].add(HeartbeatStep)
worker_shutdown.connect(forget_worker)


@worker_init.connect
def _worker_refuses_to_start_on_errors(**kwargs) -> None:
    """Exit the worker before it consumes anything when a system check fails."""
    _refuse_to_start_on_errors("worker")


@beat_init.connect
def _beat_refuses_to_start_on_errors(**kwargs) -> None:
    """Exit beat before it schedules anything when a system check fails."""
    _refuse_to_start_on_errors("beat")


def _refuse_to_start_on_errors(process: str) -> None:
    # Not at the top: this module is imported with the settings (config/__init__.py), before
    # Django's app registry is ready, and the checks read the settings. No cycle.
    import django
    from django.core.exceptions import ImproperlyConfigured

    django.setup()
    from config.checks import refuse_to_start_on_errors

    try:
        refuse_to_start_on_errors(process)
    except ImproperlyConfigured as refused:
        # To the process's real stderr: beat has replaced sys.stderr with a logging proxy by
        # now. Then SystemExit, the one exception Celery's signals do not log and swallow.
        sys.__stderr__.write(f"{refused}\n")
        raise SystemExit(1) from None


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
