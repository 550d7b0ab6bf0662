"""
The sandbox acquirer's notifications (docs/sandbox.md, "Notifications"), signed by Standard
Webhooks 1.0 (https://www.standardwebhooks.com/).

Verification: `webhook-id` (the notification's id, the same on every retry),
`webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature`: space-separated
`v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{raw body}")>`, one per signing secret of the
sender. The secret is `whsec_` + base64 of the key bytes. Accepted when any `v1` matches any of
our secrets (constant-time) and the timestamp is within `tolerance` seconds of our clock.

The body: `{"id": "ntf_...", "type", "created": RFC 3339, "data": {"object": {...}}}`:
- `charge.authorized`, `charge.declined`, `charge.captured`, `charge.voided`: a charge, whose
  `reference` is our payment id and `id` the acquirer's;
- `refund.succeeded`, `refund.failed`: a refund, `reference` ours, `charge` the charge's id;
- `dispute.created`, `dispute.updated`, `dispute.closed`: `{"id": "dp_...", "charge",
  "payment_reference", "amount", "currency", "reason", "status", "evidence_due_by"}` (amount
  in ISO 4217 minor units; status one of ours).
The sandbox expects a 2xx; anything else (or no answer) is retried with backoff.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from .disputes import DISPUTE_STATUSES, DisputeNotice, DisputeStatus
from .notifications import NotificationRejected, ProviderNotification, Subject

__all__ = ["SandboxNotifications", "standard_webhooks_signature"]

_PREFIX = "whsec_"
_DEFAULT_TOLERANCE_SECONDS = 300
_MAX_HEADER = 4096


def _key(secret: str) -> bytes:
    if not secret.startswith(_PREFIX):
        raise ValueError("a Standard Webhooks secret starts with whsec_")
    try:
        return base64.b64decode(secret[len(_PREFIX) :], validate=True)
    except binascii.Error:
        raise ValueError("a Standard Webhooks secret is whsec_ and base64") from None


def standard_webhooks_signature(secret: str, msg_id: str, timestamp: int, raw: bytes) -> str:
    """`v1,<base64>`: the Standard Webhooks signature of `raw` with `msg_id` at `timestamp`
    (Unix seconds) under `secret` (`whsec_...`). ValueError for a malformed secret."""
    signed = f"{msg_id}.{timestamp}.".encode() + raw
    return (
        "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()
    )


class SandboxNotifications:
    """The sandbox's notification connector. `secrets`: our signing secrets (`whsec_...`, one
    or two during a rotation); `tolerance` in seconds against `clock()` (Unix seconds).
    ValueError for no secret or a malformed one."""

    def __init__(
        self,
        secrets: Sequence[str],
        *,
        tolerance: float = _DEFAULT_TOLERANCE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secrets:
            raise ValueError("at least one signing secret is required")
        self._keys = tuple(_key(secret) for secret in secrets)
        self._tolerance = tolerance
        self._clock = clock

    def __repr__(self) -> str:
        return f"SandboxNotifications(secrets=<{len(self._keys)} hidden>)"

    def verify(self, raw: bytes, headers: dict[str, str]) -> None:
        """Check the Standard Webhooks headers (see the module docstring).
        NotificationRejected: `missing_signature`, `bad_signature` or `stale_timestamp`."""
        msg_id = headers.get("webhook-id")
        stamp = headers.get("webhook-timestamp")
        given = headers.get("webhook-signature")
        if not msg_id or not stamp or not given:
            raise NotificationRejected(
                "missing_signature", "webhook-id, webhook-timestamp or webhook-signature missing"
            )
        if len(given) > _MAX_HEADER or not (stamp.isascii() and stamp.isdigit()):
            raise NotificationRejected("bad_signature", "malformed signature headers")
        signed = f"{msg_id}.{stamp}.".encode() + raw
        expected = [
            base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()) for key in self._keys
        ]
        offered = [
            part[3:].encode()
            for part in given.split(" ")
            if part.startswith("v1,") and part.isascii()
        ]
        if not any(hmac.compare_digest(e, o) for e in expected for o in offered):
            raise NotificationRejected("bad_signature", "no v1 signature matches the body")
        if abs(self._clock() - int(stamp)) > self._tolerance:
            raise NotificationRejected(
                "stale_timestamp", "the signature's timestamp is outside the tolerance"
            )

    def parse(self, raw: bytes) -> list[ProviderNotification]:
        """The one notification of a verified body (see the module docstring)."""
        try:
            return [_notification(raw)]
        except (ValueError, KeyError, TypeError) as exc:
            raise NotificationRejected("malformed", f"not a sandbox notification: {exc}") from None

    def acknowledgement(self) -> tuple[int, bytes, str]:
        """204, no body: the sandbox needs any 2xx."""
        return 204, b"", "application/json"


def _text(document: dict[str, Any], name: str) -> str | None:
    value = document.get(name)
    return value if isinstance(value, str) and value else None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _notification(raw: bytes) -> ProviderNotification:
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("the body is not a JSON object")
    event_id, event_type = _text(body, "id"), _text(body, "type")
    data = body.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if event_id is None or event_type is None or not isinstance(obj, dict):
        raise ValueError("field 'id', 'type' or 'data.object' is missing")
    kind = event_type.partition(".")[0]
    subject: Subject = "other"
    fields: dict[str, Any] = {}
    if kind == "charge":
        subject = "payment"
        fields = {
            "payment_reference": _text(obj, "reference"),
            "acquirer_reference": _text(obj, "id"),
        }
    elif kind == "refund":
        subject = "refund"
        fields = {
            "refund_reference": _text(obj, "reference"),
            "acquirer_reference": _text(obj, "charge"),
        }
    elif kind == "dispute":
        subject = "dispute"
        fields = {
            "payment_reference": _text(obj, "payment_reference"),
            "acquirer_reference": _text(obj, "charge"),
            "dispute": _dispute(obj),
        }
    return ProviderNotification(
        event_id=event_id,
        event_type=event_type,
        subject=subject,
        occurred_at=_time(body.get("created")),
        **fields,
    )


def _dispute(obj: dict[str, Any]) -> DisputeNotice:
    reference, currency, amount = _text(obj, "id"), _text(obj, "currency"), obj.get("amount")
    status = obj.get("status")
    if reference is None or currency is None or type(amount) is not int or amount < 0:
        raise ValueError("a dispute needs 'id', 'currency' and a non-negative 'amount'")
    if status not in DISPUTE_STATUSES:
        raise ValueError("the dispute's 'status' is not one of ours")
    checked: DisputeStatus = status
    return DisputeNotice(
        dispute_reference=reference,
        amount=amount,
        currency=currency.upper(),
        reason=_text(obj, "reason") or "",
        status=checked,
        evidence_due_by=_time(obj.get("evidence_due_by")),
        provider_status=checked,
    )
