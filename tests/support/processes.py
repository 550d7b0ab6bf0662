"""Helpers for tests that run the service's own processes (gunicorn, Celery) as subprocesses."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx
from django.db import connection

from tests.support.redis import suite_broker_url, suite_redis_url

ROOT = Path(__file__).resolve().parents[2]

#: The web process as the Procfile runs it, with the interpreter running the tests.
GUNICORN = [
    sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi:application",
]  # fmt: skip
#: One Celery worker process, no extras that slow its start.
CELERY_WORKER = [
    sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo",
    "--loglevel", "INFO", "--without-heartbeat", "--without-gossip", "--without-mingle",
]  # fmt: skip


#: How long a test waits for a process it started to answer: generous, since make test runs
#: three workers on two cores beside the campaigns, where a gunicorn worker's import of Django
#: took 25 s once (a start-up wait, not a speed claim: a healthy start takes 2-5 s).
STARTUP_SECONDS = 120


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url_for_subprocess() -> str:
    """A ``DATABASE_URL`` naming the test database this session created (TCP or Unix socket)."""
    s = connection.settings_dict
    auth = quote(s["USER"] or "postgres") + (f":{quote(s['PASSWORD'])}" if s["PASSWORD"] else "")
    host = s["HOST"] or ""
    if host.startswith("/"):  # the embedded server's Unix socket directory
        return f"postgresql://{auth}@/{s['NAME']}?host={quote(host)}"
    return f"postgresql://{auth}@{host}:{s['PORT'] or 5432}/{s['NAME']}"


def service_env(**overrides: str | None) -> dict[str, str]:
    """The environment for a subprocess of the service pointed at the test database.

    Unless the environment or ``overrides`` say otherwise, its Celery broker is the suite's
    Redis (tests/support/redis.py) with a queue of its own, and its acquirer state is in
    memory, per process (``ACQUIRER_STATE_REDIS_URL`` empty), so no test reaches the broker or
    state of a ``make run`` on this machine; its merchants have no limits. An override of
    ``None`` removes the variable (``CELERY_BROKER_URL=None``: the subprocess falls back on the
    embedded Redis).
    """
    env = {
        "CELERY_BROKER_URL": suite_broker_url(suite_redis_url()),
        "CELERY_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}",
        "ACQUIRER_STATE_REDIS_URL": "",
        # No per-merchant limits (payments/api/limits.py) unless a test sets them: the storms and
        # campaigns send one merchant's requests faster and more at once than the defaults.
        "MERCHANT_RATE_LIMIT_REQUESTS": "0",
        "MERCHANT_CONCURRENT_PAYMENTS": "0",
        # Nor a limit on failed authentications per address: every test client is 127.0.0.1.
        "API_AUTH_FAILURE_LIMIT": "0",
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "false",
        "DATABASE_URL": database_url_for_subprocess(),
        "PYTHONUNBUFFERED": "1",
        **overrides,
    }
    return {name: value for name, value in env.items() if value is not None}


def wait_until(
    condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll ``condition`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def answers_healthz(url: str) -> bool:
    """Whether the service at ``url`` answers ``GET /healthz`` with 200 (for ``wait_until``)."""
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def created_merchants(output: str) -> list[tuple[int, str]]:
    """(merchant id, raw API key) for each merchant in ``manage.py create_merchant``'s
    ``output``, in order: the id from its ``(id N)`` line, the key from the line after its
    ``API key`` line. Raises ``AssertionError`` (naming counts, never a key) when the two do not
    pair up."""
    lines = output.strip().splitlines()
    ids = [int(m.group(1)) for line in lines if (m := re.search(r"\(id (\d+)\)", line))]
    keys = [lines[i + 1].strip() for i, line in enumerate(lines[:-1]) if line.startswith("API key")]
    assert ids and len(ids) == len(keys), (
        f"create_merchant printed {len(ids)} ids, {len(keys)} keys"
    )
    return list(zip(ids, keys, strict=True))
