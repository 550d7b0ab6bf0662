"""
The acquirer client's default transport: httpx's connection pool, one per group of threads.

A web process holds a hundred acquirer calls in flight while the acquirer thinks (ADR 0048),
each on a connection of its own, kept open for the next call (ADR 0054). httpcore's
`ConnectionPool` walks every connection it holds twice per request, under one lock, and for
each idle one checks its socket with a system call; it also recounts the idle connections for
each idle connection (quadratic; encode/httpcore pull request 1035, open). A request through
a pool holding 128 idle connections cost 0.58 ms more CPU than through a pool holding one,
and at a 1 s acquirer the web workers spent 2.7 ms more per payment with one pool, their
threads queueing on its lock (ADR 0055; docs/benchmarks.md, "2026-12-04, late").

`ShardedTransport` keeps the library and bounds the walk: ``shards`` pools, each thread sent
to one of them (assigned in turn at its first call, then always the same), so a pool holds
the connections of a few threads. A thread makes one call at a time, so with ``T`` threads a
pool holds at most ``ceil(T / shards)`` connections in use. Every pool has the same limits:
no cap on connections (the client's concurrency limiter bounds the calls) and
``keep_alive_per_shard`` kept open 5 s between calls (httpx's keep-alive expiry).
"""

from __future__ import annotations

import itertools
import threading

import httpx

from resilience import deadline as _deadline

__all__ = ["CONNECTION_POOL_SHARDS", "KEEP_ALIVE_PER_SHARD", "ShardedTransport"]

#: Pools per client, and connections each keeps open between calls: 32 x 8 = 256, a web
#: process's threads (ADR 0054), with no pool above 8 connections while threads <= 256.
CONNECTION_POOL_SHARDS = 32
KEEP_ALIVE_PER_SHARD = 8


class ShardedTransport(httpx.BaseTransport):
    """``shards`` `httpx.HTTPTransport` pools (no proxies, certificates or .netrc from the
    environment: the client is handed its configuration), a thread's requests always going to
    the same one. `deadline_sockets` is True when every pool's sockets honour the current
    attempt's deadline (`resilience.deadline.install`). Thread-safe. Raises ``ValueError``
    for a count below 1."""

    def __init__(
        self, shards: int = CONNECTION_POOL_SHARDS, keep_alive_per_shard: int = KEEP_ALIVE_PER_SHARD
    ) -> None:
        if shards < 1 or keep_alive_per_shard < 1:
            raise ValueError("shards and keep_alive_per_shard must be at least 1")
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=keep_alive_per_shard)
        # One TLS context for all (loading the certificate bundle takes ~15 ms a context).
        tls = httpx.create_ssl_context(trust_env=False)
        self._pools = [
            httpx.HTTPTransport(verify=tls, trust_env=False, limits=limits) for _ in range(shards)
        ]
        self.deadline_sockets = all([_deadline.install(pool) for pool in self._pools])
        self._next = itertools.count()  # next() is atomic under the GIL
        self._local = threading.local()

    def _pool(self) -> httpx.HTTPTransport:
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = self._pools[next(self._next) % len(self._pools)]
        return pool

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on this thread's pool (`httpx.BaseTransport`)."""
        return self._pool().handle_request(request)

    def close(self) -> None:
        """Close every pool's connections."""
        for pool in self._pools:
            pool.close()
