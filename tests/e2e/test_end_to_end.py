"""End to end over real HTTP: gunicorn serving the API and the sandbox acquirer, each its own
process, on free ports, against the test database; merchants made by ``create_merchant``."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from idempotency.models import IdempotencyKey
from tests.support.processes import (
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    created_merchants,
    free_port,
    service_env,
    wait_until,
)
from tests.support.sandbox import SandboxProcess

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

BODY = {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa", "reference": "e2e"}


@pytest.fixture
def stack(transactional_db, tmp_path) -> Iterator[dict]:
    """The sandbox and gunicorn as subprocesses; yields their URLs and the environment."""
    with SandboxProcess.start() as sandbox:
        port = free_port()
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="2",
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
            ACQUIRER_RETRY_MAX_ATTEMPTS="1",  # one attempt: ambiguous answers stay 202 here
            ACQUIRER_READ_TIMEOUT_SECONDS="2",
            LOG_FORMAT="json",  # what production writes: every line below must parse
        )
        log = (tmp_path / "gunicorn.log").open("w")
        web = subprocess.Popen(
            GUNICORN,
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + STARTUP_SECONDS
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert web.poll() is None, (tmp_path / "gunicorn.log").read_text()
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.1)
            yield {"url": url, "sandbox": sandbox, "env": env, "log": tmp_path / "gunicorn.log"}
        finally:
            web.terminate()
            try:
                web.wait(10)
            except subprocess.TimeoutExpired:
                web.kill()
            log.close()


def create_merchants(env: dict, *names: str) -> list[str]:
    """Run ``manage.py create_merchant NAME ...`` once and return each merchant's key."""
    result = subprocess.run(
        [sys.executable, "manage.py", "create_merchant", *names],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return [key for _, key in created_merchants(result.stdout)]


def pay(url: str, api_key: str, key: str, **changes) -> httpx.Response:
    return httpx.post(
        f"{url}/payments",
        json={**BODY, **changes},
        headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": key},
        timeout=30,
    )


def test_payments_end_to_end(stack):
    """Approve, decline, replay, 422, 409, timeout and 500 after commit, merchant scoping, and
    two Idempotency-Key fields refused."""
    url, sandbox = stack["url"], stack["sandbox"]
    key_a, key_b = create_merchants(
        stack["env"], f"e2e-a-{uuid.uuid4().hex[:6]}", f"e2e-b-{uuid.uuid4().hex[:6]}"
    )
    assert key_a.startswith("sk_test_")  # local settings: ADR 0039

    approved = pay(url, key_a, "e2e-1")
    assert approved.status_code == 201 and approved.json()["status"] == "succeeded"
    replay = pay(url, key_a, "e2e-1")
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.content == approved.content
    assert pay(url, key_a, "e2e-1", amount=2000).status_code == 422

    declined = pay(url, key_a, "e2e-2", payment_method="tok_decline")
    assert declined.status_code == 201 and declined.json()["decline_code"] == "do_not_honor"

    unknown = pay(url, key_a, "e2e-3", payment_method="tok_timeout_after_commit", reference="t")
    assert unknown.status_code == 202 and unknown.json()["status"] == "processing"
    assert sandbox.stats()["charges_by_reference"][unknown.json()["id"]] == 1
    retried = pay(url, key_a, "e2e-3", payment_method="tok_timeout_after_commit", reference="t")
    assert retried.json()["id"] == unknown.json()["id"]
    assert sandbox.stats()["charges_by_reference"][unknown.json()["id"]] == 1

    failed_500 = pay(url, key_a, "e2e-4", payment_method="tok_500_after_commit")
    assert failed_500.status_code == 202
    assert pay(url, key_a, "e2e-4", payment_method="tok_500_after_commit").status_code == 201
    assert sandbox.stats()["charges_by_reference"][failed_500.json()["id"]] == 1

    results: dict[str, httpx.Response] = {}
    slow = threading.Thread(
        target=lambda: results.setdefault(
            "first", pay(url, key_a, "e2e-5", payment_method="tok_slow_1500")
        )
    )
    slow.start()
    wait_until(
        IdempotencyKey.objects.filter(key="e2e-5").exists, timeout=10, what="the first claim"
    )
    conflict = pay(url, key_a, "e2e-5", payment_method="tok_slow_1500")
    slow.join()
    assert conflict.status_code == 409 and conflict.headers["Retry-After"] == "1"
    assert results["first"].status_code == 201

    assert (
        httpx.get(
            f"{url}/payments/{approved.json()['id']}", headers={"Authorization": f"Bearer {key_b}"}
        ).status_code
        == 404
    )
    listed = httpx.get(f"{url}/payments", headers={"Authorization": f"Bearer {key_a}"}).json()
    assert len(listed["data"]) == 5
    assert sandbox.stats()["charges_total"] == 5
    # Two Idempotency-Key fields reach Django joined by a comma (gunicorn, as RFC 9110 allows):
    # they name no single key, so the answer is a 400 and nothing is stored or charged.
    keys_before = IdempotencyKey.objects.count()
    repeated = httpx.post(
        f"{url}/payments",
        json=BODY,
        headers=[
            ("Authorization", f"Bearer {key_a}"),
            ("Idempotency-Key", "e2e-first"),
            ("Idempotency-Key", "e2e-second"),
        ],
        timeout=10,
    )
    assert repeated.status_code == 400, repeated.text
    assert repeated.headers["content-type"] == "application/problem+json"
    assert repeated.json()["code"] == "idempotency_key_invalid"
    assert IdempotencyKey.objects.count() == keys_before
    assert sandbox.stats()["charges_total"] == 5


def test_card_numbers_and_keys_in_urls_never_reach_the_logs(stack):
    """A card number or an API key in a URL or header is redacted from gunicorn's and Django's
    logs, and a card-like Idempotency-Key is refused before it is stored."""
    url, log_path = stack["url"], stack["log"]
    (key,) = create_merchants(stack["env"], f"e2e-logs-{uuid.uuid4().hex[:6]}")
    auth = {"Authorization": f"Bearer {key}"}
    httpx.get(f"{url}/payments/4111111111111111", headers=auth, timeout=10)
    httpx.get(f"{url}/payments?reference=5555555555554444&api_key={key}", headers=auth, timeout=10)
    refused = httpx.post(
        f"{url}/payments",
        json=BODY,
        headers={**auth, "Idempotency-Key": "3782-822463-10005"},
        timeout=10,
    )
    assert refused.status_code == 400
    assert refused.json()["code"] == "card_data_not_accepted"
    assert not IdempotencyKey.objects.exists()
    # Query strings as clients really send them: '+' and %20 for spaces, %2D for dashes.
    for query in (
        "reference=4000+0566+5566+5556",
        "reference=6011%201111%201111%201117",
        "reference=3056%2D9300%2D0902%2D0004",
        f"access_token={key}&limit=1",
    ):
        answer = httpx.get(f"{url}/payments?{query}", headers=auth, timeout=10)
        assert answer.status_code == 400, (query, answer.text)  # a card, or an unknown parameter
    assert httpx.get(f"{url}/payments?limit=1", headers=auth, timeout=10).status_code == 200
    # A request gunicorn refuses before Django (a card number as the HTTP version): its own
    # WARNING on gunicorn.error, redacted too; no access line (it never wrote one for these).
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as raw:
        raw.sendall(b"GET / HTTP/4111111111111111\r\nHost: x\r\n\r\n")
        assert raw.recv(1024).startswith(b"HTTP/1.1 400")
    time.sleep(0.5)  # the worker writes its line after answering
    text = log_path.read_text()
    assert "[card number redacted]" in text  # the lines are there, their secrets are not
    for secret in (
        "4111111111111111",
        "5555555555554444",
        "822463",
        key,
        key[8:],
        # Each query's card as sent, decoded, and as digits (never a 4-digit group alone: one
        # turns up in a timestamp's microseconds now and then).
        "4000+0566+5566+5556",
        "4000 0566 5566 5556",
        "4000056655665556",
        "6011%201111%201111%201117",
        "6011 1111 1111 1117",
        "6011111111111117",
        "3056%2D9300%2D0902%2D0004",
        "3056-9300-0902-0004",
        "3056930009020004",
    ):
        assert secret not in text
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    # One line per request: the request line; gunicorn's access line only for a request the
    # request line does not cover (ADR 0028), and each of these reached Django.
    assert not [line for line in lines if line["logger"] == "gunicorn.access"]
    requests = [line for line in lines if line["logger"] == "payments.request"]
    assert len(requests) >= 8 and {line["status"] for line in requests} >= {200, 400, 404}
    assert all(re.fullmatch(r"req_[a-z2-7]{24}", line["request_id"]) for line in requests)
    assert not [line for line in requests if "?" in f"{line['route']}{line.get('path')}"]
    refused = [line["event"] for line in lines if line["logger"] == "gunicorn.error"]
    assert [event for event in refused if event.startswith("Invalid request from ip=")]
    assert not [line for line in lines if line["level"] == "error"]
