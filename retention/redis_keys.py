"""The per-endpoint webhook breakers in Redis: a key per endpoint ever made, so the ones of
deleted (or purged) endpoints are deleted here.

A breaker lives at ``<WEBHOOK_STATE_NAMESPACE>:breaker:webhooks:<endpoint id>`` (resilience's
``breaker:<name>:<group>`` under the store's namespace, webhooks.delivery.endpoint_breaker).
The purge walks those keys with ``SCAN`` (never ``KEYS``: no long block of Redis), asks
PostgreSQL which of their endpoints are live, and ``UNLINK``s the rest. A key re-made by an
attempt that raced a deletion is found on the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import redis

BREAKER_PREFIX = "breaker:webhooks:"


def _glob_escaped(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def webhook_breaker_keys_purge(
    client: redis.Redis,
    *,
    namespace: str,
    live_endpoint_ids: Callable[[list[str]], Iterable[str]],
    scan_count: int = 500,
) -> int:
    """Delete the breaker keys under ``namespace`` whose endpoint ``live_endpoint_ids`` does
    not return (it is given the ids of one ``SCAN`` page, at most about ``scan_count``);
    return how many keys were deleted. Raises ``redis.RedisError``."""
    prefix = f"{namespace}:{BREAKER_PREFIX}"
    pattern = _glob_escaped(prefix) + "*"
    removed = 0
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor=cursor, match=pattern, count=scan_count)
        names = [key.decode() if isinstance(key, bytes) else key for key in keys]
        if names:
            ids = [name[len(prefix) :] for name in names]
            live = set(live_endpoint_ids(ids))
            gone = [name for name, id_ in zip(names, ids, strict=True) if id_ not in live]
            if gone:
                removed += client.unlink(*gone)
        if cursor == 0:
            return removed
