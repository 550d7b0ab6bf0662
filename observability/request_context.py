"""Request ids and the one log line per request.

Every HTTP answer carries ``Request-Id``: the client's ``X-Request-Id`` when it is valid
(:func:`valid_request_id`: 1-128 characters of ``A-Z a-z 0-9 . _ : -``, and nothing the log
redaction would hide, so a card number or a key is never adopted, stored or echoed), else a
new one (:func:`new_request_id`). The id is bound in structlog's context variables for the
request, so every log line of the request carries it (observability/log_config.py merges them), the
acquirer gets it (payments/acquirer passes :func:`current_request_id` to gateway_client), the
Celery tasks the request enqueues get it in a message header (config/celery_app.py), and the
payment events record it (``PaymentEvent.request_id``). A replay is a new request: it gets
the new request's id, never the stored one.

:class:`RequestContextMiddleware` (first in ``MIDDLEWARE``) also writes the request line on
the ``payments.request`` logger: method, route (the URL pattern, never the raw path with its
query string), status, duration in milliseconds, and what the request bound on the way:
``merchant_id`` (merchants/authentication.py), ``idempotency`` (``new``, ``taken_over``,
``replay``, ``in_use``, ``reused``: idempotency/services.py) and ``payment_id``, the
answer's ``bytes``, the peer's ``remote_addr`` (what gunicorn's access line showed: a proxy's
address behind one), ``path`` (without the query string) only when no route matched, and the
facts code below adds with :func:`request_line_note` (the payment's ``payment_status`` and
``authorize_outcome`` after an authorization: payments/authorization/create.py). Levels:
INFO below 500 (a 4xx is the client's expected answer; DEBUG for a successful health check
or scrape), WARNING for 502 and 503 (expected acquirer answers), ERROR for the rest.
Django's own ``django.request`` line for the answer is then skipped (the response is marked
logged); an unhandled exception keeps its ERROR traceback from Django. gunicorn's access line
is skipped too for a request this line covers (:data:`REQUEST_LINE_WRITTEN` in the WSGI
environ, read by observability/access_log.py; ADR 0028): one line per request.
"""

from __future__ import annotations

import base64
import logging
import re
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import structlog

from observability.log_filters import redact

__all__ = [
    "INCOMING_HEADER",
    "REQUEST_ID_HEADER",
    "REQUEST_LINE_WRITTEN",
    "RequestContextMiddleware",
    "bind_request_id",
    "current_request_id",
    "head_body_remove",
    "new_request_id",
    "request_line_note",
    "valid_request_id",
]

#: The answer's header (the IETF HTTPAPI draft's name, as Stripe and others send it).
REQUEST_ID_HEADER = "Request-Id"
#: The header a client (or a proxy in front) may send with its own id.
INCOMING_HEADER = "X-Request-Id"
#: The longest id adopted from a client (longer ones are replaced, never cut).
MAX_LENGTH = 128
_VALID = re.compile(rf"[A-Za-z0-9._:\-]{{1,{MAX_LENGTH}}}")

#: The WSGI environ key set once the request line is written: gunicorn's access line is then
#: not written (observability/access_log.py), since this line carries what it would.
REQUEST_LINE_WRITTEN = "payments.request_line_written"

logger = logging.getLogger("payments.request")
#: The facts code running inside the request adds to its request line (request_line_note).
_REQUEST_LINE_FACTS: ContextVar[dict[str, Any] | None] = ContextVar(
    "request_line_facts", default=None
)
_PAYMENT_LOCATION = re.compile(r"^/payments/(pay_[0-9a-f]+)")


def new_request_id() -> str:
    """A new id: ``req_`` + 24 characters of base32 (120 random bits, lower case, digits only
    2-7), so it never holds the long digit runs the log redaction hides."""
    return "req_" + base64.b32encode(secrets.token_bytes(15)).decode("ascii").lower()


def valid_request_id(value: str | None) -> bool:
    """True when ``value`` can be adopted as the request id: 1-128 characters of
    ``A-Z a-z 0-9 . _ : -`` that :func:`observability.log_filters.redact` leaves alone (no card
    number, no key, no secret)."""
    return bool(value) and _VALID.fullmatch(value) is not None and redact(value) == value


def current_request_id() -> str | None:
    """The id bound for the request (or the task) running in this context, or None."""
    value = structlog.contextvars.get_contextvars().get("request_id")
    return value if isinstance(value, str) else None


def bind_request_id(value: str | None, **context: Any) -> str:
    """Start a fresh logging context holding ``value`` (when valid, else a new id) and
    ``context``; return the id bound."""
    request_id = value if value is not None and valid_request_id(value) else new_request_id()
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id, **context)
    return request_id


def request_line_note(**facts: str | int | None) -> bool:
    """Add ``facts`` (field names to plain values) to the request line of the HTTP request
    running in this context, and return True; return False, adding nothing, when no request
    line will be written here (a Celery task, a management command), so the caller writes its
    own line. A later fact of the same name replaces an earlier one."""
    found = _REQUEST_LINE_FACTS.get()
    if found is None:
        return False
    found.update(facts)
    return True


#: Routes probed every few seconds (health checks, scrapes): their successful lines are DEBUG.
PROBE_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})


def _level(status: int, route: str | None) -> int:
    if status < 400 and route in PROBE_ROUTES:
        return logging.DEBUG
    if status < 500:
        return logging.INFO
    if status in (502, 503):
        return logging.WARNING
    return logging.ERROR


def _payment_id(request: Any, response: Any) -> str | None:
    match = getattr(request, "resolver_match", None)
    if match is not None and match.kwargs.get("payment_id"):
        return str(match.kwargs["payment_id"])
    found = _PAYMENT_LOCATION.match(response.get("Location") or "")
    return found.group(1) if found else None


def _length(response: Any) -> int | None:
    """The answer's body length in bytes (``Content-Length``, set by CommonMiddleware), or
    None for a streaming answer without one."""
    length = response.get("Content-Length")
    if length is not None:
        return int(length)
    return None if response.streaming else len(response.content)


def head_body_remove(response: Any) -> None:
    """Empty the body of an answer to ``HEAD`` (RFC 9110 9.3.2), keeping the ``Content-Length``
    the same ``GET`` would carry.

    Django's WSGI handler sends a ``HEAD`` answer's body, which gunicorn drops with a warning
    per request (one per load-balancer probe); the answer leaves here without one.
    """
    if response.streaming:
        # The original iterator stays among the response's closers: the server's close()
        # releases it (a file, a cursor) as it would have after sending it.
        response.streaming_content = []
        return
    if not response.has_header("Content-Length"):
        response["Content-Length"] = str(len(response.content))
    response.content = b""


class RequestContextMiddleware:
    """Bind the request id, answer it in ``Request-Id``, write the request line."""

    def __init__(
        self, get_response: Callable[[Any], Any], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.get_response = get_response
        self.clock = clock

    def __call__(self, request: Any) -> Any:
        started = self.clock()
        request_id = bind_request_id(request.headers.get(INCOMING_HEADER))
        request.request_id = request_id
        facts: dict[str, Any] = {}
        token = _REQUEST_LINE_FACTS.set(facts)
        try:
            response = self.get_response(request)
            response[REQUEST_ID_HEADER] = request_id
            self._log(request, response, started, facts)
            if request.method == "HEAD":
                head_body_remove(response)
            return response
        finally:
            _REQUEST_LINE_FACTS.reset(token)
            structlog.contextvars.clear_contextvars()

    def _log(self, request: Any, response: Any, started: float, facts: dict[str, Any]) -> None:
        match = getattr(request, "resolver_match", None)
        bound = structlog.contextvars.get_contextvars()
        fields = {
            "method": request.method,
            "route": "/" + match.route if match is not None else None,
            "status": response.status_code,
            "duration_ms": round((self.clock() - started) * 1000, 1),
            "bytes": _length(response),
            "remote_addr": request.META.get("REMOTE_ADDR"),
            "merchant_id": bound.get("merchant_id"),
            "idempotency": bound.get("idempotency"),
            "payment_id": _payment_id(request, response),
            **facts,
        }
        if match is None:
            fields["path"] = request.path  # what gunicorn's access line would have shown
        logger.log(
            _level(response.status_code, fields["route"]),
            "request %s %s %s",
            fields["method"],
            fields["route"] or "(no route)",
            fields["status"],
            extra=fields,
        )
        # django.request's "Not Found: <path>" / "Service Unavailable: <path>" would repeat
        # this line (at ERROR for every expected 503), with the raw path.
        response._has_been_logged = True
        request.META[REQUEST_LINE_WRITTEN] = True
