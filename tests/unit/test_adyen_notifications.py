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

from gateway_client import NotificationRejected
from gateway_client.adyen_notifications import (
    AdyenNotifications,
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


# -- the service's connector (AdyenNotifications) ---------------------------------------------


def _connector(*keys: str, account: str | None = None) -> AdyenNotifications:
    return AdyenNotifications(keys or (KEY,), merchant_account=account or _ACCOUNT)


_ACCOUNT = json.loads(VECTORS[0].read_text())["merchantAccountCode"]


@pytest.mark.parametrize("path", VECTORS, ids=[path.stem for path in VECTORS])
def test_the_connector_verifies_the_sdks_items_with_either_key_of_a_rotation(path: Path) -> None:
    item = json.loads(path.read_text())
    raw = body(item)
    _connector(KEY).verify(raw, {})
    _connector("ab" * 32, KEY).verify(raw, {})  # the newer key first, the older still signs
    with pytest.raises(NotificationRejected) as refused:
        _connector("ab" * 32).verify(raw, {})
    assert refused.value.reason == "bad_signature"
    assert "ab" * 4 not in str(refused.value) and KEY[:8] not in str(refused.value)


def test_an_item_for_another_merchant_account_or_unsigned_is_refused() -> None:
    item = json.loads(VECTORS[0].read_text())
    with pytest.raises(NotificationRejected) as refused:
        _connector(account="SomeoneElse").verify(body(item), {})
    assert refused.value.reason == "bad_signature"
    unsigned = {k: v for k, v in item.items() if k != "additionalData"}
    with pytest.raises(NotificationRejected) as refused:
        _connector().verify(body(item, unsigned), {})  # one bad item refuses the batch
    assert refused.value.reason == "missing_signature"
    with pytest.raises(NotificationRejected) as refused:
        _connector().verify(b"[accepted]", {})
    assert refused.value.reason == "malformed"
    with pytest.raises(ValueError, match="hex"):
        AdyenNotifications(("not-hex",), merchant_account=_ACCOUNT)
    assert KEY not in repr(_connector())


def _item(event: str, **fields: Any) -> dict[str, Any]:
    return {
        "pspReference": "8816000000000001",
        "merchantAccountCode": _ACCOUNT,
        "merchantReference": "op_1",
        "eventCode": event,
        "success": "true",
        "amount": {"value": 1000, "currency": "EUR"},
        **fields,
    }


def test_parse_maps_each_event_to_what_it_is_about() -> None:
    items = [
        _item("AUTHORISATION", merchantReference="pay_1", eventDate="2026-12-01T10:00:00+01:00"),
        _item("CAPTURE", originalReference="8816000000000000"),
        _item("REFUND_FAILED", originalReference="8816000000000000", merchantReference="re_1"),
        _item("CANCELLATION", originalReference="8816000000000000", success="false"),
        _item(
            "CHARGEBACK",
            originalReference="8816000000000000",
            merchantReference="pay_1",
            additionalData={"disputeStatus": "Lost", "chargebackReasonCode": "10.4"},
        ),
        _item("REPORT_AVAILABLE", merchantReference="report"),
    ]
    auth, capture, refund, void, chargeback, report = _connector().parse(body(*items))
    assert (auth.subject, auth.payment_reference, auth.acquirer_reference, auth.outcome) == (
        "payment", "pay_1", "8816000000000001", None,
    )  # fmt: skip
    assert (
        auth.occurred_at is not None and auth.occurred_at.isoformat() == "2026-12-01T09:00:00+00:00"
    )
    assert auth.event_id == "AUTHORISATION:8816000000000001:pay_1:true"
    assert auth.authorised is True  # Adyen's word on the payment (ends a customer action)
    (refused,) = _connector().parse(body(_item("AUTHORISATION", success="false")))
    assert refused.authorised is False
    assert capture.authorised is None and void.authorised is None
    assert capture.subject == "payment" and capture.acquirer_reference == "8816000000000000"
    assert capture.outcome is not None
    assert (capture.outcome.operation, capture.outcome.applied, capture.outcome.amount) == (
        "capture", True, 1000,
    )  # fmt: skip
    assert (capture.outcome.reference, capture.outcome.acquirer_reference) == (
        "op_1", "8816000000000001",
    )  # fmt: skip
    assert refund.subject == "refund" and refund.refund_reference == "re_1"
    assert refund.outcome is not None and not refund.outcome.applied
    assert refund.outcome.failure_code == "adyen_refund_failed"
    assert void.outcome is not None and (void.outcome.operation, void.outcome.applied) == (
        "void", False,
    )  # fmt: skip
    assert chargeback.subject == "dispute" and chargeback.dispute is not None
    assert (chargeback.dispute.dispute_reference, chargeback.dispute.status) == (
        "8816000000000000", "lost",
    )  # fmt: skip
    assert (chargeback.dispute.reason, chargeback.dispute.amount) == ("10.4", 1000)
    assert report.subject == "other" and report.outcome is None
    assert _connector().acknowledgement() == (200, b"[accepted]", "text/plain; charset=utf-8")
    with pytest.raises(NotificationRejected) as refused:
        _connector().parse(body(_item("CAPTURE")))  # a modification needs its payment
    assert refused.value.reason == "malformed"
