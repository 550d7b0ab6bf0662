"""Standard Webhooks 1.0 signatures, our own code (the tests check them with the
``standardwebhooks`` package's verifier, an independent implementation).

A secret is ``whsec_`` + the base64 of 32 random bytes; the HMAC key is the decoded bytes. A
delivery carries ``webhook-id`` (the event id, the same on every retry), ``webhook-timestamp``
(integer Unix seconds of this attempt) and ``webhook-signature``: ``v1,<base64 of
HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``, one per signing secret, separated by spaces
(during a rotation, the new secret's and the old one's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

__all__ = ["SECRET_PREFIX", "new_secret", "signature", "webhook_headers"]

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret


def new_secret() -> str:
    """A new signing secret: ``whsec_`` + base64 of 32 random bytes (256 bits)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("a signing secret starts with whsec_")
    return base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)


def signature(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of ``{msg_id}.{timestamp}.{body}`` keyed by ``secret``'s
    decoded bytes (Standard Webhooks 1.0, "Signature scheme"). ``timestamp``: Unix seconds."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def webhook_headers(
    signing_secrets: list[str], *, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers of one delivery attempt: ``webhook-id``, ``webhook-timestamp``,
    ``webhook-signature`` (one ``v1,`` signature per secret, space-separated) and the JSON
    ``content-type``. Never log them: the signature is a credential for this body."""
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, msg_id=msg_id, timestamp=timestamp, body=body)
            for secret in signing_secrets
        ),
    }
