"""A shopper's 3-D Secure challenge in a real browser (ADR 0049): Debian's Chromium, headless,
driven by Playwright, against the real stack: gunicorn serving the API and our return
endpoint, the sandbox acquirer and its challenge page, a Celery worker delivering the
merchant's webhooks, and the merchant's own tiny page server for ``return_url``.

Create with ``return_url`` -> follow ``next_action.url`` -> Approve (or Deny) -> land on the
merchant's page with ``payment_id`` -> the payment is ``succeeded`` (``declined``) and the
merchant's webhook receiver got exactly one ``payment.succeeded`` (``payment.declined``) for it.
Or the shopper looks at the challenge and leaves: with a 3 s expiry and Celery beat sweeping
every second, the payment ends ``canceled`` (``action_expired``), its charge is canceled at the
sandbox, and the merchant got exactly one ``payment.canceled``.
Without playwright or Chromium the test is skipped, except under CI (the admin's browser test's
rule, tests/e2e/test_admin_browser.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from merchants.services import merchant_create
from tests.e2e.test_admin_browser import CHROMIUM, CHROMIUM_ARGS, sync_playwright  # noqa: F401
from tests.support.processes import (
    CELERY_WORKER,
    GUNICORN,
    ROOT,
    STARTUP_SECONDS,
    answers_healthz,
    free_port,
    service_env,
    wait_until,
)
from tests.support.sandbox import SandboxProcess
from tests.support.webhook_receiver import running_receiver

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class MerchantPages:
    """The merchant's shop: answers ``GET`` on any path with a small thank-you page and
    records the paths (with their query) it served."""

    def __init__(self) -> None:
        self.visits: list[str] = []
        pages = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                pages.visits.append(self.path)
                body = b"<!doctype html><title>Shop</title><h1 id='thanks'>Thank you</h1>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _started(command: list[str], env: dict[str, str], log) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(15)


@contextmanager
def _stack(tmp_path, *, beat: bool = False, **extra_env: str) -> Iterator[dict]:
    """The sandbox, gunicorn (its PUBLIC_BASE_URL its own address), a Celery worker and, with
    ``beat``, Celery beat; ``extra_env`` on top of the service's test environment."""
    with SandboxProcess.start() as sandbox:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="1",
            PUBLIC_BASE_URL=url,
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
            **extra_env,
        )
        commands = {"web": GUNICORN, "worker": CELERY_WORKER}
        if beat:
            schedule = str(tmp_path / "beat-schedule")
            commands["beat"] = [sys.executable, "-m", "celery", "-A", "config", "beat",
                                "--loglevel", "INFO", "--schedule", schedule]  # fmt: skip
        logs = {name: (tmp_path / f"{name}.log").open("w") for name in commands}
        started = [_started(command, env, logs[name]) for name, command in commands.items()]
        try:
            wait_until(
                lambda: answers_healthz(url), timeout=STARTUP_SECONDS,
                what="gunicorn:\n" + (tmp_path / "web.log").read_text(),
            )  # fmt: skip
            yield {"url": url, "sandbox": sandbox, "logs": tmp_path}
        finally:
            for process in started:
                _stop(process)
            for log in logs.values():
                log.close()


@pytest.fixture
def stack(transactional_db, tmp_path) -> Iterator[dict]:
    """The stack with the default expiry (15 minutes): the shopper has all the time needed."""
    with _stack(tmp_path) as running:
        yield running


@pytest.fixture
def expiring_stack(transactional_db, tmp_path) -> Iterator[dict]:
    """The stack with actions expiring after 3 s and beat sweeping for them every second."""
    with _stack(
        tmp_path, beat=True,
        CUSTOMER_ACTION_EXPIRY_SECONDS="3", CUSTOMER_ACTION_SWEEP_INTERVAL_SECONDS="1",
    ) as running:  # fmt: skip
        yield running


@pytest.mark.timeout(300)  # the stack's start-up alone may take STARTUP_SECONDS under load
@pytest.mark.parametrize(("button", "status", "event"), [
    ("#approve", "succeeded", "payment.succeeded"),
    ("#deny", "declined", "payment.declined"),
])  # fmt: skip
def test_a_shopper_walks_through_the_sandboxs_challenge(
    stack,
    sync_playwright,  # noqa: F811 - the admin browser test's fixture
    button,
    status,
    event,
):
    url = stack["url"]
    _, issued = merchant_create(name=f"shop-{button[1:]}")
    auth = {"Authorization": f"Bearer {issued.raw}"}
    shop = MerchantPages()
    try:
        with running_receiver() as receiver:
            hooks = receiver.script("/hooks", [200])
            endpoint = httpx.post(
                f"{url}/webhook_endpoints", json={"url": hooks, "enabled_events": ["*"]},
                headers={**auth, "Idempotency-Key": f"hook-{button}"}, timeout=30,
            )  # fmt: skip
            assert endpoint.status_code == 201, endpoint.text
            return_url = shop.url("/orders/7/paid?step=3ds")
            created = httpx.post(
                f"{url}/payments",
                json={"amount": 4200, "currency": "EUR", "payment_method": "tok_3ds_challenge",
                      "return_url": return_url},
                headers={**auth, "Idempotency-Key": f"pay-{button}"}, timeout=30,
            )  # fmt: skip
            assert created.status_code == 201, created.text
            payment = created.json()
            assert payment["status"] == "requires_action"
            challenge = payment["next_action"]["url"]
            assert challenge.startswith(f"{stack['sandbox'].url}/challenge/")

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
                )
                try:
                    page = browser.new_page()
                    page.set_default_timeout(30_000)
                    page.goto(challenge)
                    assert "4200" in page.inner_text("#summary")
                    page.click(button)
                    page.wait_for_url(f"{shop.url('/orders/7/paid')}**")
                    assert page.inner_text("#thanks") == "Thank you"
                    landed = urlsplit(page.url)
                finally:
                    browser.close()

            assert parse_qs(landed.query) == {"step": ["3ds"], "payment_id": [payment["id"]]}
            assert [v for v in shop.visits if v.startswith("/orders/")] == [
                f"/orders/7/paid?step=3ds&payment_id={payment['id']}"
            ]
            now = httpx.get(f"{url}/payments/{payment['id']}", headers=auth, timeout=30).json()
            assert (now["status"], now["next_action"]) == (status, None)

            def delivered(kind: str) -> list[dict]:
                bodies = [json.loads(r.body) for r in receiver.at("/hooks")]
                return [b for b in bodies if b["type"] == kind
                        and b["data"]["object"]["id"] == payment["id"]]  # fmt: skip

            wait_until(
                lambda: delivered(event) and delivered("payment.requires_action"),
                timeout=60,
                what="the webhooks:\n" + (stack["logs"] / "worker.log").read_text(),
            )
            assert len(delivered(event)) == 1
            assert len(delivered("payment.requires_action")) == 1
            assert delivered(event)[0]["data"]["object"]["status"] == status
    finally:
        shop.stop()


@pytest.mark.timeout(300)
def test_a_shopper_who_leaves_the_challenge_is_expired_and_canceled_at_the_sandbox(
    expiring_stack,
    sync_playwright,  # noqa: F811 - the admin browser test's fixture
):
    stack = expiring_stack
    url = stack["url"]
    _, issued = merchant_create(name="shop-abandon")
    auth = {"Authorization": f"Bearer {issued.raw}"}
    shop = MerchantPages()
    try:
        with running_receiver() as receiver:
            hooks = receiver.script("/hooks", [200])
            endpoint = httpx.post(
                f"{url}/webhook_endpoints", json={"url": hooks, "enabled_events": ["*"]},
                headers={**auth, "Idempotency-Key": "hook-abandon"}, timeout=30,
            )  # fmt: skip
            assert endpoint.status_code == 201, endpoint.text
            created = httpx.post(
                f"{url}/payments",
                json={"amount": 4300, "currency": "EUR", "payment_method": "tok_3ds_challenge",
                      "return_url": shop.url("/orders/8/paid")},
                headers={**auth, "Idempotency-Key": "pay-abandon"}, timeout=30,
            )  # fmt: skip
            assert created.status_code == 201, created.text
            payment = created.json()
            assert payment["status"] == "requires_action"

            with sync_playwright() as playwright:  # the shopper looks, then closes the tab
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
                )
                try:
                    page = browser.new_page()
                    page.set_default_timeout(30_000)
                    page.goto(payment["next_action"]["url"])
                    assert "4300" in page.inner_text("#summary")
                    page.close()
                finally:
                    browser.close()

            def now() -> dict:
                return httpx.get(f"{url}/payments/{payment['id']}", headers=auth, timeout=30).json()

            wait_until(
                lambda: now()["status"] != "requires_action", timeout=90,
                what="the expiry sweep:\n" + (stack["logs"] / "worker.log").read_text()[-3000:],
            )  # fmt: skip
            ended = now()
            assert (ended["status"], ended["next_action"]) == ("canceled", None), ended
            (charge,) = stack["sandbox"].charges(payment["id"])
            assert (charge["status"], charge["voided"]) == ("canceled", True)
            assert [v for v in shop.visits if v.startswith("/orders/")] == []

            def delivered(kind: str) -> list[dict]:
                bodies = [json.loads(r.body) for r in receiver.at("/hooks")]
                return [b for b in bodies if b["type"] == kind
                        and b["data"]["object"]["id"] == payment["id"]]  # fmt: skip

            wait_until(
                lambda: delivered("payment.canceled"), timeout=60,
                what="the webhooks:\n" + (stack["logs"] / "worker.log").read_text()[-3000:],
            )  # fmt: skip
            assert len(delivered("payment.canceled")) == 1
            assert len(delivered("payment.requires_action")) == 1
            assert delivered("payment.canceled")[0]["data"]["object"]["status"] == "canceled"
    finally:
        shop.stop()
