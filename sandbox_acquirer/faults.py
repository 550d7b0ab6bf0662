"""Injected failures: what a failing request gets, and the problem bodies that go with it.

Per-payment scenarios (``tok_fail_503_2``, ``tok_ratelimit_5``, ``tok_reset_before_commit``) and
acquirer-wide conditions (outages, flapping) describe their failures with one value, ``Fault``:

- ``kind="status"``: an HTTP answer with ``status`` and a plausible problem body (see
  ``PROBLEMS``), optionally with ``Retry-After`` as delay-seconds or as an HTTP-date;
- ``kind="reset"``: the connection is reset (TCP RST) without an answer;
- ``kind="close"``: the connection is closed (TCP FIN) without an answer;
- ``kind="refused"``: the connection is reset before the request is even read (the sandbox's
  stand-in for "connection refused"; see docs/sandbox.md).

Rendering a fault into a response lives in ``app``; this module only holds values and the
HTTP-date formatting, so it stays free of I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from email.utils import formatdate
from typing import Literal

__all__ = [
    "FAULT_KINDS",
    "FAULT_STATUSES",
    "PROBLEMS",
    "Fault",
    "FaultKind",
    "RetryAfterFormat",
    "format_http_date",
    "retry_after_value",
]

FaultKind = Literal["status", "reset", "close", "refused"]
RetryAfterFormat = Literal["seconds", "date"]

#: Connection-level fault kinds (no HTTP answer at all).
FAULT_KINDS: tuple[str, ...] = ("reset", "close", "refused")

#: The statuses a scenario or condition may inject, with their problem ``code``, ``title``
#: and ``detail``. 403 is a plain permission error here, never a rate limit.
PROBLEMS: dict[int, tuple[str, str, str]] = {
    400: ("invalid_request", "The request is invalid", "The acquirer could not parse the request."),
    401: ("invalid_api_key", "Unauthorized", "The API key is not valid."),
    403: (
        "permission_denied",
        "Forbidden",
        "This API key is not allowed to perform this request.",
    ),
    404: ("not_found", "Not Found", "The requested resource does not exist."),
    409: (
        "idempotency_key_in_use",
        "A request is outstanding for this Idempotency-Key",
        "A request with this Idempotency-Key is still being processed; retry later.",
    ),
    422: (
        "unprocessable_request",
        "Unprocessable Content",
        "The acquirer could not process this request.",
    ),
    429: ("rate_limited", "Too Many Requests", "Too many requests; slow down and retry later."),
    500: ("api_error", "Internal Server Error", "The acquirer failed unexpectedly."),
    502: ("bad_gateway", "Bad Gateway", "The acquirer's upstream network answered badly."),
    503: (
        "service_unavailable",
        "Service Unavailable",
        "The acquirer is temporarily unavailable; retry later.",
    ),
    504: ("gateway_timeout", "Gateway Timeout", "The acquirer's upstream network timed out."),
}

#: Statuses accepted by ``tok_fail_<status>_<n>`` and by outage/flapping conditions.
FAULT_STATUSES: tuple[int, ...] = tuple(PROBLEMS)


@dataclass(frozen=True, slots=True)
class Fault:
    """What one failing request gets.

    ``status`` is set only for ``kind="status"``. ``retry_after_seconds`` (``None``: no
    header) is rendered as delay-seconds or, with ``retry_after_format="date"``, as the
    IMF-fixdate that many seconds ahead (rounded up to the next whole second).
    ``reason`` names the source in the stats (``tok_fail``, ``outage``, ...).
    """

    kind: FaultKind = "status"
    status: int | None = None
    retry_after_seconds: int | None = None
    retry_after_format: RetryAfterFormat = "seconds"
    reason: str = "fault"

    def __post_init__(self) -> None:
        if self.kind == "status":
            if self.status not in PROBLEMS:
                raise ValueError(f"unsupported fault status {self.status!r}")
        elif self.kind in FAULT_KINDS:
            if self.status is not None:
                raise ValueError("a connection fault has no status")
        else:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if self.retry_after_seconds is not None and self.retry_after_seconds < 0:
            raise ValueError("retry_after_seconds must be >= 0")

    @property
    def answers(self) -> bool:
        """Whether the client gets an HTTP answer (``False`` for connection faults)."""
        return self.kind == "status"


def format_http_date(epoch_seconds: float) -> str:
    """``epoch_seconds`` as an RFC 9110 IMF-fixdate in GMT, e.g. ``Sun, 06 Nov 1994 08:49:37 GMT``.

    Fractions are dropped (HTTP dates have whole seconds).
    """
    return formatdate(math.floor(epoch_seconds), usegmt=True)


def retry_after_value(seconds: int, fmt: RetryAfterFormat, now_epoch: float) -> str:
    """The ``Retry-After`` value for a wait of ``seconds`` from ``now_epoch``.

    ``"seconds"``: the delay-seconds, e.g. ``"5"``. ``"date"``: the IMF-fixdate of
    ``ceil(now_epoch + seconds)``, so a client honouring it never comes back early.
    """
    if fmt == "date":
        return format_http_date(math.ceil(now_epoch + seconds))
    return str(seconds)
