"""Slow clients do not hold the web tier: behind the documented proxy (deploy/nginx/, Debian's
nginx running the same server block), connections that never finish their headers leave
``/healthz`` answering, while the same connections straight to gunicorn take
every thread (the control that shows the load is real)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from string import Template

import httpx
import pytest

from tests.support.processes import (
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    answers_healthz,
    free_port,
    service_env,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

TEMPLATE = ROOT / "deploy" / "nginx" / "payments.conf.template"
#: More connections than the web tier has threads (1 worker x 4 threads here; the audit held
#: 2 x 4 with 16).
SLOW_CLIENTS = 24


def nginx() -> str:
    """Debian's nginx; absent: skipped here, a failure in CI (.ci/run installs it)."""
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is missing: apt-get install nginx")
        pytest.skip("nginx is not installed (apt-get install nginx)")
    return found


def nginx_conf(directory: Path, *, upstream: str, listen: int) -> Path:
    """A whole nginx.conf around the deployment's server block, rendered as the nginx image
    renders its templates (only the two variables; nginx's own ``$host`` and the rest kept),
    running unprivileged with every path inside ``directory``."""
    server = Template(TEMPLATE.read_text()).safe_substitute(
        WEB_UPSTREAM=upstream, PROXY_LISTEN=f"127.0.0.1:{listen}"
    )
    (directory / "conf.d").mkdir()
    (directory / "conf.d" / "payments.conf").write_text(server)
    conf = directory / "nginx.conf"
    conf.write_text(
        f"daemon off;\nworker_processes 1;\npid {directory}/nginx.pid;\n"
        f"error_log {directory}/error.log warn;\n"
        "events { worker_connections 512; }\n"
        "http {\n"
        f"  access_log off;\n  client_body_temp_path {directory}/body;\n"
        f"  proxy_temp_path {directory}/proxy;\n  fastcgi_temp_path {directory}/fastcgi;\n"
        f"  uwsgi_temp_path {directory}/uwsgi;\n  scgi_temp_path {directory}/scgi;\n"
        f"  include {directory}/conf.d/*.conf;\n"
        "}\n"
    )
    return conf


@contextmanager
def running(command: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            yield
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def slow_clients(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that each send the start of a request and then nothing."""
    with ExitStack() as stack:
        held = []
        for _ in range(count):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            held.append(sock)
        time.sleep(0.5)  # let the server hand each connection to whatever will read it
        yield held


def healthz(port: int, timeout: float) -> int | None:
    """The status of ``GET /healthz`` within ``timeout`` seconds, or None."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=timeout).status_code
    except httpx.TransportError:
        return None


def test_slow_clients_hold_nothing_behind_the_proxy(tmp_path):
    binary = nginx()
    web_port, proxy_port = free_port(), free_port()
    env = service_env(WEB_BIND=f"127.0.0.1:{web_port}", WEB_CONCURRENCY="1", WEB_THREADS="4")
    conf = nginx_conf(tmp_path, upstream=f"127.0.0.1:{web_port}", listen=proxy_port)
    subprocess.run([binary, "-t", "-c", str(conf)], check=True, capture_output=True)
    with (
        running(GUNICORN, tmp_path / "web.log", env),
        running([binary, "-c", str(conf)], tmp_path / "nginx.log"),
    ):
        proxied = f"http://127.0.0.1:{proxy_port}"
        wait_until(lambda: answers_healthz(proxied), timeout=STARTUP_SECONDS, what="the proxy")

        # The control: straight to gunicorn, the slow connections take every thread.
        with slow_clients(web_port, SLOW_CLIENTS):
            assert healthz(web_port, timeout=3) is None

        # Behind the proxy: nginx holds them, gunicorn never sees them.
        with slow_clients(proxy_port, SLOW_CLIENTS):
            answered = [healthz(proxy_port, timeout=10) for _ in range(20)]
        assert answered == [200] * 20
