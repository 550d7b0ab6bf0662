"""A webhook receiver that holds requests open until the test lets them go, and counts them.

For the tests of many deliveries in flight (ADR 0050): each endpoint is a path ``/<group>/...``;
a group marked with :meth:`HoldingReceiver.hold` keeps every request it gets open until
:meth:`HoldingReceiver.release` (then answers ``200``), any other group answers ``200`` at once.
Per group it counts the requests held now, the most ever held at once (``peak``) and the
webhook ids answered, so a test asserts overlap and caps by counts, never by time.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class HoldingReceiver:
    """The server; ``url(group, name)`` is an endpoint of ``group``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[str, threading.Event] = {}
        self._held: Counter[str] = Counter()
        self._peak: Counter[str] = Counter()
        self._answered: defaultdict[str, list[str]] = defaultdict(list)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                group = self.path.split("/")[1]
                with receiver._lock:
                    gate = receiver._gates.get(group)
                    receiver._held[group] += 1
                    receiver._peak[group] = max(receiver._peak[group], receiver._held[group])
                try:
                    if gate is not None:
                        gate.wait(120)
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    try:
                        self.wfile.write(b"{}")
                    except OSError:  # the sender gave up (a killed worker): not answered
                        self.close_connection = True
                        return
                    with receiver._lock:
                        receiver._answered[group].append(self.headers["webhook-id"])
                finally:
                    with receiver._lock:
                        receiver._held[group] -= 1

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, group: str, name: str = "0") -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/{group}/{name}"

    def hold(self, group: str) -> None:
        """Keep the requests ``group`` gets open until :meth:`release`."""
        with self._lock:
            self._gates[group] = threading.Event()

    def release(self, group: str | None = None) -> None:
        """Answer ``group``'s held requests (every group's without one) and the ones to come."""
        with self._lock:
            gates = [self._gates.pop(group)] if group in self._gates else []
            if group is None:
                gates, self._gates = list(self._gates.values()), {}
        for gate in gates:
            gate.set()

    def held(self, group: str) -> int:
        with self._lock:
            return self._held[group]

    def held_in_all(self) -> int:
        with self._lock:
            return sum(self._held.values())

    def peak(self, group: str) -> int:
        with self._lock:
            return self._peak[group]

    def answered(self, group: str) -> list[str]:
        """The webhook ids ``group`` answered ``200``, in order."""
        with self._lock:
            return list(self._answered[group])


@contextlib.contextmanager
def holding_receiver() -> Iterator[HoldingReceiver]:
    receiver = HoldingReceiver()
    receiver._thread.start()
    try:
        yield receiver
    finally:
        receiver.release()
        receiver._server.shutdown()
        receiver._server.server_close()
