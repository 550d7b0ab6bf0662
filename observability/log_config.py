"""The logging configuration of every process: one builder, two renderings (ADR 0016).

:func:`logging_config` returns the ``logging.config.dictConfig`` dictionary that Django's
``LOGGING`` (config/settings/base.py), gunicorn's ``logconfig_dict`` (config/gunicorn.conf.py),
the Celery worker and beat (config/celery_app.py, ``setup_logging``) and management commands
all use. Every record, from our code or a library's, is rendered by structlog's
``ProcessorFormatter``: ``LOG_FORMAT=json`` gives one JSON object per line (production),
``console`` a readable coloured-free line with ``key=value`` fields (development). Each line
carries the bound context (``request_id`` and, in a task, ``task_id`` and ``task_name``;
observability/request_context.py), the running span's ``trace_id`` and ``span_id`` when
tracing is on (observability/trace_context.py; ADR 0044) and the record's ``extra`` fields (the
acquirer attempt's ``gateway_*``). The formatter of every handler is
:class:`~observability.log_filters.RedactingProcessorFormatter`: the one redaction step, over the
whole rendered line, traceback included.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import structlog

from observability.trace_context import add_trace_ids

#: ``LOG_FORMAT`` values.
FORMATS = ("json", "console")

#: Attributes every ``LogRecord`` has: the rest of a record's ``__dict__`` is its ``extra``.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "_from_structlog",
    "_logger",
    "_name",
    "taskName",
}

#: Loggers of libraries too talkative at INFO, and pgserver's "already running" (each gunicorn
#: worker reaches the embedded PostgreSQL when it loads the settings).
QUIET_LOGGERS = ("httpx", "httpcore", "pgserver", "kombu", "amqp")
#: Celery's loggers of a beat tick and a task's receipt and outcome (IdleTasksAtDebug).
IDLE_TASK_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")


#: The ``extra`` values copied into a line: plain data. An object (Django's ``request`` on
#: its request logger's records, whose repr holds the raw path and query) is left out.
_PLAIN = (str, int, float, bool, type(None), dict, list, tuple)


def _extra_fields(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Copy a stdlib record's plain ``extra`` values into the event (structlog's
    ``ExtraAdder``, with the attributes of this Python's ``LogRecord`` known)."""
    record = event_dict.get("_record")
    if record is not None:
        for name, value in record.__dict__.items():
            if name in _RECORD_ATTRIBUTES or name.startswith("_") or not isinstance(value, _PLAIN):
                continue
            event_dict.setdefault(name, value)
    return event_dict


#: Integers from this magnitude on are written as strings (12 digits or more).
_LONG_INTEGER = 10**11
#: The exact types a line's values mostly have that :func:`_short_number` returns as they are,
#: decided by one look-up before the ``isinstance`` chain (a line has some thirty values).
_UNCHANGED = frozenset({str, bool, type(None)})


def _short_number(value: Any) -> Any:
    kind = type(value)
    if kind in _UNCHANGED:
        return value
    if kind is int:
        return str(value) if abs(value) >= _LONG_INTEGER else value
    if isinstance(value, float):
        return round(value, 4) if abs(value) < 1e8 else str(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _LONG_INTEGER:
        return str(value)
    if isinstance(value, dict):
        return {name: _short_number(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):  # a tuple: no union object built per call
        return [_short_number(item) for item in value]
    return value


def _short_numbers(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Floats to 4 decimals, and integers of 12 digits or more as strings, at any depth: a
    float's 17 digits would read as a card number to the redaction (and a redacted bare number
    would break the JSON line); quoted, a long integer is redacted inside its string."""
    return {name: _short_number(value) for name, value in event_dict.items()}


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _extra_fields,
        structlog.stdlib.PositionalArgumentsFormatter(),
    ]


def _formatter(log_format: str) -> dict[str, Any]:
    if log_format not in FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)}, not {log_format!r}")
    renderer: Any
    if log_format == "json":
        # The traceback as one string field (never its frames' local variables).
        tail: list[Any] = [structlog.processors.format_exc_info, _short_numbers]
        renderer = structlog.processors.JSONRenderer(default=str)
    else:
        tail = [_short_numbers]
        renderer = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    return {
        "()": "observability.log_filters.RedactingProcessorFormatter",
        "foreign_pre_chain": _shared_processors(),
        "processors": [
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *tail,
            renderer,
        ],
    }


def logging_config(*, log_format: str = "json", level: str = "INFO") -> dict[str, Any]:
    """The ``dictConfig`` dictionary: one handler on stderr for everything (the root), and
    gunicorn's access log on stdout, both rendered as ``log_format`` (``json`` or ``console``)
    and redacted; the root at ``level``. Both handlers log a client's suspicious request
    (``django.security.*``) as a WARNING without traceback (``ClientErrorsAsWarnings``).
    Raises ``ValueError`` for another format."""
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "structured",
        "filters": ["client_errors_as_warnings"],
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"structured": _formatter(log_format)},
        "filters": {
            "client_errors_as_warnings": {"()": "observability.log_filters.ClientErrorsAsWarnings"},
            "idle_tasks_at_debug": {"()": "observability.log_filters.IdleTasksAtDebug"},
        },
        "handlers": {
            "console": {**handler, "stream": "ext://sys.stderr"},
            "access": {**handler, "stream": "ext://sys.stdout"},
        },
        "root": {"handlers": ["console"], "level": level.upper()},
        "loggers": {
            **{name: {"level": "WARNING"} for name in QUIET_LOGGERS},
            # Django's own handlers would print each request a second time; its request
            # logger's lines are replaced by the request line (observability/request_context.py).
            "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "gunicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
            "celery": {"level": level.upper()},
            # An idle stack's beat ticks and empty sweeps at DEBUG (a few lines a minute at INFO).
            **{name: {"filters": ["idle_tasks_at_debug"]} for name in IDLE_TASK_LOGGERS},
        },
    }


def environment_log_format(environ: Mapping[str, str]) -> str:
    """``LOG_FORMAT`` for a process that reads no Django settings (gunicorn's master): the
    variable when set, else ``console`` under the developer's settings
    (``config.settings.local``, the default) and ``json`` under any other, as the settings
    files decide."""
    chosen = environ.get("LOG_FORMAT")
    if chosen:
        return chosen
    module = environ.get("DJANGO_SETTINGS_MODULE", "config.settings.local")
    return "console" if module == "config.settings.local" else "json"


def structlog_configure() -> None:
    """Let ``structlog.get_logger()`` loggers go through the same stdlib handlers (and so the
    same formatter and redaction) as every other record, and Python's warnings too (the
    ``py.warnings`` logger) rather than straight to stderr."""
    logging.captureWarnings(True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_ids,
            structlog.stdlib.filter_by_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
