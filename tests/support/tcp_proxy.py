"""A TCP proxy in front of a real server (PostgreSQL, for the outage tests), that a test cuts.

``TcpProxy(upstream)`` listens on ``127.0.0.1:<port>`` and forwards each connection, byte for
byte, to ``upstream``: a ``(host, port)`` pair or the path of a Unix socket (the embedded
PostgreSQL's ``.s.PGSQL.<port>``). Nothing is parsed or faked: the client speaks to the real
server through it. A test then makes the server unreachable, as a network or a crashed server
would::

    with TcpProxy(("127.0.0.1", 5432)) as proxy:
        ...  # point the client at 127.0.0.1:proxy.port
        proxy.cut()                 # live connections reset, new ones refused
        proxy.cut(blackhole=True)   # or: new ones accepted and never answered (a lost route)
        proxy.restore()             # forwarding again

``cut()`` closes every live connection at once (the client's next read fails); afterwards a
new connection is closed as soon as it is accepted, or, with ``blackhole=True``, held open
without a byte forwarded, so only the client's own connect timeout ends its wait.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from types import TracebackType
from typing import Self

Upstream = tuple[str, int] | str


class TcpProxy:
    """A threaded byte-forwarding proxy on loopback; see the module docstring."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._mode = "forward"  # or "refuse", "blackhole"
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._acceptor.start()

    # -- the test's controls --------------------------------------------------------------

    def cut(self, *, blackhole: bool = False) -> None:
        """Reset every live connection; refuse new ones (or, ``blackhole``, never answer)."""
        with self._lock:
            self._mode = "blackhole" if blackhole else "refuse"
            live, self._sockets = self._sockets, set()
        for sock in live:
            _close(sock)

    def restore(self) -> None:
        """Forward new connections again (connections cut stay closed; held ones are closed)."""
        with self._lock:
            self._mode = "forward"
            held, self._sockets = self._sockets, set()
        for sock in held:
            _close(sock)

    def close(self) -> None:
        """Stop listening and close every connection."""
        with self._lock:
            self._closed = True
            live, self._sockets = self._sockets, set()
        _close(self._listener)
        for sock in live:
            _close(sock)

    # -- forwarding -------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                mode = "closed" if self._closed else self._mode
                if mode == "blackhole":
                    self._sockets.add(client)
            if mode in ("refuse", "closed"):
                _close(client)
            elif mode == "forward":
                threading.Thread(
                    target=self._connect, args=(client,), name="tcp-proxy-conn", daemon=True
                ).start()

    def _connect(self, client: socket.socket) -> None:
        try:
            if isinstance(self.upstream, str):
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.connect(self.upstream)
            else:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
                # Bytes leave as they arrive: a second small send does not wait for the ACK
                # of the first, which the other end's delayed ACK holds back 40 ms.
                for sock in (client, server):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            _close(client)
            return
        with self._lock:
            if self._mode != "forward":
                _close(client)
                _close(server)
                return
            self._sockets.update((client, server))
        for source, target in ((client, server), (server, client)):
            threading.Thread(
                target=_pump, args=(source, target), name="tcp-proxy-pump", daemon=True
            ).start()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes until either side closes; then close both (the other pump ends too)."""
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(target)


def _close(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()
