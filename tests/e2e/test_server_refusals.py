"""What gunicorn and the proxy refuse before Django answers problem+json too (issue 26):
a generated corpus of malformed request lines and headers, each carrying a card number where
the parser chokes, sent over raw sockets to real gunicorn and to the documented nginx in front
of it. Every answer is an RFC 9457 document whose status is the HTTP status, and none repeats
what was sent."""

from __future__ import annotations

import json
import random
import socket
import subprocess

import pytest

from tests.e2e.test_slow_clients import nginx, nginx_conf, running
from tests.support.processes import (
    GUNICORN,
    STARTUP_SECONDS,
    answers_healthz,
    free_port,
    service_env,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

PAN = "4111111111111111"
SEED = 20261202
HOST = "Host: 127.0.0.1\r\nConnection: close\r\n"


def corpus(rng: random.Random) -> list[tuple[str, bytes]]:
    """(name, raw request) pairs: each malformed in one place, with the card number there."""
    methods = ["G@T", "GE T", f"GET{PAN}(", "P\x00ST", "GET\x7f"]
    versions = [f"HTTP/{PAN}", "HTTP/1.1x", "HTTX/1.1", "HTTP/1", "http/1.1"]
    names = [f"X {PAN}", f"X:{PAN}(", f"\x01{PAN}", f"X@{PAN}", f"[{PAN}]"]
    values = [f"a\x00{PAN}", f"a\x01{PAN}", f"{PAN}\x7f"]
    cases: list[tuple[str, bytes]] = []
    for method in methods:
        cases.append((f"method {method!r}", f"{method} /healthz HTTP/1.1\r\n{HOST}\r\n".encode()))
    for version in versions:
        cases.append((f"version {version!r}", f"GET /healthz {version}\r\n{HOST}\r\n".encode()))
    for name in names:
        line = f"GET /healthz HTTP/1.1\r\n{HOST}{name}: 1\r\n\r\n"
        cases.append((f"header name {name!r}", line.encode()))
    for value in values:
        line = f"GET /healthz HTTP/1.1\r\n{HOST}X-Value: {value}\r\n\r\n"
        cases.append((f"header value {value!r}", line.encode()))
    long_path = "/" + PAN * rng.randint(700, 900)
    cases.append(("request line too long", f"GET {long_path} HTTP/1.1\r\n{HOST}\r\n".encode()))
    many = "".join(f"X-{i}: {PAN}\r\n" for i in range(rng.randint(120, 200)))
    cases.append(("too many headers", f"GET /healthz HTTP/1.1\r\n{HOST}{many}\r\n".encode()))
    big = PAN * rng.randint(1200, 1500)
    cases.append(
        ("header too large", f"GET /healthz HTTP/1.1\r\n{HOST}X-Big: {big}\r\n\r\n".encode())
    )
    folded = f"GET /healthz HTTP/1.1\r\n{HOST}X-Fold: a\r\n {PAN}\r\n\r\n"
    cases.append(("obsolete folding", folded.encode()))
    no_colon = f"GET /healthz HTTP/1.1\r\n{HOST}{PAN}\r\n\r\n"
    cases.append(("header without colon", no_colon.encode()))
    rng.shuffle(cases)
    return cases


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw``, read the answer to the end; (status, headers lower-cased, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data, f"no answer to {raw[:80]!r}"
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def check(port: int, cases: list[tuple[str, bytes]], where: str) -> dict[int, int]:
    statuses: dict[int, int] = {}
    for name, raw in cases:
        status, headers, body = exchange(port, raw)
        if status < 400:  # accepted as a request (a lenient parser): Django answered it
            continue
        what = f"{where}: {name} -> {status} {body[:120]!r}"
        assert headers.get("content-type") == "application/problem+json", what
        document = json.loads(body)
        assert document["status"] == status and document["code"], what
        assert PAN.encode() not in body, what
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


def test_refusals_before_django_are_problem_documents(tmp_path):
    binary = nginx()
    cases = corpus(random.Random(SEED))
    web_port, proxy_port = free_port(), free_port()
    env = service_env(WEB_BIND=f"127.0.0.1:{web_port}", WEB_CONCURRENCY="1")
    conf = nginx_conf(tmp_path, upstream=f"127.0.0.1:{web_port}", listen=proxy_port)
    subprocess.run([binary, "-t", "-c", str(conf)], check=True, capture_output=True)
    with (
        running(GUNICORN, tmp_path / "web.log", env),
        running([binary, "-c", str(conf)], tmp_path / "nginx.log"),
    ):
        for port in (web_port, proxy_port):
            wait_until(lambda p=port: answers_healthz(f"http://127.0.0.1:{p}"),
                       timeout=STARTUP_SECONDS, what=f"port {port}")  # fmt: skip
        direct = check(web_port, cases, "gunicorn")
        proxied = check(proxy_port, cases, "nginx")
    print(f"gunicorn refused {direct}, nginx {proxied} of {len(cases)} requests")
    assert sum(direct.values()) >= len(cases) - 3 and {400, 414, 431} <= set(direct)
    assert sum(proxied.values()) >= len(cases) // 2 and 400 in proxied
