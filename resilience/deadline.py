"""
A whole-exchange deadline for httpx, enforced on every socket read and write.

httpx timeouts apply per read: a server that sends one byte per second never trips a 3 s read
timeout, and a call could run for minutes. `install(transport)` wraps the network backend of an
`httpx.HTTPTransport` so that every stream it opens (new or pooled, plain or TLS) caps each
read's and write's timeout at the time left before the current attempt's deadline, and raises
`httpcore.ReadTimeout` / `WriteTimeout` once it has passed. httpx maps those to
`httpx.ReadTimeout` / `WriteTimeout`, which the client classifies as `ResponseTimeoutError`.

The deadline is per thread of execution (a `ContextVar`), set around one attempt with
`attempt_deadline(seconds_left)`; outside such a block streams behave exactly as before.
Uses real time (`time.monotonic`): it only ever guards real sockets.
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

__all__ = ["attempt_deadline", "install"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "resilience_deadline", default=None
)


@contextlib.contextmanager
def attempt_deadline(seconds_left: float) -> Iterator[None]:
    """Within the block, socket I/O of deadline-aware transports ends `seconds_left` from now."""
    token = _DEADLINE.set(time.monotonic() + max(0.0, seconds_left))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _set_deadline(seconds_left: float) -> contextvars.Token[float | None]:
    """`attempt_deadline` without the context manager (for the client's hot path): set the
    deadline `seconds_left` from now; hand the token back to `_reset_deadline`."""
    return _DEADLINE.set(time.monotonic() + max(0.0, seconds_left))


def _reset_deadline(token: contextvars.Token[float | None]) -> None:
    _DEADLINE.reset(token)


def _capped(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the call's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _capped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, capped))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)

    def __repr__(self) -> str:
        return "<DeadlineStream>"


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, capped, local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        capped = _capped(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, capped, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)

    def __repr__(self) -> str:
        return "<DeadlineBackend>"


def install(transport: httpx.HTTPTransport) -> bool:
    """
    Make `transport`'s connections deadline-aware; returns False if it cannot (then only the
    per-read timeouts and the client's between-chunk checks apply).

    Reaches into httpx's connection pool (`_pool._network_backend`, httpx 0.28 / httpcore 1.x);
    a test over a real trickling socket fails if a new version moves it.
    """
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(pool, httpcore.ConnectionPool) or not isinstance(
        backend, httpcore.NetworkBackend
    ):
        return False
    if not isinstance(backend, _DeadlineBackend):
        pool._network_backend = _DeadlineBackend(backend)
    return True
