"""The Redis of the test suite: ``REDIS_URL`` when set (CI: the machine's server), otherwise
the embedded server of ``devtools/embedded_redis.py`` (database 15), started on first use.

Every test that needs Redis takes its URL from here, through the ``redis_url`` fixture of
tests/conftest.py; none names a host or port of its own.

Under pytest-xdist (``make test`` runs ``-n``) each worker has a database of its own, so no
worker's keys, queues or ``FLUSHDB`` reach another's: worker ``gwN`` uses ``REDIS_URL``'s
database plus N (``redis://host:6379/8`` gives gw0 8, gw1 9, ...), or the embedded server's
database 15 minus N (15, 14, ...; 0 and 1 are ``make run``'s). A run without xdist is worker 0.
"""

from __future__ import annotations

import functools
import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

from devtools.embedded_redis import (
    ACQUIRER_STATE_DB,
    TOOLS_DB,
    celery_broker_url,
    embedded_redis,
)

#: Databases a Redis server has unless configured otherwise (``databases 16``).
REDIS_DATABASES = 16


def configured_redis_url() -> str | None:
    """``REDIS_URL`` from the environment, or None when unset or empty."""
    return os.environ.get("REDIS_URL") or None


def xdist_worker_index() -> int:
    """N for the pytest-xdist worker ``gwN`` (``PYTEST_XDIST_WORKER``), 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def url_database(url: str) -> int:
    """The database number of a redis-py URL (``/N`` in the path or ``?db=N``; default 0)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if "db" in query:
        return int(query["db"])
    path = parts.path.strip("/") if parts.scheme in ("redis", "rediss") else ""
    return int(path) if path else 0


def with_database(url: str, db: int) -> str:
    """``url`` naming database ``db`` instead (path for ``redis://``, ``?db=`` for ``unix://``)."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme in ("redis", "rediss") and "db" not in query:
        return urlunsplit(parts._replace(path=f"/{db}"))
    query["db"] = str(db)
    # Not urlunsplit: it drops the empty authority of ``unix:///path`` (``unix:/path``).
    return f"{url.partition('?')[0]}?{urlencode(query, safe='/')}"


def worker_redis_url(url: str, worker: int, *, embedded: bool = False) -> str:
    """The URL of worker ``worker``'s database: ``url``'s database plus ``worker``, or for the
    embedded server minus ``worker``. Raises ``AssertionError`` when that leaves the server's
    databases (too many workers for that base database)."""
    base = url_database(url)
    db = base - worker if embedded else base + worker
    lowest = ACQUIRER_STATE_DB + 1 if embedded else 0
    if not lowest <= db < REDIS_DATABASES:
        raise AssertionError(
            f"xdist worker gw{worker} would use Redis database {db} of {url}, outside "
            f"{lowest}..{REDIS_DATABASES - 1}: run fewer workers (-n)"
            + ("" if embedded else ", or set REDIS_URL to a lower database")
        )
    return with_database(url, db)


@functools.cache
def suite_redis_url() -> str:
    """The redis-py URL this test process uses: ``REDIS_URL`` (else the embedded server's
    database 15), moved to this xdist worker's database (module docstring).

    Resolved once per session (cached). Raises ``RuntimeError`` when the embedded server cannot
    start, and ``AssertionError`` with the URL when that Redis does not answer ``PING``.
    """
    configured = configured_redis_url()
    base = configured or embedded_redis().url(TOOLS_DB)
    url = worker_redis_url(base, xdist_worker_index(), embedded=configured is None)
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
