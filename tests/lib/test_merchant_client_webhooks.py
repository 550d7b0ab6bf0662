"""verify_webhook: deliveries signed by standardwebhooks' own signer and by a hand-computed
HMAC-SHA256 per Standard Webhooks 1.0 (issue 13's contract) verify into typed events; every
kind of tampering, a stale timestamp and malformed headers are refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks

from merchant_client import (
    Event,
    Payment,
    Refund,
    WebhookPayloadInvalid,
    WebhookVerificationFailed,
    verify_webhook,
)
from tests.lib.test_merchant_client_retry import PAYMENT, REFUND

KEY = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(KEY).decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"another key, 32 bytes long......").decode()


def event(obj: dict, event_type: str = "payment.succeeded") -> bytes:
    document = {
        "id": "evt_0123456789abcdef01234567",
        "object": "event",
        "type": event_type,
        "created_at": "2026-12-01T12:00:02.5Z",
        "data": {"object": obj},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def library_headers(body: bytes, secret: str = SECRET, at: float | None = None) -> dict:
    """Signed by standardwebhooks' own `sign`."""
    timestamp = datetime.fromtimestamp(time.time() if at is None else at, tz=UTC)
    signature = standardwebhooks.Webhook(secret).sign(
        "evt_0123456789abcdef01234567", timestamp, body.decode()
    )
    return {
        "webhook-id": "evt_0123456789abcdef01234567",
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": signature,
    }


def hand_headers(body: bytes, key: bytes = KEY, at: int | None = None) -> dict:
    """Signed by hand, per the spec: base64(HMAC-SHA256(key, f"{id}.{timestamp}.{body}"))."""
    timestamp = int(time.time()) if at is None else at
    message = b"evt_0123456789abcdef01234567." + str(timestamp).encode() + b"." + body
    digest = base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()
    return {
        "Webhook-Id": "evt_0123456789abcdef01234567",
        "Webhook-Timestamp": str(timestamp),
        "Webhook-Signature": f"v1,{digest}",
    }


@pytest.mark.parametrize("sign", [library_headers, hand_headers])
def test_a_signed_payment_event_verifies_into_a_typed_event(sign):
    body = event(PAYMENT)
    headers = sign(body)
    verified = verify_webhook(headers, body, SECRET)

    assert isinstance(verified, Event)
    assert verified.id == "evt_0123456789abcdef01234567" == verified.webhook_id
    assert verified.type == "payment.succeeded"
    assert verified.created_at == datetime(2026, 12, 1, 12, 0, 2, 500000, tzinfo=UTC)
    assert isinstance(verified.object, Payment) and verified.object.id == PAYMENT["id"]
    assert verified.object.amount == 1999
    assert verified.timestamp == int(
        headers.get("webhook-timestamp") or headers["Webhook-Timestamp"]
    )


def test_a_refund_event_carries_a_refund():
    body = event({**REFUND, "status": "succeeded"}, "refund.succeeded")
    verified = verify_webhook(hand_headers(body), body.decode(), SECRET)

    assert isinstance(verified.object, Refund) and verified.object.status == "succeeded"


def test_during_a_rotation_either_secret_verifies():
    """Both signatures in the header (space-separated): the old and the new secret verify."""
    body = event(PAYMENT)
    old, new = hand_headers(body), library_headers(body, OTHER_SECRET)
    headers = {**old, "Webhook-Signature": f"{new['webhook-signature']} {old['Webhook-Signature']}"}

    assert verify_webhook(headers, body, SECRET).id.startswith("evt_")
    assert verify_webhook(headers, body, OTHER_SECRET).id.startswith("evt_")


def tampered(case: str) -> tuple[bytes, dict]:
    """The delivery of ``case``, signed now (never at collection: the suite may run for
    minutes before this test, and a stale "good" timestamp would be refused for that reason)."""
    body = event(PAYMENT)
    good = hand_headers(body)
    signature = good["Webhook-Signature"]
    now = int(time.time())
    cases = {
        "body changed": (body.replace(b"1999", b"9999"), good),
        "id changed": (body, {**good, "Webhook-Id": "evt_other"}),
        "timestamp changed": (body, {**good, "Webhook-Timestamp": str(now - 1)}),
        "another secret": (body, hand_headers(body, key=b"x" * 32)),
        "stale": (body, hand_headers(body, at=now - 600)),
        "from the future": (body, hand_headers(body, at=now + 600)),
        "no signature": (body, {k: v for k, v in good.items() if k != "Webhook-Signature"}),
        "no id": (body, {k: v for k, v in good.items() if k != "Webhook-Id"}),
        "v2 only": (body, {**good, "Webhook-Signature": signature.replace("v1,", "v2,")}),
        "no comma": (body, {**good, "Webhook-Signature": "v1" + signature[3:]}),
        "bad base64": (body, {**good, "Webhook-Signature": "v1,@@@"}),
        "timestamp not a number": (body, {**good, "Webhook-Timestamp": "soon"}),
        "not utf-8": (b"\xff" + body, good),
    }
    return cases[case]


TAMPERED = [
    "body changed", "id changed", "timestamp changed", "another secret", "stale",
    "from the future", "no signature", "no id", "v2 only", "no comma", "bad base64",
    "timestamp not a number", "not utf-8",
]  # fmt: skip


@pytest.mark.parametrize("case", TAMPERED)
def test_tampered_or_malformed_deliveries_are_refused(case):
    body, headers = tampered(case)
    with pytest.raises(WebhookVerificationFailed) as raised:
        verify_webhook(headers, body, SECRET)
    assert SECRET not in str(raised.value)


def test_the_untampered_delivery_of_those_cases_verifies():
    """The cases above start from a delivery that verifies, so each refusal is its change's."""
    body = event(PAYMENT)
    assert verify_webhook(hand_headers(body), body, SECRET).id.startswith("evt_")


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_!!!"])
def test_an_unusable_secret_is_refused(secret):
    body = event(PAYMENT)
    with pytest.raises(WebhookVerificationFailed):
        verify_webhook(hand_headers(body), body, secret)


@pytest.mark.parametrize(
    "document",
    [
        {"id": "evt_1", "object": "payment"},
        {"id": "x_1", "object": "event", "type": "t", "created_at": "2026-12-01T12:00:00Z",
         "data": {}},
        {"id": "evt_1", "object": "event", "type": "t", "created_at": "yesterday", "data": {}},
        {"id": "evt_1", "object": "event", "type": "payment.succeeded",
         "created_at": "2026-12-01T12:00:00Z", "data": {"object": {"object": "payment"}}},
        [],
    ],
)  # fmt: skip
def test_a_signed_body_that_is_not_an_event_is_refused(document):
    body = json.dumps(document).encode()
    with pytest.raises(WebhookPayloadInvalid):
        verify_webhook(hand_headers(body), body, SECRET)


def test_an_object_kind_this_client_does_not_know_is_kept_raw():
    body = event({"object": "dispute", "id": "dp_1"}, "dispute.created")
    verified = verify_webhook(hand_headers(body), body, SECRET)

    assert verified.object is None and verified.data["object"]["id"] == "dp_1"
