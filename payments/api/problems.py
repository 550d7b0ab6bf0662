"""RFC 9457 problem details: the one error format of the API.

Every error answer is ``application/problem+json`` with ``type``, ``title``, ``status``,
``detail`` and a stable ``code``; field errors are listed under ``errors`` as objects with
``field``, ``code`` and ``message``. ``type`` is a relative URI reference ``/problems/<code>``
(RFC 9457 section 3.1.1). Messages never echo the request's values: a hostile body must not
be able to put card data into a log line or an answer.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from psycopg_pool import PoolTimeout
from rest_framework import exceptions, status

from payments.core.problem_format import PROBLEM_CONTENT_TYPE, problem_body

logger = logging.getLogger(__name__)

#: What Django raises when PostgreSQL cannot be reached or gave up on a statement: refused or
#: timed-out connections (``connect_timeout``), a connection lost mid-request, and the
#: server-side ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout``
#: (docs/adr/0020-database-outages-and-timeouts.md). ``IntegrityError`` and the other
#: ``DatabaseError`` kinds are bugs or races, not outages, and stay ``500``. psycopg_pool's
#: ``PoolTimeout`` (every connection of the process's pool in use for ``DATABASE_POOL_TIMEOUT_
#: SECONDS``) reaches here as Django's ``OperationalError`` (its ``__cause__``), or as itself
#: if raised outside Django's error wrapper.
DATABASE_UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    PoolTimeout,
)
#: ``Retry-After`` (seconds) of the ``503`` for an exhausted pool: connections come back within
#: milliseconds (a request holds one only for its short transactions, ADR 0048).
POOL_EXHAUSTED_RETRY_AFTER_SECONDS = 1


#: The 409 state conflicts of the operations (capture, void, refund): never stored, the key
#: stays free.
CONFLICT_TITLES = {
    "invalid_payment_state": "The payment's status does not allow this",
    "amount_exceeds_capturable": "The amount is more than can be captured",
    "amount_exceeds_refundable": "The amount is more than can be refunded",
}


class Problem(exceptions.APIException):
    """An API error with a stable ``code``, a ``title`` and optional field ``errors``.

    ``retry_after`` (seconds, rounded up to a whole number) becomes a ``Retry-After`` header
    (RFC 9110 section 10.2.3).
    """

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid_request"
    title = "The request is invalid"
    default_detail = "The request is invalid."

    def __init__(
        self,
        detail: str | None = None,
        *,
        code: str | None = None,
        title: str | None = None,
        status_code: int | None = None,
        errors: list[dict[str, str]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail=detail, code=code)
        if status_code is not None:
            self.status_code = status_code
        if title is not None:
            self.title = title
        self.code = code or self.default_code
        self.errors = errors
        # RFC 9110 delay-seconds are whole, non-negative seconds: round a wait up, never down.
        self.retry_after = None if retry_after is None else max(0, math.ceil(retry_after))


def problem_response(
    *,
    status_code: int,
    code: str,
    title: str,
    detail: str,
    errors: list | None = None,
    headers: dict[str, str] | None = None,
) -> HttpResponse:
    """Return an ``application/problem+json`` response."""
    response = HttpResponse(
        problem_body(status_code=status_code, code=code, title=title, detail=detail, errors=errors),
        status=status_code,
        content_type=PROBLEM_CONTENT_TYPE,
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _flatten_errors(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """Turn DRF's nested ``ValidationError.detail`` into ``[{field, code, message}]``."""
    if isinstance(detail, dict):
        out: list[dict[str, str]] = []
        for name, value in detail.items():
            field = name if name != "non_field_errors" else ""
            out.extend(
                _flatten_errors(value, f"{prefix}.{field}" if prefix and field else prefix or field)
            )
        return out
    if isinstance(detail, list):
        out = []
        for item in detail:
            out.extend(_flatten_errors(item, prefix))
        return out
    return [{"field": prefix, "code": getattr(detail, "code", "invalid"), "message": str(detail)}]


# DRF exception class -> (code, title) for the ones DRF raises itself.
_DRF_PROBLEMS: dict[type, tuple[str, str]] = {
    exceptions.NotAuthenticated: ("authentication_required", "Authentication is required"),
    exceptions.AuthenticationFailed: ("authentication_failed", "Authentication failed"),
    exceptions.PermissionDenied: ("permission_denied", "Permission denied"),
    exceptions.NotFound: ("not_found", "Not found"),
    exceptions.MethodNotAllowed: ("method_not_allowed", "Method not allowed"),
    exceptions.NotAcceptable: ("not_acceptable", "Not acceptable"),
    exceptions.Throttled: ("rate_limited", "Too many requests"),
    exceptions.ParseError: ("invalid_json", "The body is not valid JSON"),
}


def problem_exception_handler(exc: Exception, context: dict) -> HttpResponse | None:
    """DRF ``EXCEPTION_HANDLER``: render every API error as a problem document.

    An unsupported ``Content-Type`` is answered 400 ``unsupported_media_type`` (the API accepts
    only ``application/json``). A database outage (:data:`DATABASE_UNAVAILABLE_ERRORS`) is
    answered by :func:`database_unavailable` (503). Other exceptions that are not API errors
    return ``None``, so Django answers them with :func:`server_error` (500) after logging them.
    """
    from rest_framework.views import set_rollback  # here: rest_framework.views imports parsers

    if isinstance(exc, DATABASE_UNAVAILABLE_ERRORS):
        return database_unavailable(exc)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None

    headers: dict[str, str] = {}
    errors = None
    status_code = exc.status_code
    if isinstance(exc, exceptions.UnsupportedMediaType):
        status_code = status.HTTP_400_BAD_REQUEST
        code, title = "unsupported_media_type", "The body must be application/json"
        detail = "Send the body as JSON with 'Content-Type: application/json'."
    elif isinstance(exc, exceptions.ValidationError):
        code, title = "validation_error", "The request body is invalid"
        detail = "One or more fields are invalid; see 'errors'."
        errors = _flatten_errors(exc.detail)
    elif isinstance(exc, Problem):
        code, title, detail, errors = exc.code, exc.title, str(exc.detail), exc.errors
        if exc.retry_after is not None:
            headers["Retry-After"] = str(exc.retry_after)
    elif hasattr(exc, "title"):  # idempotency errors
        code, title, detail = exc.default_code, exc.title, str(exc.detail)
        retry_after = getattr(exc, "retry_after_seconds", None)
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
    else:
        code, title = next(
            (v for cls, v in _DRF_PROBLEMS.items() if isinstance(exc, cls)),
            (str(exc.default_code), "Error"),
        )
        detail = str(exc.detail) if not isinstance(exc.detail, (dict, list)) else title
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        headers["WWW-Authenticate"] = auth_header
    wait = getattr(exc, "wait", None)
    if wait:
        headers["Retry-After"] = str(int(wait))
    set_rollback()
    return problem_response(
        status_code=status_code,
        code=code,
        title=title,
        detail=detail,
        errors=errors,
        headers=headers,
    )


def not_found(request, exception=None) -> HttpResponse:
    """Django ``handler404``: unknown URLs answer a 404 problem too."""
    return problem_response(
        status_code=404, code="not_found", title="Not found", detail="No such resource."
    )


def database_unavailable(exc: BaseException) -> HttpResponse:
    """The answer to a request during a database outage or after a database timeout: ``503``
    problem ``service_unavailable`` with ``Retry-After`` (``PAYMENTS_UNAVAILABLE_RETRY_AFTER_
    SECONDS``). Logged at WARNING with the exception's class and SQLSTATE only (psycopg's
    messages name hosts and ports).

    Nothing is undone or written here: the failed transaction rolled back, and whatever an
    earlier, committed phase left (a ``processing`` payment, a locked key) is what a crash at
    that line leaves, which reconciliation and the key's lock timeout resolve. So the answer
    promises nothing about the outcome; it tells the client to retry with the same key.
    """
    cause = exc.__cause__
    logger.warning(
        "database unavailable: %s (sqlstate %s)",
        type(cause or exc).__name__,
        getattr(cause, "sqlstate", None) or "-",
    )
    if isinstance(exc, PoolTimeout) or isinstance(cause, PoolTimeout):
        return pool_exhausted()
    return problem_response(
        status_code=503,
        code="service_unavailable",
        title="Service temporarily unavailable",
        detail="The service's database did not answer in time. The request may or may not "
        "have taken effect; retry later with the same Idempotency-Key, which is never "
        "applied twice.",
        headers={"Retry-After": str(settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS)},
    )


def pool_exhausted() -> HttpResponse:
    """The answer when every connection of this process's database pool stayed in use for
    ``DATABASE_POOL_TIMEOUT_SECONDS`` (psycopg_pool's ``PoolTimeout``): ``503`` problem
    ``service_unavailable`` with ``Retry-After`` :data:`POOL_EXHAUSTED_RETRY_AFTER_SECONDS`.
    Nothing of this request's current step was written (no connection, no statement); an
    earlier committed phase is resolved as after any ``503`` (retry with the same key)."""
    return problem_response(
        status_code=503,
        code="service_unavailable",
        title="Service temporarily unavailable",
        detail="Every database connection of the service was busy. The request may or may not "
        "have taken effect; retry shortly with the same Idempotency-Key, which is never "
        "applied twice.",
        headers={"Retry-After": str(POOL_EXHAUSTED_RETRY_AFTER_SECONDS)},
    )


class DatabaseUnavailableMiddleware:
    """Answers a database outage in a view that is not DRF's (the admin, ``/metrics``) with
    :func:`database_unavailable` rather than a ``500``, in debug mode too. DRF views never
    get here: their exception handler answers first."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DATABASE_UNAVAILABLE_ERRORS):
            return database_unavailable(exception)
        return None


class NulInPathMiddleware:
    """Answers a path with a NUL (``/payments/pay_%00``) with the 404 problem, in debug mode
    too: no object id holds one, and PostgreSQL text cannot, so the look-up would fail as a
    ``500``. One check for every route, the admin's included."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path_info:
            return not_found(request)
        return self.get_response(request)


#: RFC 9110 section 8.6: ``Content-Length = 1*DIGIT`` (ASCII digits only; ``int()`` would also
#: take ``+1``, ``1_0``, `` 1`` and other scripts' digits).
_CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")


def body_framing_problem(request: HttpRequest) -> HttpResponse | None:
    """The problem answer for a request whose body cannot be read in full, else ``None``.

    Under WSGI, Django reads exactly ``Content-Length`` bytes of a body, and none when the
    header is absent: a body sent with ``Transfer-Encoding`` (chunked, RFC 9112 section 6.1)
    would arrive empty, and a capture or refund would run with its defaults. So:

    - any ``Transfer-Encoding`` -> ``411 length_required`` (RFC 9110 section 15.5.12);
    - a ``Content-Length`` that is not 1-18 ASCII digits -> ``400 invalid_content_length``;
    - fewer bytes than ``Content-Length`` announced (the client stopped sending) ->
      ``400 body_incomplete``.

    A body longer than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is not read here: the JSON parser
    refuses it (``body_too_large``) and Django refuses it on form routes. Otherwise the body is
    read (``request.body``, bounded by that size) so that every later reader sees the bytes
    counted here. Messages never quote a header's value.
    """
    meta = request.META
    if meta.get("HTTP_TRANSFER_ENCODING") is not None:
        return problem_response(
            status_code=411,
            code="length_required",
            title="The body needs a Content-Length",
            detail="Send the body with a Content-Length header and no Transfer-Encoding; "
            "this request was not acted on.",
        )
    declared = meta.get("CONTENT_LENGTH")
    if declared in (None, ""):
        return None
    if not _CONTENT_LENGTH.fullmatch(declared):
        return problem_response(
            status_code=400,
            code="invalid_content_length",
            title="The Content-Length header is invalid",
            detail="Content-Length must be the body's size in bytes, in decimal digits; "
            "this request was not acted on.",
        )
    length = int(declared)
    if 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE and len(request.body) != length:
        return problem_response(
            status_code=400,
            code="body_incomplete",
            title="The body ended early",
            detail="The body ended before the size its Content-Length announced; "
            "this request was not acted on.",
        )
    return None


class RequestBodyMiddleware:
    """Refuses, before any view or authentication, a request whose body cannot be read in
    full (:func:`body_framing_problem`), on every route: the body acted on is the body sent."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return body_framing_problem(request) or self.get_response(request)


def server_error(request) -> HttpResponse:
    """Django ``handler500``: the error was logged by Django; the answer reveals nothing. A
    database outage raised outside any view (by a middleware, say) still answers ``503``."""
    exc = sys.exc_info()[1]
    if isinstance(exc, DATABASE_UNAVAILABLE_ERRORS):
        return database_unavailable(exc)
    return problem_response(
        status_code=500,
        code="internal_error",
        title="Internal server error",
        detail="An unexpected error occurred. It was logged; retrying with the same "
        "Idempotency-Key is safe.",
    )


def bad_request(request, exception=None) -> HttpResponse:
    """Django ``handler400``: a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` read outside the JSON
    parser answers ``body_too_large`` as the parser does; anything else ``bad_request``."""
    if isinstance(exception, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return problem_response(
            status_code=400,
            code="body_too_large",
            title="The body is too large",
            detail=f"The body is larger than {limit} bytes.",
        )
    return problem_response(
        status_code=400, code="bad_request", title="Bad request", detail="The request is malformed."
    )
