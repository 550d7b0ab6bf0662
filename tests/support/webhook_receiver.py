"""A real webhook receiver on a local socket for the tests: a small threaded HTTP server whose
answers a test scripts per path, and that records every request it gets.

Behaviours (``Receiver.script(path, [...])``, used in order, the last one repeating):
``200``, ``500``, ``410`` (any status code as an int), ``"hang"`` (holds the connection until
``release()`` or the server stops), ``"redirect"`` (302 to another path of this server),
``"close"`` (closes the connection without an answer). ``verify`` checks a recorded delivery
with the ``standardwebhooks`` package's verifier, independent of the service's own signing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock

import standardwebhooks
from standardwebhooks import webhooks as standardwebhooks_module

Behaviour = int | str | bytes  # bytes: answer 200 with exactly these bytes


@dataclass
class Received:
    """One request as the receiver got it."""

    path: str
    headers: dict[str, str]
    body: bytes
    answered: Behaviour
    at: float = field(default_factory=time.monotonic)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Receiver:
    """The server (``url(path)``), its scripts, and what it received (``received``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Behaviour]] = {}
        self._released = threading.Event()
        self.received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                behaviour = receiver._next(self.path)
                with receiver._lock:
                    receiver.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                 body, behaviour)
                    )  # fmt: skip
                if behaviour == "hang":
                    receiver._released.wait(60)
                    self.close_connection = True
                    return
                if behaviour == "close":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if behaviour == "redirect":
                    self.send_response(302)
                    self.send_header("Location", "/redirected")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if isinstance(behaviour, bytes):
                    payload, behaviour = behaviour, 200
                else:
                    payload = b'{"ok": true}' if behaviour == 200 else b"no"
                self.send_response(int(behaviour))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _next(self, path: str) -> Behaviour:
        with self._lock:
            script = self._scripts.get(path, [200])
            return script.pop(0) if len(script) > 1 else script[0]

    def script(self, path: str, behaviours: list[Behaviour]) -> str:
        """Answer requests to ``path`` with ``behaviours`` in order (the last repeats); return
        the path's URL."""
        with self._lock:
            self._scripts[path] = list(behaviours)
        return self.url(path)

    def url(self, path: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def release(self) -> None:
        """Let every hanging request go (they close without an answer)."""
        self._released.set()

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


def verify(secret: str, received: Received, *, now: datetime | None = None) -> dict:
    """Check ``received`` with ``standardwebhooks.Webhook(secret).verify`` and return the
    payload it parsed. ``now``: the instant the verifier takes as now (its 5-minute tolerance)
    when the test's clock is not the wall clock. Raises ``WebhookVerificationError``."""
    webhook = standardwebhooks.Webhook(secret)
    if now is None:
        return webhook.verify(received.body, received.headers)

    class _At(datetime):
        @classmethod
        def now(cls, tz=None):  # the verifier's only use of the clock
            return now.astimezone(tz or UTC)

    with mock.patch.object(standardwebhooks_module, "datetime", _At):
        return webhook.verify(received.body, received.headers)
