"""A shopper's 3-D Secure challenge in a real browser (ADR 0049): Debian's Chromium, headless,
driven by Playwright, against the real stack: gunicorn serving the API and our return
endpoint, the sandbox acquirer and its challenge page, a Celery worker delivering the
merchant's webhooks, and the merchant's own tiny page server for ``return_url``.

Create with ``return_url`` -> follow ``next_action.url`` -> Approve (or Deny) -> land on the
merchant's page with ``payment_id`` -> the payment is ``succeeded`` (``declined``) and the
merchant's webhook receiver got exactly one ``payment.succeeded`` (``payment.declined``) for it.
Without playwright or Chromium the test is skipped, except under CI (the admin's browser test's
rule, tests/e2e/test_admin_browser.py).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
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


@pytest.fixture
def stack(transactional_db, tmp_path) -> Iterator[dict]:
    """The sandbox, gunicorn (its PUBLIC_BASE_URL its own address) and a Celery worker."""
    with SandboxProcess.start() as sandbox:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = service_env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY="1",
            PUBLIC_BASE_URL=url,
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=sandbox.api_key,
        )
        logs = {name: (tmp_path / f"{name}.log").open("w") for name in ("web", "worker")}
        web = _started(GUNICORN, env, logs["web"])
        worker = _started(CELERY_WORKER, env, logs["worker"])
        try:
            wait_until(
                lambda: answers_healthz(url), timeout=STARTUP_SECONDS,
                what="gunicorn:\n" + (tmp_path / "web.log").read_text(),
            )  # fmt: skip
            yield {"url": url, "sandbox": sandbox, "logs": tmp_path}
        finally:
            _stop(web)
            _stop(worker)
            for log in logs.values():
                log.close()


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
