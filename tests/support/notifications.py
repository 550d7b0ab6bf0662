"""Provider notifications as the tests send them: Stripe events signed by Stripe's documented
scheme (https://docs.stripe.com/webhooks#verify-manually; checked against the ``stripe``
package's ``Webhook.construct_event`` in tests/unit/test_notification_connectors.py), and the
sandbox's, signed by the sandbox's own Standard Webhooks code (sandbox_acquirer/notifications.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any

from sandbox_acquirer.notifications import sign

__all__ = [
    "SANDBOX_SECRET",
    "STRIPE_SECRET",
    "sandbox_notification",
    "stripe_dispute_event",
    "stripe_event",
    "stripe_signed",
]

#: Signing secrets of the tests' acquirers (never real ones).
STRIPE_SECRET = "whsec_test_" + "s" * 32
SANDBOX_SECRET = "whsec_" + base64.b64encode(b"sandbox-notification-key-32bytes").decode()


def stripe_signed(body: bytes, secrets_: list[str], timestamp: int | None = None) -> str:
    """A ``Stripe-Signature`` value for ``body``: ``t=<timestamp>`` and one ``v1`` per secret,
    HMAC-SHA256 in hex of ``"{t}.{body}"`` keyed by the secret's text (Stripe's scheme, written
    here from its documentation, independently of gateway_client's)."""
    stamp = int(time.time()) if timestamp is None else timestamp
    parts = [f"t={stamp}"]
    for secret in secrets_:
        mac = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
        parts.append(f"v1={mac.hexdigest()}")
    return ",".join(parts)


def stripe_event(event_type: str, obj: dict[str, Any], *, created: int | None = None) -> bytes:
    """A Stripe event's JSON (compact, as Stripe sends it) about ``obj``."""
    event = {
        "id": "evt_" + secrets.token_hex(12),
        "object": "event",
        "api_version": "2024-06-20",
        "created": int(time.time()) if created is None else created,
        "type": event_type,
        "livemode": False,
        "data": {"object": obj},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def stripe_dispute_event(
    event_type: str,
    *,
    dispute_id: str,
    payment_intent: str,
    amount: int,
    currency: str,
    status: str,
    reason: str = "fraudulent",
    created: int | None = None,
) -> bytes:
    """A ``charge.dispute.*`` event (Stripe's Dispute object, the fields we read)."""
    due = int(time.time()) + 7 * 86400
    dispute = {
        "id": dispute_id,
        "object": "dispute",
        "amount": amount,
        "currency": currency.lower(),
        "charge": "ch_" + payment_intent.removeprefix("pi_"),
        "payment_intent": payment_intent,
        "reason": reason,
        "status": status,
        "evidence_details": {"due_by": due, "has_evidence": False, "submission_count": 0},
    }
    return stripe_event(event_type, dispute, created=created)


def sandbox_notification(
    event_type: str, obj: dict[str, Any], *, secret: str = SANDBOX_SECRET, at: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of a sandbox notification as the sandbox sends it."""
    msg_id = "ntf_" + secrets.token_hex(12)
    body = json.dumps(
        {"id": msg_id, "type": event_type, "created": "2026-12-01T10:00:00Z",
         "data": {"object": obj}},
        separators=(",", ":"),
    ).encode()  # fmt: skip
    stamp = int(time.time()) if at is None else at
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": sign((secret,), msg_id, stamp, body),
    }
    return body, headers
