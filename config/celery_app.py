"""The Celery application.

Settings come from Django settings under the ``CELERY_`` namespace (see
``config/settings/base.py``). Tasks are discovered in the installed apps.
"""

import os
import sys
from pathlib import Path

from celery import Celery
from celery.signals import worker_process_shutdown, worker_ready, worker_shutdown

from config.metrics_dir import metrics_dir_prepare, metrics_dir_remove

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")


def _worker_command(argv: list[str]) -> bool:
    """True for ``celery ... worker ...`` (or ``python -m celery ... worker``)."""
    program = Path(argv[0]) if argv else Path()
    is_celery = program.name == "celery" or program.parent.name == "celery"
    return is_celery and "worker" in argv[1:]


# A Celery worker: before Django and prometheus_client load (here, as `-A config` imports this
# module), its pool processes get one metrics directory, emptied, so the worker's exposition
# adds them all up (config/metrics_dir.py). The web does the same in config/gunicorn.conf.py.
if _worker_command(sys.argv):
    metrics_dir_prepare("worker")

app = Celery("payment_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _forget_pool_process(pid=None, **kwargs) -> None:
    """A pool process ends: forget its live gauges (its counters stay in the directory)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


@worker_shutdown.connect
def _remove_metrics_dir(**kwargs) -> None:
    """The worker stops: remove the metrics directory if this process made it."""
    metrics_dir_remove()


@worker_ready.connect
def _serve_worker_metrics(**kwargs) -> None:
    """With CELERY_METRICS_PORT set, serve the worker's counters (reconciliation outcomes,
    acquirer attempts) at http://CELERY_METRICS_ADDR:CELERY_METRICS_PORT/metrics, every pool
    process's (the multiprocess directory above)."""
    port = os.environ.get("CELERY_METRICS_PORT")
    if port:
        # Not at the top: this module is imported with the settings (config/__init__.py), before
        # Django's app registry is ready, and payments.metrics_views imports models. No cycle.
        from payments.metrics_views import worker_metrics_server_start

        worker_metrics_server_start(
            int(port), addr=os.environ.get("CELERY_METRICS_ADDR", "127.0.0.1")
        )
