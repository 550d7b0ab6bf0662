"""A local webhook receiver that verifies and prints every event: a development tool.

One command, with ``make run`` running::

    .venv/bin/python -m webhooks.receiver --api-key "$API_KEY"

starts a receiver on ``http://127.0.0.1:8099/webhooks`` (:data:`DEFAULT_PORT`, a port no
process of the Procfile holds; ``--port`` for another), registers it as an endpoint for every
event type through the API (``POST /webhook_endpoints``), and prints each delivery it receives
once ``standardwebhooks``' verifier has accepted its signature (an independent implementation
of Standard Webhooks 1.0). When it stops (Ctrl-C, ``SIGTERM``, ``--exit-after N`` events
received, or ``--timeout`` seconds without them) it deletes the endpoint it registered, so no
later event is retried for days at an address nobody listens on. ``--secret whsec_...``
verifies against an endpoint you created yourself instead (that one stays). ``--fail-rate
0.5`` answers ``500`` to half the deliveries (to watch the retries). Nothing in the service
imports this module; the fault campaign and ``make demo`` use :class:`VerifyingReceiver`.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import standardwebhooks

__all__ = ["DEFAULT_PORT", "Verified", "VerifyingReceiver", "main", "register", "unregister"]

#: The receiver's port unless ``--port`` says otherwise: none of the Procfile's (8000 the API,
#: 8090 and 8091 the sandboxes; tests/e2e/test_first_hour.py checks it).
DEFAULT_PORT = 8099


@dataclass(frozen=True)
class Verified:
    """One delivery whose signature verified: its ``webhook-id`` and the event's fields."""

    webhook_id: str
    type: str
    object_id: str
    status: str | None
    created_at: str


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class VerifyingReceiver:
    """A threaded HTTP server on ``host:port`` (0: any free port) that verifies each ``POST``
    with every secret of ``secrets`` (a rotation sends two signatures) and answers ``200``, or
    ``500`` with probability ``fail_rate`` (``rng`` decides). ``verified`` holds what it
    accepted, ``rejected`` counts bad signatures (answered ``400``), ``failed`` counts the
    ``500`` answers. ``on_event`` is called with each accepted delivery."""

    secrets: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/webhooks"
    fail_rate: float = 0.0
    rng: random.Random = field(default_factory=random.Random)
    on_event: Callable[[Verified], None] | None = None
    verified: list[Verified] = field(default_factory=list)
    rejected: int = 0
    failed: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                # A readiness probe: 200 once the receiver is registered (or needs no
                # registration), 503 before; the README's block waits on it.
                ready = receiver.ready.is_set()
                self.send_response(200 if ready else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                status = receiver._handle(body, dict(self.headers.items()))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        #: Set once events can be received: the endpoint registered (``main``).
        self.ready = threading.Event()
        self._server = _Server((self.host, self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    def _handle(self, body: bytes, headers: dict[str, str]) -> int:
        event = None
        for secret in list(self.secrets):
            try:
                event = standardwebhooks.Webhook(secret).verify(body, headers)
                break
            except standardwebhooks.WebhookVerificationError:
                continue
        with self._lock:
            if event is None:
                self.rejected += 1
                return 400
            if self.fail_rate and self.rng.random() < self.fail_rate:
                self.failed += 1
                return 500
            obj = event.get("data", {}).get("object", {})
            verified = Verified(
                webhook_id={k.lower(): v for k, v in headers.items()}["webhook-id"],
                type=event["type"],
                object_id=obj.get("id", ""),
                status=obj.get("status"),
                created_at=event["created_at"],
            )
            self.verified.append(verified)
        if self.on_event is not None:
            self.on_event(verified)
        return 200

    def start(self) -> VerifyingReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def register(api: str, api_key: str, url: str) -> tuple[str, str]:
    """Create an endpoint for every event type at ``url`` through the API; (id, secret)."""
    response = httpx.post(
        f"{api.rstrip('/')}/webhook_endpoints",
        json={"url": url, "enabled_events": ["*"], "description": "local receiver"},
        headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    response.raise_for_status()
    document = response.json()
    return document["id"], document["secret"]


def unregister(api: str, api_key: str, endpoint_id: str) -> bool:
    """Delete the endpoint ``endpoint_id`` through the API; True when it is gone (deleted now,
    or already unknown)."""
    try:
        response = httpx.delete(
            f"{api.rstrip('/')}/webhook_endpoints/{endpoint_id}",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=10,
        )
    except httpx.HTTPError:
        return False
    return response.status_code in (200, 404)


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The command line: receive, print each verified event, unregister on the way out; exit 0,
    or 1 when ``--timeout`` passed before ``--exit-after`` events arrived."""
    parser = argparse.ArgumentParser(
        prog="python -m webhooks.receiver",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
    parser.add_argument("--api", default="http://127.0.0.1:8000", help="the service's API")
    parser.add_argument("--api-key", help="a merchant's API key: register this receiver")
    parser.add_argument("--secret", action="append", default=[], help="verify with this secret")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="answer 500 this often")
    parser.add_argument("--exit-after", type=int, default=0, help="stop after N events")
    parser.add_argument("--timeout", type=float, default=0.0, help="give up after S seconds")
    args = parser.parse_args(argv)
    if not args.secret and not args.api_key:
        parser.error("give --api-key (to register this receiver) or --secret")

    enough = threading.Event()

    def show(event: Verified) -> None:
        line = f"{event.created_at} {event.webhook_id} {event.type} {event.object_id}"
        print(f"{line} {event.status}", flush=True)
        if args.exit_after and len(receiver.verified) >= args.exit_after:
            enough.set()

    receiver = VerifyingReceiver(
        secrets=list(args.secret), port=args.port, fail_rate=args.fail_rate, on_event=show
    ).start()
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    endpoint_id = None
    code = 0
    try:
        if args.api_key:
            endpoint_id, secret = register(args.api, args.api_key, receiver.url)
            receiver.secrets.append(secret)
            print(f"registered {endpoint_id} -> {receiver.url} (secret kept in memory)", flush=True)
        receiver.ready.set()
        print(f"receiving on {receiver.url}; Ctrl-C stops", flush=True)
        if not enough.wait(args.timeout or None) and args.exit_after:
            print(f"no {args.exit_after} event(s) within {args.timeout:g} s", flush=True)
            code = 1
    except KeyboardInterrupt:
        pass
    finally:
        receiver.stop()
        if endpoint_id is not None:
            gone = unregister(args.api, args.api_key, endpoint_id)
            print(("deleted " if gone else "could not delete ") + endpoint_id, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
