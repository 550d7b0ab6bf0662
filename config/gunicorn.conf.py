"""gunicorn settings; the bind address comes from ``WEB_BIND`` (default 127.0.0.1:8000)."""

import gc
import os

from observability.log_config import environment_log_format, logging_config
from payments.api.server_errors import gunicorn_errors_as_problems

bind = os.environ.get("WEB_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# The concurrency model (ADR 0048, 0053): gthread, one thread per request in flight, in run
# slots: at most WEB_RUN_SLOTS of a worker's threads run at once, the others wait on the
# acquirer or in the queue ("gthread" alone lets every thread run; "gevent" is the alternative
# bench/latency.py measures, WEB_WORKER_CONNECTIONS greenlets per worker).
worker_class = os.environ.get("WEB_WORKER_CLASS", "config.gunicorn_worker.RunSlotThreadWorker")
# A thread waits on the acquirer most of its request, cheaply (ADR 0048, docs/scaling.md): 128
# per worker, 256 payments in flight on 2 workers, what 2 cores' throughput (about 250
# payments/s) needs at a 1 s acquirer (Little's law: payments/s x seconds in flight). Waiting
# threads cost no CPU under the run slots, whatever their number (ADR 0053).
threads = int(os.environ.get("WEB_THREADS", "128"))
worker_connections = int(os.environ.get("WEB_WORKER_CONNECTIONS", "1000"))

# Above the acquirer deadline (ACQUIRER_READ_TIMEOUT_SECONDS) so a slow acquirer answer is
# never cut off by the worker timeout in the middle of phase 2.
timeout = int(os.environ.get("WEB_TIMEOUT", "30"))
# On SIGTERM, requests in flight get this long to finish: a request's worst case (database
# waits and the acquirer deadline, ADR 0020: 21 s, plus an enqueue on a dead broker) fits, and
# a container's stop grace period must exceed it (docs/operations.md, "Stopping").
graceful_timeout = int(os.environ.get("WEB_GRACEFUL_TIMEOUT", "25"))
accesslog = "-"
# No preload_app: each worker imports config/wsgi.py after the fork, where tracing is set up
# (ADR 0044), so its exporter thread and instrumentations are the worker's own. The master
# loads Django's settings, apps and models before it forks (on_starting, django_preload: ADR
# 0052), so a worker starts from them.
# No control socket in the home directory: two copies on one machine would share it.
control_socket_disable = True
# gunicorn's own refusals (a malformed request line or header, before Django) answer
# problem+json like the rest of the API, never an HTML page echoing the request.
gunicorn_errors_as_problems()


def web_environment_defaults(environ):
    """What the web process's settings read unless the environment says otherwise: its database
    connections come from a pool per worker (config/database.py) and go back to it around
    every acquirer call (payments/acquirer/connection.py), so threads do not multiply
    connections (ADR 0048). DATABASE_POOL=false keeps one persistent connection per thread.
    The pool holds 4 connections per worker, not the 8 of other pooled processes: with an
    instant acquirer 8 let more transactions run at once than 2 cores serve and cost 13 % more
    CPU per payment for less throughput; at 1 s of acquirer latency 4 still serve 100 payments
    in flight (bench/latency.py, docs/benchmarks.md, "A slow acquirer")."""
    environ.setdefault("DATABASE_POOL", "true")
    environ.setdefault("DATABASE_POOL_MAX_SIZE", "4")


def on_starting(server):
    """Before the workers fork: one metrics directory for all of them (PROMETHEUS_MULTIPROC_DIR,
    or a temporary one), emptied, so /metrics adds up every worker
    (observability/metrics_dir.py). The web process's defaults go into the environment the
    workers inherit (web_environment_defaults)."""
    from observability.metrics_dir import metrics_dir_prepare

    web_environment_defaults(os.environ)
    path = metrics_dir_prepare("web")
    server.log.info("Prometheus multiprocess directory: %s", path)
    django_preload(server)


def django_preload(server):
    """Django set up in the master (``django.setup()``: settings, every app, its models and
    ``ready()``), after the metrics directory is named, before any worker forks (ADR 0052).
    Each worker, and each respawn after a crash, a ``max_requests`` or a timeout, starts from
    it: 0.3 CPU-second from its fork to its exit instead of 1.75 (three workers started,
    served and stopped: 1.8 CPU-seconds in all instead of 5.7, measured here). Not the
    application: config/wsgi.py is still imported in each worker after the fork, where
    tracing is set up (its exporter thread is the worker's) before the middleware loads.
    Django connects lazily, so the master forks holding no database or Redis connection and
    no thread of it (under config.settings.local the embedded servers are started or found
    here, once, instead of in each worker). A
    configuration that fails here is left to the workers, which report it at boot as before
    (config/checks.py) and stop gunicorn; an app that fails to load stops the master here."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
    import django

    try:
        django.setup(set_prefix=False)
    except Exception as exc:
        from django.apps import apps

        if apps.loading:  # failed while loading the apps: populate() cannot run again
            raise
        # The settings failed (a missing production variable): each worker reports it.
        server.log.info("Django not preloaded (%s); each worker will report it", type(exc).__name__)
        return
    # What the master loaded is never garbage: out of the collector's sight (the permanent
    # generation), so no worker's collections, nor its exit, walk those objects and copy
    # the pages that hold them (the fork shares them; Python's documentation of gc.freeze).
    gc.freeze()


def child_exit(server, worker):
    """A worker died: forget its live gauges; its counters stay in the directory's files."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    """The master stops: remove the metrics directory if on_starting made it."""
    from observability.metrics_dir import metrics_dir_remove

    metrics_dir_remove()


# The logging of every process (observability/log_config.py): LOG_FORMAT json, or console (the
# default under config.settings.local), redacted in the formatter. The access log writes the path
# without its query string (%(U)s, never %(r)s), with the answer's Request-Id; duration in ms.
logconfig_dict = logging_config(
    log_format=environment_log_format(os.environ), level=os.environ.get("LOG_LEVEL", "INFO")
)
access_log_format = '%(h)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms request_id=%({request-id}o)s'
# The access line only for requests the request line (observability/request_context.py) does not
# cover: those gunicorn answers itself, before Django (ADR 0028). One line per request.
logger_class = "observability.access_log.AccessLogger"
# Idle keep-alive connections live longer than common clients keep them (httpx: 5 s), so a
# client never reuses a connection at the moment the server closes it.
keepalive = int(os.environ.get("WEB_KEEPALIVE", "10"))
