"""The answers gunicorn gives itself, before Django sees a request: problem+json too.

gunicorn refuses a request it cannot parse (a malformed request line, method, version or
header, a line or header block too long, a bad chunk, an unsupported transfer coding) with an
HTML page that repeats the offending text. Every other error of this API is an RFC 9457 problem
document (``application/problem+json``), and nothing a client sent is ever echoed (it may hold
card data or a key). :func:`gunicorn_error_write` writes such a document instead, with the same
status and reason gunicorn chose and a fixed detail; ``config/gunicorn.conf.py`` installs it
(:func:`gunicorn_errors_as_problems`) over ``gunicorn.util.write_error``, the one function
gunicorn's workers call for these answers (gunicorn 27, ``workers/base.py`` ``handle_error``).
gunicorn still logs the refusal ("Invalid request from ip=...") through the redacted logging.

Plain Python and gunicorn only: loaded by gunicorn's configuration before Django.
"""

from __future__ import annotations

import gunicorn.util

from payments.core.problem_format import PROBLEM_CONTENT_TYPE, problem_body

__all__ = ["gunicorn_error_write", "gunicorn_errors_as_problems"]

#: Status -> (code, detail) of gunicorn's own refusals; any other status is a bad request.
SERVER_PROBLEMS: dict[int, tuple[str, str]] = {
    400: ("bad_request", "The request line or a header is malformed; nothing was done."),
    403: ("forbidden", "The request was refused before it was read; nothing was done."),
    414: ("uri_too_long", "The request line is too long; nothing was done."),
    417: ("expectation_failed", "The Expect header is not supported; nothing was done."),
    431: (
        "request_header_fields_too_large",
        "Too many headers, or a header too long; nothing was done.",
    ),
    500: ("server_error", "The server could not read the request; nothing was done."),
    501: ("not_implemented", "The request's transfer coding is not supported; nothing was done."),
}


def gunicorn_error_write(sock, status_int: int, reason: str, mesg: str) -> None:
    """Write gunicorn's refusal ``status_int`` ``reason`` on ``sock`` as a problem document
    (``Connection: close``). ``mesg``, gunicorn's description with the client's own text in
    it, is not sent. The signature is ``gunicorn.util.write_error``'s."""
    code, detail = SERVER_PROBLEMS.get(status_int, SERVER_PROBLEMS[400])
    body = problem_body(status_code=status_int, code=code, title=reason, detail=detail)
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\n"
        "Connection: close\r\n"
        f"Content-Type: {PROBLEM_CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    gunicorn.util.write_nonblock(sock, head.encode("latin-1") + body)


def gunicorn_errors_as_problems() -> None:
    """Make gunicorn's own refusals problem documents (idempotent)."""
    gunicorn.util.write_error = gunicorn_error_write
