"""Observability: the request id and its context, the logging configuration and its one
redaction step, gunicorn's access logger and Prometheus' multiprocess directory (ADR 0016,
0022, 0028, 0036).

Below the apps: it imports no project app (``card_data`` only, the plain-Python card-number
detector the redaction uses) and never ``config``. Framework-light: plain Python and structlog,
except where a framework is the point (:class:`~observability.request_context.
RequestContextMiddleware` is a Django middleware, :class:`~observability.access_log.AccessLogger`
a gunicorn logger). The apps read the current request id from
:mod:`observability.request_context`; ``config`` wires the rest in (settings, gunicorn, Celery).
"""
