"""Adyen's notification HMAC and parser (gateway_client/adyen_notifications.py) on Adyen's own
published examples (tests/data/adyen/util/, from Adyen's Python SDK, MIT): merchant references
with `\\`, `:` and `/`, which break an implementation that escapes them; the SDK's documented
item and key; a changed field or a wrong key refused; the body parsed into items; what each
event settles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway_client.adyen_notifications import (
    NotificationError,
    item_outcome,
    notification_items,
    signature,
    signature_valid,
    signed_payload,
)

UTIL = Path(__file__).parents[1] / "data" / "adyen" / "util"
KEY = "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174"
VECTORS = sorted(UTIL.glob("*_notification.json"))


def body(*items: dict[str, Any]) -> bytes:
    wrapped = [{"NotificationRequestItem": item} for item in items]
    return json.dumps({"live": "false", "notificationItems": wrapped}).encode()


@pytest.mark.parametrize("path", VECTORS, ids=[path.stem for path in VECTORS])
def test_the_sdks_signed_items_verify(path: Path) -> None:
    item = json.loads(path.read_text())
    assert signature_valid(item, KEY)
    assert signature(item, KEY) == item["additionalData"]["hmacSignature"]
    assert signature_valid(item, KEY.lower())  # hex digits in either case


@pytest.mark.parametrize("path", VECTORS, ids=[path.stem for path in VECTORS])
def test_the_merchant_reference_is_signed_as_it_is_not_escaped(path: Path) -> None:
    item = json.loads(path.read_text())
    assert item["merchantReference"] in signed_payload(item)
    escaped = dict(item, merchantReference=item["merchantReference"].replace(":", "\\:"))
    if escaped["merchantReference"] != item["merchantReference"]:
        assert not signature_valid(escaped, KEY)


def test_the_sdks_documented_item_and_key() -> None:
    item = {
        "pspReference": "7914073381342284",
        "merchantReference": "TestPayment-1407325143704",
        "merchantAccountCode": "TestMerchant",
        "amount": {"currency": "EUR", "value": 1130},
        "eventCode": "AUTHORISATION",
        "success": "true",
    }
    key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
    assert signature(item, key) == "coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0="


@pytest.mark.parametrize(
    "change",
    [
        {"merchantReference": "another"},
        {"amount": {"currency": "EUR", "value": 1001}},
        {"success": "false"},
        {"eventCode": "CAPTURE"},
        {"additionalData": {}},
    ],
    ids=["reference", "amount", "success", "event", "no-signature"],
)
def test_a_changed_field_or_a_missing_signature_is_refused(change: dict[str, Any]) -> None:
    item = json.loads(VECTORS[0].read_text()) | change
    assert not signature_valid(item, KEY)


def test_a_wrong_key_fails_and_a_bad_key_is_a_configuration_error() -> None:
    item = json.loads(VECTORS[0].read_text())
    assert not signature_valid(item, "00" * 32)
    with pytest.raises(ValueError, match="hex digits") as raised:
        signature(item, "not-hex-" + KEY)
    assert KEY not in str(raised.value)


def test_a_body_is_parsed_into_items_in_our_minor_units() -> None:
    authorisation = json.loads(VECTORS[0].read_text())
    capture_failed = {
        "pspReference": "MOD0000000000001",
        "originalReference": authorisation["pspReference"],
        "merchantAccountCode": "AcmeECOM",
        "merchantReference": "op_0123",
        "amount": {"currency": "ISK", "value": 50000},
        "eventCode": "CAPTURE_FAILED",
        "success": "true",
        "reason": "Insufficient balance on payment",
    }
    first, second = notification_items(body(authorisation, capture_failed))
    assert (first.event_code, first.success, first.amount, first.currency) == (
        "AUTHORISATION", True, 1000, "EUR",
    )  # fmt: skip
    assert first.merchant_reference == authorisation["merchantReference"]
    assert (second.original_reference, second.amount, second.currency) == (
        authorisation["pspReference"], 500, "ISK",  # Adyen's ISK has two decimals, ours none
    )  # fmt: skip
    outcome = item_outcome(second)
    assert outcome is not None
    assert (outcome.operation, outcome.applied, outcome.failure_code) == (
        "capture", False, "adyen_capture_failed",
    )  # fmt: skip
    assert outcome.acquirer_reference == "MOD0000000000001"
    assert item_outcome(first).operation == "authorize"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("event", "success", "operation", "applied"),
    [
        ("CAPTURE", "true", "capture", True),
        ("CAPTURE", "false", "capture", False),
        ("CANCELLATION", "true", "void", True),
        ("REFUND", "true", "refund", True),
        ("REFUND_FAILED", "true", "refund", False),
        ("REPORT_AVAILABLE", "true", None, None),
    ],
)
def test_what_each_event_settles(event: str, success: str, operation: Any, applied: Any) -> None:
    item = {
        "pspReference": "MOD1", "originalReference": "PAY1", "merchantAccountCode": "A",
        "merchantReference": "op_1", "eventCode": event, "success": success,
    }  # fmt: skip
    (parsed,) = notification_items(body(item))
    outcome = item_outcome(parsed)
    if operation is None:
        assert outcome is None
    else:
        assert outcome is not None
        assert (outcome.operation, outcome.applied) == (operation, applied)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"notificationItems": []}',
        b'{"notificationItems": [{"Other": {}}]}',
        body(
            {
                "pspReference": "P",
                "merchantReference": "r",
                "merchantAccountCode": "A",
                "eventCode": "CAPTURE",
                "success": "maybe",
            }
        ),
        body(
            {
                "pspReference": "P",
                "merchantReference": "r",
                "merchantAccountCode": "A",
                "eventCode": "CAPTURE",
                "success": "true",
                "amount": {"value": 1.5, "currency": "EUR"},
            }
        ),
        body(
            {
                "merchantReference": "r",
                "merchantAccountCode": "A",
                "eventCode": "CAPTURE",
                "success": "true",
            }
        ),
    ],
    ids=["not-json", "array", "empty", "unwrapped", "success", "amount", "psp"],
)
def test_a_malformed_body_is_a_typed_error_naming_the_field(raw: bytes) -> None:
    with pytest.raises(NotificationError) as raised:
        notification_items(raw)
    assert "slashes" not in str(raised.value)
