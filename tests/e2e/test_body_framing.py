"""The body acted on is the body sent: over real HTTP to gunicorn, every route that takes a
body refuses one it cannot read in full, and nothing moves.

Under WSGI a body sent with ``Transfer-Encoding: chunked`` arrives empty, and one cut short
arrives short; a capture or refund read as empty runs with its defaults (a refund of 1 would
refund everything). A generated corpus of framings (chunked in one or many chunks, codings in
other spellings, Transfer-Encoding beside Content-Length, lengths longer than the body with
the sending side closed, lengths that are not decimal digits) is sent to every route of the
API with a writing method, each with a body that would move money or create something if it
were read. Afterwards: no payment, operation, key, endpoint or event more, the secrets and the
amounts unchanged, and the sandbox saw nothing. A control then shows the same refund sent with
its length refunds exactly 1.
"""

from __future__ import annotations

import http.client
import itertools
import json
import random
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from idempotency.models import IdempotencyKey
from payments.models import Payment, PaymentEvent, PaymentOperation
from tests.support.processes import (
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    answers_healthz,
    free_port,
    service_env,
    wait_until,
)
from tests.support.sandbox import SandboxProcess
from webhooks.models import Event, WebhookEndpoint

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

#: The writing methods a view may answer; each route's own are read from its view class.
WRITING_METHODS = ("post", "put", "patch", "delete")
SEED = 20261202


@dataclass(frozen=True)
class Framing:
    """How a body is put on the wire: the header lines after the request line and Host, the
    bytes after the blank line, and whether the sending side is closed after them."""

    name: str
    headers: tuple[str, ...]
    payload: bytes
    half_close: bool = False


def chunked(body: bytes, cuts: list[int]) -> bytes:
    """``body`` in RFC 9112 chunked coding, cut at ``cuts``, with the last chunk."""
    edges = [0, *sorted(set(cuts)), len(body)]
    parts = [body[a:b] for a, b in itertools.pairwise(edges) if b > a]
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def framings(body: bytes, rng: random.Random) -> list[Framing]:
    """Every way of sending ``body`` whose length the service cannot know or trust."""
    json_type = "Content-Type: application/json"
    cuts = [rng.randrange(1, len(body)) for _ in range(rng.randrange(1, 4))]
    out = [
        Framing("chunked, one chunk", (json_type, "Transfer-Encoding: chunked"), chunked(body, [])),
        Framing(
            "chunked, several chunks",
            (json_type, "Transfer-Encoding: chunked"),
            chunked(body, cuts),
        ),
        Framing(
            "chunked, one byte a chunk",
            (json_type, "Transfer-Encoding: chunked"),
            chunked(body, list(range(1, len(body)))),
        ),
        Framing(
            "chunked and a Content-Length",
            (json_type, "Transfer-Encoding: chunked", f"Content-Length: {len(body)}"),
            chunked(body, cuts),
        ),
    ]
    for spelling in ("Chunked", "CHUNKED", "gzip, chunked", "identity, chunked", "chunked "):
        out.append(
            Framing(
                f"Transfer-Encoding: {spelling!r}",
                (json_type, f"Transfer-Encoding: {spelling}"),
                chunked(body, cuts),
            )
        )
    for short_by in sorted({1, rng.randrange(2, len(body)), len(body) - 1}):
        out.append(
            Framing(
                f"Content-Length {short_by} over the body, sending side closed",
                (json_type, f"Content-Length: {len(body)}"),
                body[: len(body) - short_by],
                half_close=True,
            )
        )
    for spelling in (f"+{len(body)}", f"{len(body)}.0", f"0x{len(body):x}", f"{len(body)}, 1"):
        out.append(
            Framing(
                f"Content-Length {spelling!r}",
                (json_type, f"Content-Length: {spelling}"),
                body,
            )
        )
    return out


def send_raw(url: str, method: str, path: str, headers: list[str], framing: Framing):
    """Send one request as raw bytes; return ``(status, content type, body)``."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    wire = "\r\n".join([*head, *headers, *framing.headers, "", ""]).encode() + framing.payload
    with socket.create_connection((host, port), timeout=15) as sock:
        sock.sendall(wire)
        if framing.half_close:
            sock.shutdown(socket.SHUT_WR)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        return response.status, response.getheader("Content-Type", ""), response.read()


def writing_routes() -> list[tuple[str, str]]:
    """``(method, route pattern)`` for every API route whose view writes (the admin aside)."""
    found: list[tuple[str, str]] = []

    def walk(patterns, prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                if str(entry.pattern) != "admin/":
                    walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                view = getattr(entry.callback, "view_class", None)
                for method in WRITING_METHODS:
                    if view is not None and hasattr(view, method):
                        found.append((method.upper(), prefix + str(entry.pattern)))

    walk(get_resolver().url_patterns, "")
    return found


@pytest.fixture
def stack(transactional_db, tmp_path) -> Iterator[dict]:
    """The sandbox and gunicorn (the production web server) as subprocesses."""
    with SandboxProcess.start() as sandbox:
        port = free_port()
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="1",
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
        )
        with open(tmp_path / "web.log", "w") as log:
            web = subprocess.Popen(GUNICORN, cwd=ROOT, env=env, stdout=log, stderr=log)
            url = f"http://127.0.0.1:{port}"
            try:
                wait_until(lambda: answers_healthz(url), timeout=STARTUP_SECONDS, what="gunicorn")
                yield {"url": url, "sandbox": sandbox}
            finally:
                web.terminate()
                web.wait(15)


def test_bodies_not_read_in_full_are_refused_and_nothing_moves(stack, merchant_a):
    url, sandbox = stack["url"], stack["sandbox"]
    auth = {"Authorization": f"Bearer {merchant_a.api_key}"}

    def create(key: str, **fields) -> dict:
        body = {"amount": 1000, "currency": "EUR", "payment_method": "tok_visa", **fields}
        answer = httpx.post(
            f"{url}/payments", json=body, headers={**auth, "Idempotency-Key": key}, timeout=30
        )
        assert answer.status_code == 201, answer.text
        return answer.json()

    captured = create("framing-captured")
    authorized = create("framing-authorized", capture_method="manual")
    endpoint = httpx.post(
        f"{url}/webhook_endpoints",
        json={"url": "http://127.0.0.1:9/hook", "enabled_events": ["payment.succeeded"]},
        headers={**auth, "Idempotency-Key": "framing-endpoint"},
        timeout=30,
    ).json()
    ids = {
        "payment_id": captured["id"],
        "endpoint_id": endpoint["id"],
        "refund_id": "re_unknown",
        "event_id": "evt_unknown",
    }
    # What each route would do with the body if it read it: move money or create something.
    bodies = {
        "capture": {"amount": 1},
        "refunds": {"amount": 1, "reason": "requested_by_customer"},
        "void": {"unknown_member": 1},  # an invalid body: it must not pass as empty either
        "rotate_secret": {"expire_current_in_seconds": 0},
        "webhook_endpoints": {"url": "http://127.0.0.1:9/x", "enabled_events": ["*"]},
        "payments": {"amount": 7, "currency": "EUR", "payment_method": "tok_visa"},
    }

    def path_of(route: str) -> str:
        path = "/" + route
        for name, value in ids.items():
            path = path.replace(f"<str:{name}>", value)
        if "/capture" in path or "/void" in path:
            path = path.replace(captured["id"], authorized["id"])
        return path

    def body_for(route: str) -> bytes:
        last = route.rstrip("/").split("/")[-1]
        return json.dumps(bodies.get(last, {"url": "http://127.0.0.1:9/y"})).encode()

    def snapshot() -> dict:
        """Everything a refused request must leave as it was, here and at the acquirer."""
        return {
            "payments": Payment.objects.count(),
            "operations": PaymentOperation.objects.count(),
            "events": PaymentEvent.objects.count(),
            "keys": IdempotencyKey.objects.count(),
            "endpoints": list(WebhookEndpoint.objects.values_list("id", "secret", "status")),
            "webhook events": Event.objects.count(),
            "payment rows": list(Payment.objects.values().order_by("id")),
            "sandbox": sandbox.stats(),
        }

    before = snapshot()
    rng = random.Random(SEED)
    routes = writing_routes()
    assert {route for _, route in routes} >= {
        "payments",
        "payments/<str:payment_id>/capture",
        "payments/<str:payment_id>/void",
        "payments/<str:payment_id>/refunds",
        "webhook_endpoints",
        "webhook_endpoints/<str:endpoint_id>/rotate_secret",
    }
    sent = 0
    for method, route in routes:
        body = body_for(route)
        for framing in framings(body, rng):
            key = f"framing-{uuid.uuid4().hex}"
            headers = [f"Authorization: {auth['Authorization']}", f"Idempotency-Key: {key}"]
            status, content_type, answer = send_raw(url, method, path_of(route), headers, framing)
            sent += 1
            where = f"{method} /{route}, {framing.name}: {status} {answer[:200]!r}"
            assert status in (400, 411), where
            assert content_type == "application/problem+json", where
            code = json.loads(answer)["code"]
            if status == 411:
                assert code == "length_required", where
            else:  # bad_request: gunicorn refused the framing itself (payments/api/server_errors)
                assert code in {"body_incomplete", "invalid_content_length", "bad_request"}, where

    after = snapshot()
    assert after == before
    assert sent >= 16 * len(routes)

    # The control: the refund of 1 sent with its length refunds exactly 1.
    refund = httpx.post(
        f"{url}/payments/{captured['id']}/refunds",
        json={"amount": 1},
        headers={**auth, "Idempotency-Key": "framing-control"},
        timeout=30,
    )
    assert refund.status_code == 201, refund.text
    assert refund.json()["amount"] == 1
    assert [r["amount"] for r in sandbox.refund_listing()] == [1]
