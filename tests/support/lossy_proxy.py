"""A TCP proxy for tests that forwards each request and can lose its answer (the merchant
client's tests; tests/support/tcp_proxy.py is the one a test cuts).

    with LossyProxy("127.0.0.1", 8000) as proxy:
        proxy.drop_answers(1)        # the next connection: request forwarded, answer dropped
        client = MerchantClient(proxy.url, api_key)
        ...
        proxy.hold_answers(1)        # the next connection: forwarded, no answer, kept open
        proxy.release()              # close the held connections (without an answer)

Each accepted connection gets its own upstream connection and two pump threads. In the
``drop`` mode the upstream's bytes are read (the server has finished: Django sends nothing
before the whole answer is made) and discarded, then the client's socket is reset (RST, like
a load balancer losing the connection), so the client has sent its request and never sees the
answer. In the ``hold`` mode the answer is discarded and the client's socket stays open until
``release()`` (the client waits: its read timeout or a kill ends it). Otherwise bytes pass
unchanged. ``connections`` counts accepted connections; ``dropped`` the answers lost.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType
from typing import Self

__all__ = ["LossyProxy"]


class LossyProxy:
    """A loopback TCP proxy in front of ``upstream_host:upstream_port``; see the module doc."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._plan: list[str] = []
        self._held: list[socket.socket] = []
        self._open: set[socket.socket] = set()
        self.connections = 0
        self.dropped = 0
        self.answered = threading.Event()  # set when a dropped or held answer has arrived
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def drop_answers(self, count: int = 1) -> None:
        """The next ``count`` connections: forward the request, drop the answer, reset."""
        with self._lock:
            self._plan.extend(["drop"] * count)
        self.answered.clear()

    def hold_answers(self, count: int = 1) -> None:
        """The next ``count`` connections: forward the request, never answer, keep open."""
        with self._lock:
            self._plan.extend(["hold"] * count)
        self.answered.clear()

    def release(self) -> None:
        """Reset every held connection."""
        with self._lock:
            held, self._held = self._held, []
        for sock in held:
            _reset(sock)

    def close(self) -> None:
        """Stop accepting and reset every open connection."""
        self._closed = True
        self._listener.close()
        self.release()
        with self._lock:
            open_sockets = list(self._open)
        for sock in open_sockets:
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

    # -- internals -------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                mode = self._plan.pop(0) if self._plan else "pass"
            try:
                upstream = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):  # no 40 ms wait for a delayed ACK between sends
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(
                target=self._answer, args=(upstream, client, mode), daemon=True
            ).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        """Client -> upstream, unchanged."""
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            _shutdown(target)

    def _answer(self, upstream: socket.socket, client: socket.socket, mode: str) -> None:
        """Upstream -> client: unchanged, dropped (then reset) or held."""
        try:
            while chunk := upstream.recv(65536):
                if mode == "pass":
                    client.sendall(chunk)
                    continue
                with self._lock:
                    self.dropped += 1
                self.answered.set()
                if mode == "drop":
                    _reset(client)
                else:
                    with self._lock:
                        self._held.append(client)
                upstream.close()
                return
        except OSError:
            pass
        if mode == "pass":
            _shutdown(client)


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the peer sees 'connection reset', never an answer.

    SHUT_RD first wakes the pump thread blocked in ``recv`` on this socket (on Linux a close
    alone does not, and the connection would live on until the peer gives up)."""
    for step in (
        lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)),
        lambda: sock.shutdown(socket.SHUT_RD),
        sock.close,
    ):
        with contextlib.suppress(OSError):
            step()


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
