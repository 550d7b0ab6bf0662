"""HTTP/1.1 front end of the sandbox acquirer, on ``http.server.ThreadingHTTPServer``.

``SandboxRequestHandler`` reads one request from the socket (headers, then at most
``max_body_bytes`` of body), hands a ``Request`` to ``SandboxApp.handle`` and writes the
``Response`` with an exact ``Content-Length``. One thread serves each connection; connections
are kept alive between requests.

Checked here, before the app sees the request:

- ``Transfer-Encoding`` (chunked bodies): 411, send ``Content-Length`` instead.
- a malformed ``Content-Length``: 400, and the connection is closed (the body is not read).
- a ``Content-Length`` above ``max_body_bytes`` (64 KiB): 413. A body up to 1 MiB is read and
  dropped first, so the client surely receives the 413; a larger one is not read, and the
  connection is closed after the answer.
- malformed request lines and headers (the standard library's checks): a problem JSON body.

Each answered request is logged as one line to the ``sandbox_acquirer`` logger: method,
path (without query string), status and elapsed milliseconds. Headers are never logged, so
neither is the bearer API key.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from sandbox_acquirer.app import Request, Response, SandboxApp, problem_response
from sandbox_acquirer.scenarios import DEFAULT_HANG_SECONDS, ScenarioSettings
from sandbox_acquirer.store import DEFAULT_IDEMPOTENCY_RETENTION, Clock, SandboxStore, utc_now

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_BODY_BYTES",
    "SandboxConfig",
    "SandboxRequestHandler",
    "SandboxServer",
    "build_server",
]

logger = logging.getLogger("sandbox_acquirer")

#: Loopback only by default: the control endpoints are unauthenticated.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090
#: Largest accepted request body, in bytes (64 KiB).
MAX_BODY_BYTES = 64 * 1024
#: Bodies over the limit but up to this size are read and dropped before the 413.
DRAIN_LIMIT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Everything needed to build a server.

    ``port`` 0 picks a free port. ``api_keys`` are the accepted bearer keys (one account
    each). ``hang_seconds`` is the reply delay of ``tok_timeout_after_commit``;
    ``idempotency_retention`` how long keys are remembered; ``clock`` dates charges and
    decides expiry.
    """

    api_keys: tuple[str, ...]
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    hang_seconds: float = DEFAULT_HANG_SECONDS
    idempotency_retention: timedelta = DEFAULT_IDEMPOTENCY_RETENTION
    max_body_bytes: int = MAX_BODY_BYTES
    clock: Clock = field(default=utc_now)


class SandboxServer(ThreadingHTTPServer):
    """A threading HTTP server carrying the ``SandboxApp`` its handlers call.

    ``stopping`` is set by ``stop()``; scenario waits watch it, so requests that are
    deliberately hanging finish at once on shutdown instead of holding the process.
    """

    daemon_threads = True
    # A deep accept queue: benchmarks open many connections at once, and a dropped SYN costs
    # the client a one-second retransmission.
    request_queue_size = 1024

    def __init__(
        self,
        address: tuple[str, int],
        app: SandboxApp,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        stopping: threading.Event | None = None,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.stopping = stopping or threading.Event()
        super().__init__(address, SandboxRequestHandler)

    @property
    def url(self) -> str:
        """The base URL actually bound, e.g. ``http://127.0.0.1:8090``."""
        host, port = self.server_address[:2]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop serving (call from a thread other than the one in ``serve_forever``)."""
        self.stopping.set()
        self.shutdown()
        self.server_close()


def build_server(config: SandboxConfig) -> SandboxServer:
    """Bind a ``SandboxServer`` for ``config`` (listening, not yet serving).

    Call ``serve_forever()`` (in a thread, say) to start answering and ``stop()`` to end.
    """
    store = SandboxStore(clock=config.clock, idempotency_retention=config.idempotency_retention)
    stopping = threading.Event()
    app = SandboxApp(
        store=store,
        api_keys=config.api_keys,
        scenario_settings=ScenarioSettings(hang_seconds=config.hang_seconds),
        wait=stopping.wait,
    )
    return SandboxServer(
        (config.host, config.port),
        app,
        max_body_bytes=config.max_body_bytes,
        stopping=stopping,
    )


class SandboxRequestHandler(BaseHTTPRequestHandler):
    """Adapts one HTTP/1.1 connection to ``SandboxApp``; see the module docstring."""

    server: SandboxServer
    protocol_version = "HTTP/1.1"
    server_version = "SandboxAcquirer/1.0"
    #: Seconds an idle keep-alive connection (or a stalled read or write) is kept.
    timeout = 60
    # Headers and body go out in two writes; without this, Nagle's algorithm and delayed
    # ACKs add ~40 ms to every response on a kept-alive connection.
    disable_nagle_algorithm = True

    _started: float | None = None
    _generation: int | None = None

    # Every method goes through the app, which answers 404 or 405 itself.
    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def version_string(self) -> str:
        """The ``Server`` header: the sandbox's name, without the Python version."""
        return self.server_version

    def parse_request(self) -> bool:
        self._started = time.monotonic()
        self._generation = self.server.app.store.generation
        return super().parse_request()

    def _handle(self) -> None:
        target = urlsplit(self.path)
        transfer_encoding = self.headers.get("Transfer-Encoding")
        raw_length = self.headers.get("Content-Length")
        if transfer_encoding is not None:
            self._finish(
                problem_response(
                    411,
                    "length_required",
                    "Length Required",
                    "Chunked bodies are not supported; send Content-Length.",
                ),
                close=True,
            )
            return
        length = 0
        if raw_length is not None:
            digits = raw_length.strip()
            if not (digits.isascii() and digits.isdigit()):
                self._finish(
                    problem_response(
                        400, "invalid_request", "Bad Request", "Content-Length is malformed."
                    ),
                    close=True,
                )
                return
            length = int(digits)
        if length > self.server.max_body_bytes:
            # Read and drop a moderately large body before answering: closing a socket with
            # unread data sends a TCP reset, and the client could lose the 413 itself.
            drained = length <= DRAIN_LIMIT_BYTES and self._discard(length)
            self._finish(
                problem_response(
                    413,
                    "payload_too_large",
                    "Payload Too Large",
                    f"The body must be at most {self.server.max_body_bytes} bytes.",
                ),
                close=not drained,
            )
            return
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the client went away mid-body: nobody to answer
            self.close_connection = True
            return

        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            name = name.lower()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        request = Request(
            method=self.command, path=target.path, query=target.query, headers=headers, body=body
        )
        try:
            response = self.server.app.handle(request)
        except Exception:
            logger.exception("unhandled error in %s %s", self.command, _printable(target.path))
            response = problem_response(
                500, "api_error", "Internal Server Error", "The acquirer failed unexpectedly."
            )
        self._finish(response)

    def _discard(self, length: int) -> bool:
        """Read and drop ``length`` body bytes; ``False`` if the client went away first."""
        while length > 0:
            chunk = self.rfile.read(min(length, 64 * 1024))
            if not chunk:
                return False
            length -= len(chunk)
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Answer the standard library's own errors (bad request line, ...) as problem JSON."""
        phrase = self.responses.get(code, ("Error", ""))[0]
        slug = phrase.lower().replace(" ", "_").replace("-", "_")
        if code == 400:
            slug = "invalid_request"
        self._finish(problem_response(code, slug, phrase, message or explain or phrase), close=True)

    def _finish(self, response: Response, *, close: bool = False) -> None:
        """Write ``response``, then log and count it."""
        written = True
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            for name, value in response.headers:
                self.send_header(name, value)
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
            self.wfile.flush()
        except OSError:  # the client closed the connection (after a read timeout, say)
            written = False
            self.close_connection = True
        self._log_and_count(response.status, written)

    def _log_and_count(self, status: int, written: bool) -> None:
        started = self._started if self._started is not None else time.monotonic()
        elapsed_ms = (time.monotonic() - started) * 1000
        path = urlsplit(getattr(self, "path", "") or "").path
        store = self.server.app.store
        generation = self._generation if self._generation is not None else store.generation
        if self.server.app.counts_towards_stats(path):
            store.count_request(status, generation=generation)
        logger.info(
            "%s %s %d %.1fms%s",
            _printable(getattr(self, "command", None) or "-"),
            _printable(path or "-"),
            status,
            elapsed_ms,
            "" if written else " (client gone)",
        )
        # A malformed next request on this connection must not inherit these.
        self.path = ""
        self._started = None
        self._generation = None

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Disabled: ``_finish`` logs each request with its elapsed time instead."""

    def log_message(self, format: str, *args: object) -> None:
        """Route the standard library's messages (timeouts) to the logger."""
        logger.warning("%s", _printable(format % args))


def _printable(text: str, limit: int = 200) -> str:
    """``text`` with control and non-ASCII characters replaced, cut to ``limit``: log-safe."""
    cleaned = "".join(char if " " <= char <= "~" else "?" for char in text[:limit])
    return cleaned + ("..." if len(text) > limit else "")
