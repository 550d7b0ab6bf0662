"""The Celery application.

Settings come from Django settings under the ``CELERY_`` namespace (see
``config/settings/base.py``); without ``DJANGO_SETTINGS_MODULE``, the production ones. Tasks are
discovered in the installed apps. The worker and beat run the system checks at start and exit
on an Error (a missing production variable among them, config/checks.py): Celery's own Django
fixup runs them but ignores the result.

Logging (ADR 0016): the worker and beat apply Django's ``LOGGING`` (observability/log_config.py: the
same structured, redacted lines as the web tier) instead of Celery's own handlers, at the
``--loglevel`` given. A task published while a request (or another task) runs carries its
request id in the message header ``request_id``; the task runs with it bound, so its log lines,
its acquirer calls and the payment events it writes carry it too.

Tracing (ADR 0044), off unless an exporter is configured: set up in each pool process after
the fork (``worker_process_init``; in the worker itself for a pool without processes) and in
beat; a pool process exports what it still holds before it exits. Celery's instrumentation
carries the trace context in each message's headers beside the request id.
"""

import errno
import logging.config
import os
import sys
from pathlib import Path

import structlog
from celery import Celery
from celery.signals import (
    beat_init,
    before_task_publish,
    celeryd_init,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from kombu.asynchronous import hub as kombu_hub
from kombu.transport import redis as kombu_redis
from kombu.utils.compat import fileno as _kombu_fileno

from heartbeats.celery import HeartbeatStep, forget_worker
from observability.metrics_dir import metrics_dir_prepare, metrics_dir_remove
from observability.request_context import bind_request_id, current_request_id
from observability.tracing import tracing_flush, tracing_setup

#: The message header carrying the request id into a task.
REQUEST_ID_TASK_HEADER = "request_id"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")

# kombu 5.6's Redis transport can die on a broker restart: a stale file descriptor raises
# KeyError out of the event loop, which is not among its connection errors, so the worker
# exits ("Unrecoverable error: KeyError(14)") instead of reconnecting (kombu issue #2582).
# Upstream's fix (kombu #2592, merged) adds KeyError to those errors; celery 5.6 needs kombu
# < 5.7 and celery 5.7 has the restore bug of docs/operations.md, so the same one-line fix is
# applied here until both can be upgraded (tests/e2e/test_broker_restart.py proves it).
kombu_redis.Transport.connection_errors = (*kombu_redis.Transport.connection_errors, KeyError)

# A second hang on a broker restart: closing a channel whose BRPOP is in flight reads that
# BRPOP's answer first (kombu #1733, so a popped message is not lost). When the connection was
# re-established meanwhile, the BRPOP was never sent on the new socket and its answer never
# comes: the worker waits there for ever, alive and consuming nothing (caught by
# tests/e2e/test_broker_restart.py, about 1 run in 5). On a live connection the answer comes
# within the BRPOP's own timeout; so wait that long plus a second for it to be readable, and
# otherwise close without reading.
_channel_close = kombu_redis.Channel.close


def _channel_close_without_waiting_for_ever(self: kombu_redis.Channel) -> None:
    in_poll = self._in_poll
    if in_poll:
        try:
            readable = in_poll.can_read(timeout=self.brpop_timeout + 1)
        except (*kombu_redis.Transport.connection_errors, OSError):
            readable = False  # the connection is gone: there is nothing to read
        if not readable:
            self._in_poll = False
    _channel_close(self)


kombu_redis.Channel.close = _channel_close_without_waiting_for_ever

# A third exit on a broker restart (celery issue #9250): a lost connection cancels the tasks
# running then (worker_cancel_long_running_tasks_on_connection_loss), which ends their pool
# processes; on reconnecting, the pool registers its processes' pipes with the event loop again,
# a finished one's pipe is None, and kombu's fileno(None) raises AttributeError, which celery's
# iterate_file_descriptors_safely does not catch: "Unrecoverable error: AttributeError("'NoneType'
# object has no attribute 'fileno'")", and the worker exits (tests/e2e/test_broker_restart.py,
# 3 of 8 runs on a loaded machine). Upstream's fix (kombu #2623, merged, after 5.6.2) makes
# fileno(None) an error that function handles; 5.6.3's catches OSError, so a pipe that is gone
# is EBADF here, and its process is dropped from the loop instead of the worker.


def _fileno_of_an_open_pipe(f: object) -> int:
    if f is None:
        raise OSError(errno.EBADF, "the pool process's pipe is closed")
    return int(_kombu_fileno(f))


kombu_hub.fileno = _fileno_of_an_open_pipe


def _worker_command(argv: list[str]) -> bool:
    """True for ``celery ... worker ...`` (or ``python -m celery ... worker``)."""
    program = Path(argv[0]) if argv else Path()
    is_celery = program.name == "celery" or program.parent.name == "celery"
    return is_celery and "worker" in argv[1:]


def _worker_pool(argv: list[str]) -> str:
    """The pool a worker command names (``--pool X``, ``--pool=X``, ``-P X``); else prefork."""
    for index, word in enumerate(argv):
        if word.startswith("--pool="):
            return word.split("=", 1)[1]
        if word in ("--pool", "-P") and index + 1 < len(argv):
            return argv[index + 1]
    return "prefork"


# A Celery worker: before Django and prometheus_client load (here, as `-A config` imports this
# module), its pool processes get one metrics directory, emptied, so the worker's exposition
# adds them all up (observability/metrics_dir.py). The web does the same in config/gunicorn.conf.py.
# A worker whose tasks run in threads of this one process (the webhooks worker, ADR 0050) takes
# its database connections from a pool, as the web does (ADR 0048), unless the environment
# says otherwise: no fork follows, and its threads would otherwise each keep a connection.
if _worker_command(sys.argv):
    metrics_dir_prepare("worker")
    if _worker_pool(sys.argv) == "threads":
        os.environ.setdefault("DATABASE_POOL", "true")

app = Celery("payment_service")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Each worker's heartbeat while its consumer runs; beat's comes from CELERY_BEAT_SCHEDULER.
app.steps["consumer"].add(HeartbeatStep)
worker_shutdown.connect(forget_worker)


@worker_init.connect
def _worker_refuses_to_start_on_errors(sender=None, **kwargs) -> None:
    """Exit the worker before it consumes anything when a system check fails; set tracing up
    here when the pool runs tasks in this process (solo, threads), else in each pool process
    (``worker_process_init``)."""
    _refuse_to_start_on_errors("worker")
    if "prefork" not in str(getattr(sender, "pool_cls", "prefork")):
        tracing_setup("payments-worker")


@celeryd_init.connect
def _consume_the_worker_queues(instance=None, **kwargs) -> None:
    """Consume the queues ``WORKER_QUEUES`` names (ADR 0050: ``tasks`` for the prefork worker,
    ``webhooks`` for the threads worker, ``all`` by default), selected before the worker sets
    its queues up; an explicit ``-Q`` still wins."""
    from django.conf import settings

    names = settings.WORKER_QUEUE_SETS[settings.WORKER_QUEUES]
    if names and instance is not None:
        instance.app.amqp.queues.select(names)


@worker_process_init.connect
def _tracing_in_pool_process(**kwargs) -> None:
    """A prefork pool process starts: its own tracing (exporter thread, instrumentations)."""
    tracing_setup("payments-worker")


@beat_init.connect
def _beat_refuses_to_start_on_errors(**kwargs) -> None:
    """Exit beat before it schedules anything when a system check fails; set tracing up."""
    _refuse_to_start_on_errors("beat")
    tracing_setup("payments-beat")


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


@worker_process_shutdown.connect
def _forget_pool_process(pid=None, **kwargs) -> None:
    """A pool process ends: forget its live gauges (its counters stay in the directory)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


@worker_process_shutdown.connect
def _flush_spans(**kwargs) -> None:
    """A pool process ends: export the spans it still buffers (its exit skips ``atexit``)."""
    tracing_flush()


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
        # Django's app registry is ready, and payments.monitoring.views imports models. No cycle.
        from payments.monitoring.views import worker_metrics_server_start

        worker_metrics_server_start(
            int(port), addr=os.environ.get("CELERY_METRICS_ADDR", "127.0.0.1")
        )


@setup_logging.connect
def _logging_from_settings(loglevel=None, **kwargs) -> None:
    """Worker and beat: Django's ``LOGGING`` (connecting this signal stops Celery from
    installing its own root handler), the root at ``--loglevel``."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
        logging.getLogger("celery").setLevel(loglevel)


@before_task_publish.connect
def _publish_request_id(headers=None, **kwargs) -> None:
    """Put the running request's (or task's) id in the message's headers."""
    request_id = current_request_id()
    if request_id is not None and headers is not None:
        headers.setdefault(REQUEST_ID_TASK_HEADER, request_id)


@task_prerun.connect
def _bind_task_context(task_id=None, task=None, **kwargs) -> None:
    """Bind the request id the message carries (a valid one; else a new one) with the task's
    id and name, for every log line, acquirer call and event of the task."""
    carried = task.request.get(REQUEST_ID_TASK_HEADER) if task is not None else None
    bind_request_id(
        carried if isinstance(carried, str) else None,
        task_id=task_id,
        task_name=getattr(task, "name", None),
    )


@task_postrun.connect
def _clear_task_context(**kwargs) -> None:
    structlog.contextvars.clear_contextvars()
