"""The Redis of the test suite: ``REDIS_URL`` when set (CI: the machine's server), otherwise
the embedded server of ``devtools/embedded_redis.py`` (database 15), started on first use.

Every test that needs Redis takes its URL from here, through the ``redis_url`` fixture of
tests/conftest.py; none names a host or port of its own.
"""

from __future__ import annotations

import functools
import os

import redis

from devtools.embedded_redis import TOOLS_DB, celery_broker_url, embedded_redis


def configured_redis_url() -> str | None:
    """``REDIS_URL`` from the environment, or None when unset or empty."""
    return os.environ.get("REDIS_URL") or None


@functools.cache
def suite_redis_url() -> str:
    """The redis-py URL the suite uses (``REDIS_URL``, else the embedded server's database 15).

    Resolved once per session (cached). Raises ``RuntimeError`` when the embedded server cannot
    start, and ``AssertionError`` with the URL when that Redis does not answer ``PING``.
    """
    url = configured_redis_url() or embedded_redis().url(TOOLS_DB)
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, OSError) as exc:
        raise AssertionError(
            f"the suite's Redis does not answer at {url} ({exc}): start it, or unset REDIS_URL "
            "to use the embedded server"
        ) from exc
    return url


def suite_broker_url(redis_url: str) -> str:
    """``redis_url`` as a Celery broker URL (kombu spells a Unix socket differently)."""
    return celery_broker_url(redis_url)
