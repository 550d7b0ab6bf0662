"""gunicorn's logger, without the access line of a request the request line already covers.

The request line (``payments.request``, observability/request_context.py) carries what gunicorn's
access line would (method, route, status, duration, bytes, request id) and more (merchant,
idempotency outcome, payment, its status), so writing both would log each request twice
(ADR 0028). The middleware marks the WSGI environ (:data:`REQUEST_LINE_WRITTEN`) once its line
is written; :class:`AccessLogger` then skips the access line. A request that never got one
(gunicorn refused it before Django: a malformed request line, headers too large; the app
raised past the middleware) still gets gunicorn's access line, so every request is logged once.
"""

from __future__ import annotations

from typing import Any

from gunicorn.glogging import Logger

from observability.request_context import REQUEST_LINE_WRITTEN

__all__ = ["AccessLogger"]


class AccessLogger(Logger):
    """gunicorn's ``Logger`` (``logger_class`` in config/gunicorn.conf.py) whose access line
    is written only for requests without a request line."""

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        """gunicorn's access line for ``req``, unless ``environ`` says the request line was
        written (then nothing, not even the atoms gunicorn would build)."""
        if environ.get(REQUEST_LINE_WRITTEN):
            return
        super().access(resp, req, environ, request_time)
