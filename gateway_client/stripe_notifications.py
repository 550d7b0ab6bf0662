"""
Stripe's webhook events (https://docs.stripe.com/webhooks#verify-manually): the
`Stripe-Signature` check on the raw body, and the events we read.

Verification: the header is `t=<unix seconds>,v1=<hex>[,v1=<hex>...][,v0=...]`; each `v1` is
HMAC-SHA256, keyed by the endpoint's signing secret (`whsec_...`, used as is), of
`"{t}.{raw body}"`, in lower-case hex. A request is Stripe's when any `v1` matches any of our
secrets (compared in constant time) and `t` is within `tolerance` seconds of our clock, before
or after (Stripe's libraries default to 300 s, and check only the past; a time far ahead is no
more plausible). During a rotation Stripe signs with the old and the new secret (two `v1`), and
we may hold both (`secrets`, newest first). `v0` (test-mode legacy) is ignored. The signature
covers the bytes as sent: the same JSON re-indented fails.

Events read (`data.object`):
- `payment_intent.*`: a PaymentIntent; `metadata.payment_reference` is our payment id.
- `charge.*` but disputes: a Charge; its `payment_intent`; `charge.refunded` and
  `charge.refund.updated` are about refunds.
- `refund.*`: a Refund; `metadata.refund_reference` is ours, `payment_intent` the payment's.
- `charge.dispute.*`: a Dispute; amount in Stripe's units of its currency (converted to ISO
  4217 minor units), `reason`, `status` (mapped by `STRIPE_DISPUTE_STATUSES`),
  `evidence_details.due_by`, `payment_intent`.
- anything else: subject `other` (stored, nothing to apply).

Stripe expects any 2xx quickly (it retries for up to three days otherwise); we answer
`200 {"received": true}`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from .disputes import STRIPE_DISPUTE_STATUSES, DisputeNotice
from .notifications import NotificationRejected, ProviderNotification, Subject
from .stripe import from_stripe_amount
from .wire import MalformedBody

__all__ = ["DEFAULT_TOLERANCE_SECONDS", "StripeNotifications", "stripe_signature_header"]

#: Stripe's libraries' default tolerance on `t` (seconds).
DEFAULT_TOLERANCE_SECONDS = 300
_MAX_HEADER = 4096


def _hmac_hex(secret: str, timestamp: int | str, raw: bytes) -> str:
    signed = str(timestamp).encode("ascii") + b"." + raw
    return hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).hexdigest()


def stripe_signature_header(secrets: Sequence[str], timestamp: int, raw: bytes) -> str:
    """The `Stripe-Signature` value Stripe would send for `raw` at `timestamp` (Unix seconds):
    one `v1` per secret. What a test or a replay tool signs with; Stripe's own scheme."""
    return ",".join([f"t={timestamp}", *(f"v1={_hmac_hex(s, timestamp, raw)}" for s in secrets)])


class StripeNotifications:
    """Stripe's notification connector. `secrets`: the endpoint's signing secrets (one, or
    two during a rotation); `tolerance`: seconds `t` may differ from `clock()` (Unix seconds);
    ValueError when no secret is given."""

    def __init__(
        self,
        secrets: Sequence[str],
        *,
        tolerance: float = DEFAULT_TOLERANCE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secrets or not all(secrets):
            raise ValueError("at least one non-empty signing secret is required")
        self._secrets = tuple(secrets)
        self._tolerance = tolerance
        self._clock = clock

    def __repr__(self) -> str:
        return f"StripeNotifications(secrets=<{len(self._secrets)} hidden>)"

    def verify(self, raw: bytes, headers: dict[str, str]) -> None:
        """Check `Stripe-Signature` (see the module docstring). NotificationRejected:
        `missing_signature`, `bad_signature` or `stale_timestamp`."""
        header = headers.get("stripe-signature")
        if not header:
            raise NotificationRejected("missing_signature", "no Stripe-Signature header")
        if len(header) > _MAX_HEADER:
            raise NotificationRejected("bad_signature", "the Stripe-Signature header is too long")
        timestamp: int | None = None
        signatures: list[str] = []
        for part in header.split(","):
            name, _, value = part.strip().partition("=")
            if name == "t" and value.isascii() and value.isdigit():
                timestamp = int(value)
            elif name == "v1":
                signatures.append(value)
        if timestamp is None or not signatures:
            raise NotificationRejected(
                "bad_signature", "the Stripe-Signature header has no timestamp or no v1 signature"
            )
        matched = any(
            hmac.compare_digest(_hmac_hex(secret, timestamp, raw).encode(), given.encode())
            for secret in self._secrets
            for given in signatures
            if given.isascii()
        )
        if not matched:
            raise NotificationRejected("bad_signature", "no v1 signature matches the body")
        if abs(self._clock() - timestamp) > self._tolerance:
            raise NotificationRejected(
                "stale_timestamp", "the signature's timestamp is outside the tolerance"
            )

    def parse(self, raw: bytes) -> list[ProviderNotification]:
        """The one event of a verified body (see the module docstring)."""
        try:
            return [_event(raw)]
        except (ValueError, MalformedBody, KeyError, TypeError) as exc:
            raise NotificationRejected("malformed", f"not a Stripe event: {exc}") from None

    def acknowledgement(self) -> tuple[int, bytes, str]:
        """200 `{"received": true}`: Stripe needs any 2xx."""
        return 200, b'{"received": true}', "application/json"


def _text(document: dict[str, Any], name: str) -> str | None:
    value = document.get(name)
    return value if isinstance(value, str) and value else None


def _metadata(document: dict[str, Any], name: str) -> str | None:
    metadata = document.get("metadata")
    return _text(metadata, name) if isinstance(metadata, dict) else None


def _unix(value: Any) -> datetime | None:
    if type(value) is int and value > 0:
        return datetime.fromtimestamp(value, tz=UTC)
    return None


def _event(raw: bytes) -> ProviderNotification:
    event = json.loads(raw)
    if not isinstance(event, dict):
        raise ValueError("the body is not a JSON object")
    event_id, event_type = _text(event, "id"), _text(event, "type")
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if event_id is None or event_type is None or not isinstance(obj, dict):
        raise ValueError("field 'id', 'type' or 'data.object' is missing")
    occurred_at = _unix(event.get("created"))
    subject: Subject = "other"
    payment_reference = _metadata(obj, "payment_reference")
    acquirer_reference: str | None = None
    refund_reference: str | None = None
    dispute: DisputeNotice | None = None
    if event_type.startswith("charge.dispute."):
        subject, dispute = "dispute", _dispute(obj)
        acquirer_reference = _text(obj, "payment_intent")
    elif event_type.startswith("payment_intent."):
        subject, acquirer_reference = "payment", _text(obj, "id")
    elif event_type in ("charge.refunded", "charge.refund.updated"):
        subject, acquirer_reference = "refund", _text(obj, "payment_intent")
    elif event_type.startswith("charge."):
        subject, acquirer_reference = "payment", _text(obj, "payment_intent")
    elif event_type.startswith("refund."):
        subject, acquirer_reference = "refund", _text(obj, "payment_intent")
        refund_reference, payment_reference = _metadata(obj, "refund_reference"), None
    return ProviderNotification(
        event_id=event_id,
        event_type=event_type,
        subject=subject,
        occurred_at=occurred_at,
        payment_reference=payment_reference,
        acquirer_reference=acquirer_reference,
        refund_reference=refund_reference,
        dispute=dispute,
    )


def _dispute(obj: dict[str, Any]) -> DisputeNotice:
    dispute_reference, currency = _text(obj, "id"), _text(obj, "currency")
    amount, provider_status = obj.get("amount"), _text(obj, "status") or ""
    if dispute_reference is None or currency is None or type(amount) is not int or amount < 0:
        raise ValueError("a dispute needs 'id', 'currency' and a non-negative 'amount'")
    status = STRIPE_DISPUTE_STATUSES.get(provider_status)
    if status is None:
        raise ValueError("the dispute's 'status' is not one Stripe documents")
    evidence = obj.get("evidence_details")
    due_by = _unix(evidence.get("due_by")) if isinstance(evidence, dict) else None
    return DisputeNotice(
        dispute_reference=dispute_reference,
        amount=from_stripe_amount(amount, currency.upper()),
        currency=currency.upper(),
        reason=_text(obj, "reason") or "",
        status=status,
        evidence_due_by=due_by,
        provider_status=provider_status,
    )
