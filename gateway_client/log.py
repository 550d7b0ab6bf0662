"""
A JSON formatter for the client's attempt events (stdlib logging, no dependency).

`JsonFormatter` renders a record as one JSON object per line: `time` (RFC 3339, UTC), `level`,
`logger`, `message`, and every `gateway_*` extra field without its prefix (`operation`,
`attempt`, `status`, `outcome`, `wait`, `wait_source`, `budget_retries`, ...). Exceptions
are rendered by class name only: their text could quote what was sent. Wire it in Django's
LOGGING, for example:

    "formatters": {"json": {"()": "gateway_client.log.JsonFormatter"}},
    "handlers": {"gateway": {"class": "logging.StreamHandler", "formatter": "json"}},
    "loggers": {"gateway_client": {"handlers": ["gateway"], "level": "INFO",
                                   "propagate": False}},
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter"]

_PREFIX = "gateway_"


class JsonFormatter(logging.Formatter):
    """Formats a LogRecord as a single-line JSON object (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as JSON."""
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name.startswith(_PREFIX):
                document[name[len(_PREFIX) :]] = value
        if record.exc_info and record.exc_info[0] is not None:
            document["exception"] = record.exc_info[0].__name__
        return json.dumps(document, default=str, separators=(",", ":"))
