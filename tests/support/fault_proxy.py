"""An HTTP/1.1 fault proxy for tests, in front of a provider (localstripe, the sandbox): each
request gets the next planned fault, or passes.

    with FaultProxy("127.0.0.1", port) as proxy:
        proxy.plan("drop")                          # forwarded, answer read and dropped, RST
        proxy.plan("reset")                         # not forwarded, RST after the request
        proxy.plan("hang")                          # forwarded, no answer until close()
        proxy.plan(("answer", 429, {"Stripe-Should-Retry": "false"}, b"{...}"))  # not forwarded
        proxy.plan(("answer", 502, {"Content-Type": "text/html"}, b"<html>..."))
        proxy.outage(("answer", 429, {}, b"{}"))    # every request gets it until outage(None)

Every request is read in full (headers and a ``Content-Length`` body), then handled by the next
plan entry (none left: the outage's fault while one is set, else passed). A forwarded request
goes upstream on a connection of its own with ``Connection: close``, and its answer is relayed
whole, after which the client's connection is closed too: one request per connection, so a
fault never lands on a connection a client means to reuse. ``forwarded`` counts requests sent
upstream; ``requests`` every request read, each as ``(method, path)``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Self

from tests.support.lossy_proxy import _reset

__all__ = ["FaultProxy"]

Fault = str | tuple[str, int, dict[str, str], bytes]

_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway"}


class FaultProxy:
    """A loopback HTTP proxy in front of ``upstream_host:upstream_port``; see the module doc."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._plan: list[Fault] = []
        self._outage: Fault | None = None
        self._held: list[socket.socket] = []
        self.forwarded = 0
        self.requests: list[tuple[str, str]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def plan(self, *faults: Fault) -> None:
        """Queue faults for the next requests, in order."""
        with self._lock:
            self._plan.extend(faults)

    def outage(self, fault: Fault | None) -> None:
        """Answer every request without a planned fault with ``fault`` from now on (None: pass
        them again): an outage over a window of time rather than a number of requests."""
        with self._lock:
            self._outage = fault

    def close(self) -> None:
        """Stop accepting and reset every held connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            held, self._held = self._held, []
        for sock in held:
            _reset(sock)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            request = _read_request(client)
        except OSError:
            client.close()
            return
        if request is None:
            client.close()
            return
        head, body = request
        method, path = head.split(b" ", 2)[:2]
        with self._lock:
            self.requests.append((method.decode(), path.decode()))
            fault: Fault = self._plan.pop(0) if self._plan else (self._outage or "pass")
        if isinstance(fault, tuple):
            _, status, headers, content = fault
            lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
            lines += [f"{name}: {value}" for name, value in headers.items()]
            lines += [f"Content-Length: {len(content)}", "Connection: close", "", ""]
            with contextlib.suppress(OSError):
                client.sendall("\r\n".join(lines).encode("latin-1") + content)
            client.close()
            return
        if fault == "reset":
            _reset(client)
            return
        try:
            answer = self._forward(head, body)
        except OSError:
            _reset(client)
            return
        if fault == "drop":
            _reset(client)
        elif fault == "hang":
            with self._lock:
                self._held.append(client)
        else:
            with contextlib.suppress(OSError):
                client.sendall(answer)
            client.close()

    def _forward(self, head: bytes, body: bytes) -> bytes:
        lines = [
            line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")
        ]
        outgoing = b"\r\n".join([*lines, b"Connection: close", b"", b""]) + body
        with socket.create_connection(self._upstream, timeout=30) as upstream:
            upstream.sendall(outgoing)
            with self._lock:
                self.forwarded += 1
            chunks = []
            while chunk := upstream.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def _read_request(sock: socket.socket) -> tuple[bytes, bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[:length]
