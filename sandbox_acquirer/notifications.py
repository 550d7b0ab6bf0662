"""The sandbox's own notifications, sent as providers send theirs (docs/sandbox.md,
"Notifications"), and the disputes an operator of the sandbox opens and closes.

**Delivery.** Once a notification URL is set (``PUT /_sandbox/notifications`` or
``--notification-url`` with ``SANDBOX_NOTIFICATION_SECRET``), every recorded charge, capture,
void and refund, and every dispute change, is POSTed there as JSON::

    {"id": "ntf_...", "type": "charge.authorized", "created": "2026-11-29T17:00:00Z",
     "data": {"object": {...the charge, refund or dispute...}}}

signed by Standard Webhooks 1.0 (https://www.standardwebhooks.com/): ``webhook-id`` (the
notification's id, the same on every retry), ``webhook-timestamp`` (Unix seconds of this
attempt), ``webhook-signature`` (``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``
per secret, space-separated; a secret is ``whsec_`` + base64 of the key). A 2xx ends it;
anything else, or no answer within ``timeout`` seconds, is retried with full-jitter backoff
(``backoff_base`` doubling to ``backoff_cap``) up to ``max_attempts``, then given up (counted).
One sender thread delivers in due order. Types: ``charge.authorized``, ``charge.declined``,
``charge.captured``, ``charge.voided``, ``refund.succeeded``, ``refund.failed``,
``dispute.created``, ``dispute.updated``, ``dispute.closed``.

**Faults** (for the campaigns): ``drop_rate`` (never sent), ``duplicate_rate`` (sent twice,
same id), ``max_delay_seconds`` (each copy first sent after a random delay up to it: reorders).

**Disputes.** ``POST /_sandbox/disputes {"charge", "amount"?, "reason"?}`` opens one
(``needs_response``, evidence due in 7 days); ``POST /_sandbox/disputes/<id> {"status"}``
moves it to ``under_review`` (``dispute.updated``), ``won`` or ``lost`` (``dispute.closed``,
final). Amounts in ISO 4217 minor units.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import itertools
import json
import logging
import random as random_module
import secrets as secrets_module
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sandbox_acquirer.models import InvalidRequest, OperationRefused, format_timestamp

__all__ = ["DisputeBook", "NotificationTarget", "Notifier", "sign"]

logger = logging.getLogger("sandbox_acquirer.notifications")

_SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
_DISPUTE_STATUSES = ("needs_response", "under_review", "won", "lost")
_CLOSED = ("won", "lost")
EVIDENCE_WINDOW = timedelta(days=7)


def _key(secret: str) -> bytes:
    if not secret.startswith(_SECRET_PREFIX):
        raise InvalidRequest("a notification secret is whsec_ followed by base64")
    try:
        return base64.b64decode(secret[len(_SECRET_PREFIX) :], validate=True)
    except ValueError:
        raise InvalidRequest("a notification secret is whsec_ followed by base64") from None


def sign(secrets: tuple[str, ...], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one ``v1,<base64>`` per secret, space-separated."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets
    )


@dataclass(frozen=True, slots=True)
class NotificationTarget:
    """Where and how notifications go (see the module docstring); seconds, rates 0 to 1."""

    url: str
    secrets: tuple[str, ...] = field(repr=False)
    max_attempts: int = 8
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    timeout: float = 5.0
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    max_delay_seconds: float = 0.0

    @classmethod
    def from_json(cls, data: Any) -> NotificationTarget:
        """Parse the body of ``PUT /_sandbox/notifications``. InvalidRequest otherwise."""
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            raise InvalidRequest("give a JSON object with 'url' and 'secrets'")
        url, given = data["url"], data.get("secrets")
        if not url.startswith(("http://", "https://")):
            raise InvalidRequest("'url' must be an http:// or https:// URL")
        if not isinstance(given, list) or not given or not all(isinstance(s, str) for s in given):
            raise InvalidRequest("'secrets' must be a non-empty list of whsec_ secrets")
        for secret in given:
            _key(secret)
        numbers: dict[str, float] = {}
        for name in ("max_attempts", "backoff_base", "backoff_cap", "timeout", "drop_rate",
                     "duplicate_rate", "max_delay_seconds"):  # fmt: skip
            value = data.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidRequest(f"{name!r} must be a non-negative number")
            if name.endswith("_rate") and value > 1:
                raise InvalidRequest(f"{name!r} must be from 0 to 1")
            numbers[name] = value
        target = cls(url=url, secrets=tuple(given))
        if "max_attempts" in numbers:
            numbers["max_attempts"] = max(int(numbers["max_attempts"]), 1)
        return replace(target, **numbers)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """The target without its secrets."""
        return {
            "url": self.url,
            "secrets": len(self.secrets),
            "max_attempts": self.max_attempts,
            "backoff_base": self.backoff_base,
            "backoff_cap": self.backoff_cap,
            "timeout": self.timeout,
            "drop_rate": self.drop_rate,
            "duplicate_rate": self.duplicate_rate,
            "max_delay_seconds": self.max_delay_seconds,
        }


def _post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class Notifier:
    """Sends notifications to the configured target from one daemon thread (see the module
    docstring). ``clock``: Unix seconds; ``random``: [0, 1); ``post(url, body, headers,
    timeout) -> status`` (raises on no answer)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        random: Callable[[], float] = random_module.random,
        post: Callable[[str, bytes, Mapping[str, str], float], int] = _post,
    ) -> None:
        self._clock, self._random, self._post = clock, random, post
        self._target: NotificationTarget | None = None
        self._due: list[tuple[float, int, str, bytes, int]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._counts = dict.fromkeys(
            ("emitted", "delivered", "attempts", "failed_attempts", "given_up", "dropped",
             "duplicated"), 0)  # fmt: skip

    def configure(self, target: NotificationTarget | None) -> None:
        """Send to ``target`` from now on (None: stop sending; pending ones are forgotten)."""
        with self._cond:
            self._target = target
            if target is None:
                self._due.clear()
            elif self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sandbox-notifier", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def emit(self, event_type: str, obj: Mapping[str, Any], now: datetime) -> None:
        """Queue one notification of ``event_type`` about ``obj`` (its JSON), if a target is
        set; its faults decide whether and when."""
        with self._cond:
            target = self._target
            if target is None:
                return
            self._counts["emitted"] += 1
            if self._random() < target.drop_rate:
                self._counts["dropped"] += 1
                return
            msg_id = "ntf_" + secrets_module.token_hex(12)
            body = json.dumps(
                {"id": msg_id, "type": event_type, "created": format_timestamp(now),
                 "data": {"object": dict(obj)}},
                separators=(",", ":"),
            ).encode()  # fmt: skip
            copies = 2 if self._random() < target.duplicate_rate else 1
            self._counts["duplicated"] += copies - 1
            for _ in range(copies):
                due = self._clock() + self._random() * target.max_delay_seconds
                heapq.heappush(self._due, (due, next(self._order), msg_id, body, 1))
            self._cond.notify_all()

    def stats(self) -> dict[str, Any]:
        """The counters, the queue's length and the target (without secrets)."""
        with self._cond:
            target = self._target.to_json() if self._target else None
            return {**self._counts, "pending": len(self._due), "target": target}

    def stop(self) -> None:
        """End the sender thread (pending notifications are not sent)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _next(self) -> tuple[NotificationTarget, str, bytes, int] | None:
        with self._cond:
            while not self._stopped:
                target = self._target
                if target is not None and self._due:
                    wait = self._due[0][0] - self._clock()
                    if wait <= 0:
                        _, _, msg_id, body, attempt = heapq.heappop(self._due)
                        return target, msg_id, body, attempt
                    self._cond.wait(min(wait, 1.0))
                else:
                    self._cond.wait(1.0)
            return None

    def _run(self) -> None:
        while (taken := self._next()) is not None:
            target, msg_id, body, attempt = taken
            stamp = int(self._clock())
            headers = {
                "content-type": "application/json",
                "webhook-id": msg_id,
                "webhook-timestamp": str(stamp),
                "webhook-signature": sign(target.secrets, msg_id, stamp, body),
            }
            try:
                status = self._post(target.url, body, headers, target.timeout)
            except (OSError, ValueError):
                status = 0
            with self._cond:
                self._counts["attempts"] += 1
                if 200 <= status < 300:
                    self._counts["delivered"] += 1
                    continue
                self._counts["failed_attempts"] += 1
                if attempt >= target.max_attempts:
                    self._counts["given_up"] += 1
                    logger.warning("notification %s given up after %d attempts", msg_id, attempt)
                    continue
                bound = min(target.backoff_cap, target.backoff_base * 2 ** (attempt - 1))
                due = self._clock() + self._random() * bound
                heapq.heappush(self._due, (due, next(self._order), msg_id, body, attempt + 1))


class DisputeBook:
    """The disputes opened on the sandbox's charges (memory only; see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._disputes: dict[str, dict[str, Any]] = {}

    def open(self, charge: Mapping[str, Any], data: Any, now: datetime) -> dict[str, Any]:
        """A new dispute of ``charge`` (its JSON) from the request ``data``. InvalidRequest
        for a bad body; OperationRefused for a charge with nothing captured."""
        if not isinstance(data, dict):
            raise InvalidRequest("give a JSON object with 'charge'")
        captured = int(charge.get("amount_captured") or 0)
        amount = data.get("amount", captured)
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            raise InvalidRequest("'amount' must be a positive integer (minor units)")
        if amount > captured:
            raise OperationRefused("amount_too_large", "A dispute is at most what was captured.")
        reason = data.get("reason", "fraudulent")
        if not isinstance(reason, str) or not reason.isidentifier() or len(reason) > 40:
            raise InvalidRequest("'reason' must be a short code like 'fraudulent'")
        dispute = {
            "id": "dp_" + secrets_module.token_hex(12),
            "object": "dispute",
            "charge": charge["id"],
            "payment_reference": charge["reference"],
            "amount": amount,
            "currency": charge["currency"],
            "reason": reason,
            "status": "needs_response",
            "evidence_due_by": format_timestamp(now + EVIDENCE_WINDOW),
            "created_at": format_timestamp(now),
        }
        with self._lock:
            self._disputes[dispute["id"]] = dispute
        return dict(dispute)

    def move(self, dispute_id: str, data: Any) -> tuple[str, dict[str, Any]]:
        """(event type, the dispute) after moving ``dispute_id`` to ``data["status"]``.
        OperationRefused 404 for an unknown id, 409 for a closed dispute."""
        status = data.get("status") if isinstance(data, dict) else None
        if status not in _DISPUTE_STATUSES[1:]:
            raise InvalidRequest("'status' must be under_review, won or lost")
        with self._lock:
            dispute = self._disputes.get(dispute_id)
            if dispute is None:
                raise OperationRefused("dispute_not_found", "No such dispute.", status=404)
            if dispute["status"] in _CLOSED:
                raise OperationRefused("dispute_closed", "The dispute is closed.", status=409)
            dispute["status"] = status
            return ("dispute.closed" if status in _CLOSED else "dispute.updated"), dict(dispute)

    def reset(self) -> None:
        """Forget every dispute."""
        with self._lock:
            self._disputes.clear()
