"""Stripe's hosted 3-D Secure page, in front of localstripe, for the customer-action tests.

localstripe (a separate process: tests/support/localstripe.py) takes its 3-D Secure test cards
(``4000002760003184`` ...) to ``requires_action``, but refuses ``return_url`` ("Unexpected
return_url") and answers only ``next_action: {"type": "use_stripe_sdk"}`` (Stripe.js's flow);
its own ``POST /v1/payment_intents/{id}/_authenticate`` (with the client secret) completes the
challenge. Real Stripe, given a ``return_url``, answers ``{"type": "redirect_to_url",
"redirect_to_url": {"url": <its hosted page>, "return_url": ...}}`` and sends the shopper back
there afterwards. This proxy plays that part, and nothing else:

* every request is forwarded to localstripe as it came, except that ``return_url`` is taken
  out of ``POST /v1/payment_intents`` and remembered for the PaymentIntent;
* every ``payment_intent`` in an answer that is ``requires_action`` with ``use_stripe_sdk`` is
  shown with Stripe's ``redirect_to_url`` to this proxy's page ``/3ds/<id>``;
* ``GET /3ds/<id>`` is that page (Approve and Deny buttons); ``POST /3ds/<id>`` with
  ``outcome=approve|deny`` calls localstripe's ``_authenticate`` and answers ``303`` to the
  remembered ``return_url``.

    with LocalStripe.start() as stripe, HostedChallenge(stripe.url, stripe.api_key) as hosted:
        ...  # the acquirer's base_url is hosted.url
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl, urlencode

import httpx

__all__ = ["HostedChallenge"]

_PAGE = (
    "<!doctype html><title>Stripe 3-D Secure (test)</title>"
    "<form method=post><button id=approve name=outcome value=approve>Approve</button>"
    "<button id=deny name=outcome value=deny>Deny</button></form>"
)


class HostedChallenge:
    """The proxy and page (see the module docstring); ``url``, ``close()``."""

    def __init__(self, upstream: str, api_key: str) -> None:
        self._upstream = httpx.Client(base_url=upstream, timeout=10, trust_env=False)
        self._auth = (api_key, "")
        self._returns: dict[str, str] = {}
        self._secrets: dict[str, str] = {}
        hosted = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                hosted._handle(self)

            def do_POST(self) -> None:
                hosted._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._upstream.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("content-length") or 0))
        if handler.path.startswith("/3ds/"):
            status, headers, payload = self._challenge(handler.command, handler.path[5:], body)
        else:
            status, headers, payload = self._forward(handler, body)
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def _forward(
        self, handler: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        return_url = None
        if handler.command == "POST" and handler.path.split("?")[0] == "/v1/payment_intents":
            fields = parse_qsl(body.decode(), keep_blank_values=True)
            return_url = next((v for k, v in fields if k == "return_url"), None)
            body = urlencode([(k, v) for k, v in fields if k != "return_url"]).encode()
        skip = {"host", "content-length", "connection"}
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
        answer = self._upstream.request(
            handler.command, handler.path, content=body, headers=headers
        )
        payload = answer.content
        if answer.headers.get("content-type", "").startswith("application/json"):
            document = answer.json()
            for intent in _intents(document):
                if return_url is not None:
                    self._returns[intent["id"]] = return_url
                self._secrets[intent["id"]] = intent.get("client_secret", "")
                if intent.get("status") == "requires_action" and intent["id"] in self._returns:
                    intent["next_action"] = {
                        "type": "redirect_to_url",
                        "redirect_to_url": {
                            "url": f"{self.url}/3ds/{intent['id']}",
                            "return_url": self._returns[intent["id"]],
                        },
                    }
            payload = json.dumps(document).encode()
        return answer.status_code, {"Content-Type": answer.headers.get("content-type", "")}, payload

    def _challenge(
        self, method: str, intent: str, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        if intent not in self._returns:
            return 404, {"Content-Type": "text/plain"}, b"unknown PaymentIntent"
        if method == "GET":
            return 200, {"Content-Type": "text/html; charset=utf-8"}, _PAGE.encode()
        outcome = dict(parse_qsl(body.decode())).get("outcome")
        done = self._upstream.post(
            f"/v1/payment_intents/{intent}/_authenticate",
            data={"client_secret": self._secrets[intent], "success": outcome == "approve"},
            auth=self._auth,
        )
        if done.status_code != 200:
            return 409, {"Content-Type": "text/plain"}, b"the challenge is closed"
        return 303, {"Location": self._returns[intent], "Content-Type": "text/plain"}, b""


def _intents(document: Any) -> list[dict[str, Any]]:
    """The payment_intent objects of an answer: the object itself, or a list's items."""
    if not isinstance(document, dict):
        return []
    if document.get("object") == "payment_intent":
        return [document]
    items = document.get("data")
    if isinstance(items, list):
        return [i for i in items if isinstance(i, dict) and i.get("object") == "payment_intent"]
    return []
