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
- an outage or flapping window failing with ``"refused"``: the connection is reset before the
  body is read (a real ECONNREFUSED would need the listening socket closed, which would take
  the control API down with it).

Responses whose ``action`` is ``reset`` or ``refused`` end the connection with a TCP RST (no
answer; ``SO_LINGER`` 0), ``close`` with a FIN (no answer). A response with
``trickle_seconds_per_byte`` is sent headers first, then its body one byte at a time.

The server also feeds the store's live gauges (open connections) and the arrival counters
(per 100 ms bucket, per Idempotency-Key of every acquirer POST: charges, captures, voids,
refunds) of requests to the acquirer API.

Each answered request is logged as one line to the ``sandbox_acquirer`` logger: method,
path (without query string), status and elapsed milliseconds. Headers are never logged, so
neither is the bearer API key.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sandbox_acquirer.app import (
    Request,
    Response,
    SandboxApp,
    problem_response,
    valid_idempotency_key,
)
from sandbox_acquirer.conditions import ConditionSet
from sandbox_acquirer.journal import Journal
from sandbox_acquirer.notifications import NotificationTarget
from sandbox_acquirer.scenarios import (
    DEFAULT_HANG_SECONDS,
    DEFAULT_TRICKLE_SECONDS_PER_BYTE,
    ScenarioSettings,
)
from sandbox_acquirer.store import (
    DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_MAX_ARRIVAL_BUCKETS,
    DEFAULT_MAX_TRACKED_KEYS,
    Clock,
    SandboxStore,
    utc_now,
)

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
    ``trickle_seconds_per_byte`` the pace of ``tok_trickle``; ``idempotency_retention`` how
    long keys are remembered; ``clock`` dates charges and decides expiry and windows;
    ``conditions`` the command line's acquirer-wide conditions (name -> JSON object), applied
    at start and again after every reset; ``max_tracked_keys`` and ``max_arrival_buckets``
    bound the store's memory; ``data_dir`` (None: memory only) keeps the records in a journal
    there across restarts (``sandbox_acquirer/journal.py``); ``notification``: where to send
    signed notifications from the start (None: nowhere until ``PUT /_sandbox/notifications``).
    """

    api_keys: tuple[str, ...]
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    hang_seconds: float = DEFAULT_HANG_SECONDS
    trickle_seconds_per_byte: float = DEFAULT_TRICKLE_SECONDS_PER_BYTE
    idempotency_retention: timedelta = DEFAULT_IDEMPOTENCY_RETENTION
    max_body_bytes: int = MAX_BODY_BYTES
    clock: Clock = field(default=utc_now)
    conditions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_tracked_keys: int = DEFAULT_MAX_TRACKED_KEYS
    max_arrival_buckets: int = DEFAULT_MAX_ARRIVAL_BUCKETS
    data_dir: Path | None = None
    notification: NotificationTarget | None = None


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
        self.app.notifier.stop()
        self.shutdown()
        self.server_close()


def build_server(config: SandboxConfig) -> SandboxServer:
    """Bind a ``SandboxServer`` for ``config`` (listening, not yet serving).

    Call ``serve_forever()`` (in a thread, say) to start answering and ``stop()`` to end.
    """
    store = SandboxStore(
        clock=config.clock,
        idempotency_retention=config.idempotency_retention,
        max_tracked_keys=config.max_tracked_keys,
        max_arrival_buckets=config.max_arrival_buckets,
        journal=None if config.data_dir is None else Journal(config.data_dir),
    )
    stopping = threading.Event()
    app = SandboxApp(
        store=store,
        api_keys=config.api_keys,
        scenario_settings=ScenarioSettings(
            hang_seconds=config.hang_seconds,
            trickle_seconds_per_byte=config.trickle_seconds_per_byte,
        ),
        conditions=ConditionSet(config.conditions),
        wait=stopping.wait,
    )
    app.notifier.configure(config.notification)
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

    def setup(self) -> None:
        super().setup()
        self.server.app.store.connection_opened()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.app.store.connection_closed()

    def parse_request(self) -> bool:
        self._started = time.monotonic()
        self._generation = self.server.app.store.generation
        return super().parse_request()

    def _handle(self) -> None:
        target = urlsplit(self.path)
        app = self.server.app
        if app.counts_towards_stats(target.path):
            key = None
            if self.command == "POST" and app.endpoint_label("POST", target.path) != "other":
                key = valid_idempotency_key(self.headers.get("Idempotency-Key"))
            app.store.count_arrival(
                generation=self._generation if self._generation is not None else -1,
                idempotency_key=key,
            )
        if app.refuses_connection(self.command, target.path):
            self._count("refused")
            self._drop("refused")
            self._log("refused", written=False)
            return
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
        """Write ``response`` (or drop the connection, as its ``action`` says), count and log it.

        It is counted *before* it is written (a trickled body excepted: when its last byte has
        been sent or the client has gone), so a client that reads the answer and then asks
        ``/_sandbox/stats`` always finds it counted; a write that fails because the client
        left is counted under its status all the same."""
        if not response.answered:
            self._count(response.action)
            self._drop(response.action)
            self._log(response.action, written=False)
            return
        trickled = response.trickle_seconds_per_byte > 0
        if not trickled:
            self._count(response.status)
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
                if response.trickle_seconds_per_byte > 0:
                    written = self._trickle(response.body, response.trickle_seconds_per_byte)
                else:
                    self.wfile.write(response.body)
            self.wfile.flush()
        except OSError:  # the client closed the connection (after a read timeout, say)
            written = False
        if not written:
            self.close_connection = True
        if trickled:
            self._count(response.status)
        self._log(response.status, written)

    def _trickle(self, body: bytes, seconds_per_byte: float) -> bool:
        """Send ``body`` one byte per ``seconds_per_byte``; ``False`` if cut short (the
        client left, or the server is stopping)."""
        self.wfile.flush()
        for index in range(len(body)):
            if index and self.server.stopping.wait(seconds_per_byte):
                return False
            self.wfile.write(body[index : index + 1])
            self.wfile.flush()
        return True

    def _drop(self, action: str) -> None:
        """End the connection without an answer: RST for ``reset``/``refused``, FIN for
        ``close``."""
        self.close_connection = True
        if action in ("reset", "refused"):
            try:
                # Linger 0: close() sends a RST instead of a FIN. The descriptor really closes
                # when finish() drops the socket's file objects, before anything else is sent.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
            except OSError:
                pass

    def _count(self, status: int | str) -> None:
        """Count the current request's outcome (an HTTP status or an unanswered kind) if it
        went to the acquirer API."""
        path = urlsplit(getattr(self, "path", "") or "").path
        store = self.server.app.store
        generation = self._generation if self._generation is not None else store.generation
        command = getattr(self, "command", None) or "-"
        app = self.server.app
        if app.counts_towards_stats(path):
            store.count_request(
                status, generation=generation, endpoint=app.endpoint_label(command, path)
            )

    def _log(self, status: int | str, written: bool) -> None:
        """Log the current request (method, path, status, elapsed ms) and forget it."""
        started = self._started if self._started is not None else time.monotonic()
        elapsed_ms = (time.monotonic() - started) * 1000
        path = urlsplit(getattr(self, "path", "") or "").path
        command = getattr(self, "command", None) or "-"
        if isinstance(status, str):
            note = f" (connection {status}, no answer)"
        else:
            note = "" if written else " (client gone)"
        logger.info(
            "%s %s %s %.1fms%s",
            _printable(command),
            _printable(path or "-"),
            status if isinstance(status, int) else "-",
            elapsed_ms,
            note,
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
