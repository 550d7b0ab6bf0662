"""
Webhook verification: Standard Webhooks 1.0 signatures, checked by the `standardwebhooks`
package, and the event decoded into a typed `Event`.

The API delivers each event as `POST` of its JSON with three headers (issue 13's contract):

    webhook-id: evt_...                      the event id, the same on every retry
    webhook-timestamp: 1764590000            integer Unix seconds of this attempt
    webhook-signature: v1,<base64>           HMAC-SHA256 of "{id}.{timestamp}.{body}", keyed by
                                             the base64-decoded part of the whsec_ secret; during
                                             a secret rotation two signatures, space-separated

`standardwebhooks.Webhook(secret).verify(body, headers)` checks a `v1` signature in constant
time and refuses a timestamp more than 5 minutes from now (replays of old deliveries). The
event: `{"id": "evt_...", "object": "event", "type": "payment.succeeded", "created_at": ...,
"data": {"object": <the payment or refund as the API showed it then>}}`. Deliveries are at
least once and in no guaranteed order: deduplicate on `Event.id`, order by `created_at` (or
fetch the object).
"""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import standardwebhooks

from .types import (
    DecodeError,
    Payment,
    Refund,
    decode_payment,
    decode_refund,
    field_of,
    timestamp_of,
)

__all__ = [
    "Event",
    "WebhookError",
    "WebhookPayloadInvalid",
    "WebhookVerificationFailed",
    "verify_webhook",
]


class WebhookError(ValueError):
    """A delivery that must be refused (answer it with a 4xx; the API will retry it)."""


class WebhookVerificationFailed(WebhookError):
    """Missing or malformed `webhook-*` headers, no matching `v1` signature, a timestamp
    outside the 5-minute tolerance, or a secret that is not `whsec_<base64>`."""


class WebhookPayloadInvalid(WebhookError):
    """The signature is valid but the body is not the documented event (names the field)."""


@dataclass(frozen=True, slots=True)
class Event:
    """
    One verified event. `id` (`evt_...`: deduplicate on it), `type` (`payment.succeeded`,
    `refund.failed`, ...), `created_at` (aware UTC), `object`: the `Payment` or `Refund` in
    `data.object` (None for an object kind this client does not know yet; `data` always holds
    the raw `data` member), `webhook_id` and `timestamp` (Unix seconds) from the headers.
    """

    id: str
    type: str
    created_at: datetime
    object: Payment | Refund | None
    data: dict[str, Any]
    webhook_id: str
    timestamp: int


def verify_webhook(headers: Mapping[str, str], body: bytes | str, secret: str) -> Event:
    """
    Verify a delivery's signature with `standardwebhooks` and return its `Event`.

    `headers`: the request's headers (any mapping; names case-insensitive), `body`: the raw
    body exactly as received (bytes, or str), `secret`: the endpoint's `whsec_...` secret.
    Raises `WebhookVerificationFailed` (refuse the delivery) or `WebhookPayloadInvalid`.
    """
    lowered = {str(name).lower(): str(value) for name, value in headers.items()}
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        verifier = standardwebhooks.Webhook(secret)
        document = verifier.verify(text, lowered)
    except (
        standardwebhooks.WebhookVerificationError,
        standardwebhooks.webhooks.EmptyWebhookSecretError,
        binascii.Error,
        ValueError,  # a signature without ",", a body that is not UTF-8 or not JSON
        RuntimeError,
    ) as exc:
        raise WebhookVerificationFailed(f"webhook refused: {type(exc).__name__}") from None
    return _event(document, lowered["webhook-id"], int(float(lowered["webhook-timestamp"])))


def _event(document: object, webhook_id: str, timestamp: int) -> Event:
    if not isinstance(document, dict) or document.get("object") != "event":
        raise WebhookPayloadInvalid("the body is not an event object")
    try:
        event_id = field_of(document, "id", str)
        event_type = field_of(document, "type", str)
        created_at = timestamp_of(document, "created_at")
        data = field_of(document, "data", dict)
        inner = data.get("object")
        kind = inner.get("object") if isinstance(inner, dict) else None
        typed: Payment | Refund | None = None
        if kind == "payment":
            typed = decode_payment(inner)
        elif kind == "refund":
            typed = decode_refund(inner)
    except DecodeError as exc:
        raise WebhookPayloadInvalid(f"the event is not the documented shape: {exc}") from None
    if not event_id.startswith("evt_"):
        raise WebhookPayloadInvalid("the event's id is not an evt_ id")
    return Event(event_id, event_type, created_at, typed, data, webhook_id, timestamp)
