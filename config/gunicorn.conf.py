"""gunicorn settings; the bind address comes from ``WEB_BIND`` (default 127.0.0.1:8000)."""

import os

bind = os.environ.get("WEB_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("WEB_THREADS", "4"))
# Above the acquirer deadline (ACQUIRER_READ_TIMEOUT_SECONDS) so a slow acquirer answer is
# never cut off by the worker timeout in the middle of phase 2.
timeout = int(os.environ.get("WEB_TIMEOUT", "30"))
accesslog = "-"
# No control socket in the home directory: two copies on one machine would share it.
control_socket_disable = True


def on_starting(server):
    """Before the workers fork: one metrics directory for all of them (PROMETHEUS_MULTIPROC_DIR,
    or a temporary one), emptied, so /metrics adds up every worker (config/metrics_dir.py)."""
    from config.metrics_dir import metrics_dir_prepare

    path = metrics_dir_prepare("web")
    server.log.info("Prometheus multiprocess directory: %s", path)


def child_exit(server, worker):
    """A worker died: forget its live gauges; its counters stay in the directory's files."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    """The master stops: remove the metrics directory if on_starting made it."""
    from config.metrics_dir import metrics_dir_remove

    metrics_dir_remove()


# Card numbers or API keys that a client puts in a URL never reach the access or error log.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "config.log_filters.RedactSecrets"}},
    "formatters": {
        "generic": {"format": "%(asctime)s [%(process)d] [%(levelname)s] %(message)s"},
        "access": {"format": "%(message)s"},
    },
    "handlers": {
        "error_console": {
            "class": "logging.StreamHandler",
            "formatter": "generic",
            "filters": ["redact"],
            "stream": "ext://sys.stderr",
        },
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "access",
            "filters": ["redact"],
            "stream": "ext://sys.stdout",
        },
    },
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
    },
}
# Idle keep-alive connections live longer than common clients keep them (httpx: 5 s), so a
# client never reuses a connection at the moment the server closes it.
keepalive = int(os.environ.get("WEB_KEEPALIVE", "10"))
