"""
The acquirer's wire format: the JSON we send and the JSON we accept back.

Bodies sent: `POST /charges` (an authorisation; `"capture": false` only for a manual one),
`POST /charges/{id}/capture` (`{}` or `{"amount": N}`), `POST /charges/{id}/void` (`{}`) and
`POST /refunds` (`{"charge", "amount"?, "reference"}`), compact JSON in ASCII.

Decoding is strict: anything that is not the documented charge or refund object raises
`MalformedBody`, which the client turns into a `MalformedResponseError` (an ambiguous outcome).
A charge's capture state (`captured`, `amount_captured`, `amount_refunded`, `voided`,
`captured_at`, `voided_at`) is all there or all absent, and must be consistent (refunded <=
captured <= amount; captured xor voided; the timestamps set exactly when the flags are).
Reasons name the field and the problem, never the value.

Headers: a call's `request_id` goes out as `X-Request-Id` (`REQUEST_ID_HEADER`), and an answer
replayed from the acquirer's idempotency store says so with `Idempotent-Replayed: true`
(`is_replayed`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from .types import (
    ActionRequired,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    Refund,
    RefundRequest,
    RefundStatus,
    is_page_url,
)

__all__ = [
    "REQUEST_ID_HEADER",
    "MalformedBody",
    "decode_charge",
    "decode_charge_list",
    "decode_charge_or_action",
    "decode_operated",
    "decode_refund",
    "decode_refund_list",
    "encode_authorization",
    "encode_capture",
    "encode_refund",
    "encode_void",
    "is_replayed",
    "load_json",
    "load_json_object",
]

#: The header carrying a call's `request_id` (the caller's id of the request behind the call,
#: so the acquirer's logs and ours can be joined); sent on every attempt.
REQUEST_ID_HEADER = "X-Request-Id"

_CURRENCY = re.compile(r"[A-Z]{3}")
#: A charge's status -> approved. `canceled`: a customer action voided before the shopper
#: finished it (never authorised; voided). `requires_action` is decoded as ActionRequired.
_STATUSES = {"approved": True, "declined": False, "canceled": False}
_REQUIRES_ACTION = "requires_action"
_REFUND_STATUSES: dict[str, RefundStatus] = {"succeeded": "succeeded", "failed": "failed"}
_CAPTURE_STATE = (
    "captured",
    "amount_captured",
    "amount_refunded",
    "voided",
    "captured_at",
    "voided_at",
)


class MalformedBody(ValueError):
    """The body is not the documented JSON; the message says why without quoting it."""


# Built once: json.dumps and json.loads with options build a new encoder or decoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


def _encode(document: dict[str, Any]) -> bytes:
    return _ENCODER.encode(document).encode("ascii")


def encode_authorization(request: AuthorizationRequest) -> bytes:
    """
    Return the JSON body of `POST /charges` for this request. `"capture": false` is added
    only for a manual capture: an automatic request's body (and so the acquirer's idempotency
    fingerprint and answer) is the one sent before the field existed.
    """
    document: dict[str, Any] = {
        "amount": request.amount,
        "currency": request.currency,
        "payment_method": request.payment_method,
        "reference": request.payment_reference,  # the wire keeps its name
    }
    if not request.capture:
        document["capture"] = False
    if request.return_url is not None:
        document["return_url"] = request.return_url
    return _encode(document)


def encode_capture(request: CaptureRequest) -> bytes:
    """The body of `POST /charges/{id}/capture`: `{}` (the whole amount) or `{"amount": N}`."""
    return _encode({} if request.amount is None else {"amount": request.amount})


def encode_void() -> bytes:
    """The body of `POST /charges/{id}/void`: `{}`."""
    return _encode({})


def encode_refund(request: RefundRequest) -> bytes:
    """The body of `POST /refunds`: the charge, the amount (omitted: all that remains), ours."""
    document: dict[str, Any] = {"charge": request.acquirer_reference}
    if request.amount is not None:
        document["amount"] = request.amount
    document["reference"] = request.refund_reference  # the wire keeps its name
    return _encode(document)


def decode_charge(body: bytes, *, replayed: bool = False) -> Authorization:
    """Return the Authorization described by a charge object body."""
    return _charge(_load(body), replayed=replayed, where="body")


def decode_charge_or_action(
    body: bytes, *, replayed: bool = False
) -> Authorization | ActionRequired:
    """The charge object of an authorization's answer: an Authorization, or ActionRequired
    for a charge held for the shopper (`"status": "requires_action"` with its
    `"next_action": {"type": "redirect_to_url", "url": ...}`)."""
    return _charge_or_action(_load(body), replayed=replayed, where="body")


def decode_operated(
    body: bytes, acquirer_reference: str, *, replayed: bool = False
) -> Authorization:
    """The charge a capture or void answered: that charge (`acquirer_reference`), with its
    capture state; MalformedBody for another charge or one without capture state."""
    charge = decode_charge(body, replayed=replayed)
    if charge.acquirer_reference != acquirer_reference:
        raise MalformedBody("the charge does not match the request (acquirer_reference)")
    if charge.captured is None:
        raise MalformedBody("the charge carries no capture state")
    return charge


def is_replayed(headers: Mapping[str, str]) -> bool:
    """True when the answer's `Idempotent-Replayed` header is `true` (case-insensitive, spaces
    ignored): the acquirer replayed a stored answer to an idempotency key it had seen."""
    return headers.get("idempotent-replayed", "").strip().lower() == "true"


def decode_charge_list(body: bytes) -> list[Authorization | ActionRequired]:
    """Return the charges of a `{"data": [charge, ...]}` body: Authorizations, and
    ActionRequired for one still held for the shopper."""
    items = _list(body)
    return [
        _charge_or_action(item, replayed=False, where=f"data[{i}]") for i, item in enumerate(items)
    ]


def decode_refund(body: bytes, *, replayed: bool = False) -> Refund:
    """Return the Refund described by a refund object body."""
    return _refund(_load(body), replayed=replayed, where="body")


def decode_refund_list(body: bytes) -> list[Refund]:
    """Return the Refunds of a `{"data": [refund, ...]}` body."""
    items = _list(body)
    return [_refund(item, replayed=False, where=f"data[{i}]") for i, item in enumerate(items)]


def _list(body: bytes) -> list[Any]:
    document = _load(body)
    if not isinstance(document, dict):
        raise MalformedBody("body is not a JSON object")
    items = document.get("data")
    if not isinstance(items, list):
        raise MalformedBody("field 'data' is missing or not a list")
    return items


class _Fields:
    """Typed, strict reads of one JSON object's fields (bool is never an int)."""

    def __init__(self, document: dict[str, Any], where: str) -> None:
        self.document = document
        self.where = where

    def get(self, name: str, kind: type, *, nullable: bool = False) -> Any:
        if name not in self.document:
            raise MalformedBody(f"{self.where}: field {name!r} is missing")
        value = self.document[name]
        if value is None and nullable:
            return None
        # bool is an int in Python, and must not pass for an amount.
        if type(value) is not kind:
            raise MalformedBody(f"{self.where}: field {name!r} is not a {kind.__name__}")
        return value

    def identifier(self, name: str) -> str:
        value: str = self.get(name, str)
        if not value:
            raise MalformedBody(f"{self.where}: field {name!r} is empty")
        return value

    def amount(self, name: str, *, positive: bool = False) -> int:
        value: int = self.get(name, int)
        if value < 0 or (positive and value == 0):
            raise MalformedBody(
                f"{self.where}: field {name!r} is {'not positive' if positive else 'negative'}"
            )
        return value

    def currency(self) -> str:
        value: str = self.get("currency", str)
        if not _CURRENCY.fullmatch(value):
            raise MalformedBody(f"{self.where}: field 'currency' is not an ISO 4217 alpha-3 code")
        return value

    def timestamp(self, name: str) -> datetime:
        return _timestamp(self.get(name, str), name=name, where=self.where)

    def optional_timestamp(self, name: str) -> datetime | None:
        value = self.get(name, str, nullable=True)
        return None if value is None else _timestamp(value, name=name, where=self.where)


def _reject_constant(name: str) -> Any:
    raise MalformedBody(f"body contains the non-JSON constant {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(body: bytes) -> Any:
    """`json.loads(body, parse_constant=_reject_constant)` with the decoder built once."""
    if isinstance(body, str):
        if body.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", body, 0)
        text = body
    else:
        text = body.decode(json.detect_encoding(body), "surrogatepass")
    return _DECODER.decode(text)


def load_json(body: bytes) -> Any:
    """The JSON document of `body` (UTF-8/16/32, no NaN or Infinity), else MalformedBody
    saying so without quoting it; every dialect decodes its answers with it."""
    return _load(body)


def load_json_object(body: bytes | None) -> dict[str, Any]:
    """`load_json` of `body` (None: empty), which must be a JSON object, else MalformedBody."""
    document = load_json(body or b"")
    if not isinstance(document, dict):
        raise MalformedBody("body is not a JSON object")
    return document


def _load(body: bytes) -> Any:
    try:
        return _loads(body)
    except MalformedBody:
        raise
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MalformedBody("body is not valid JSON") from None


def _charge_or_action(
    document: Any, *, replayed: bool, where: str
) -> Authorization | ActionRequired:
    if not isinstance(document, dict) or document.get("status") != _REQUIRES_ACTION:
        return _charge(document, replayed=replayed, where=where)
    fields = _Fields(document, where)
    action = fields.get("next_action", dict)
    url = _Fields(action, f"{where}.next_action").get("url", str)
    if action.get("type") != "redirect_to_url" or not is_page_url(url):
        raise MalformedBody(f"{where}: field 'next_action' is not a redirect to a page URL")
    return ActionRequired(
        acquirer_reference=fields.identifier("id"),
        url=url,
        amount=fields.amount("amount"),
        currency=fields.currency(),
        payment_reference=fields.get("reference", str),
        created_at=fields.timestamp("created_at"),
        replayed=replayed,
    )


def _charge(document: Any, *, replayed: bool, where: str) -> Authorization:
    if not isinstance(document, dict):
        raise MalformedBody(f"{where} is not a JSON object")
    fields = _Fields(document, where)
    acquirer_reference = fields.identifier("id")
    status = fields.get("status", str)
    if status not in _STATUSES:
        raise MalformedBody(f"{where}: field 'status' is not 'approved', 'declined' or 'canceled'")
    approved = _STATUSES[status]
    decline_code = fields.get("decline_code", str, nullable=True)
    if approved and decline_code is not None:
        raise MalformedBody(f"{where}: an approved charge carries a decline_code")
    amount = fields.amount("amount")
    currency = fields.currency()
    payment_reference = fields.get("reference", str)
    created_at = fields.timestamp("created_at")
    authorization = Authorization(
        acquirer_reference=acquirer_reference,
        approved=approved,
        decline_code=decline_code,
        amount=amount,
        currency=currency,
        payment_reference=payment_reference,
        created_at=created_at,
        replayed=replayed,
    )
    present = [name for name in _CAPTURE_STATE if name in document]
    if not present:
        return authorization
    if len(present) != len(_CAPTURE_STATE):
        missing = next(name for name in _CAPTURE_STATE if name not in document)
        raise MalformedBody(f"{where}: field {missing!r} of the capture state is missing")
    return _with_capture_state(authorization, fields, canceled=status == "canceled")


def _with_capture_state(
    authorization: Authorization, fields: _Fields, *, canceled: bool = False
) -> Authorization:
    where = fields.where
    captured = fields.get("captured", bool)
    voided = fields.get("voided", bool)
    amount_captured = fields.amount("amount_captured")
    amount_refunded = fields.amount("amount_refunded")
    captured_at = fields.optional_timestamp("captured_at")
    voided_at = fields.optional_timestamp("voided_at")
    if captured and voided:
        raise MalformedBody(f"{where}: a charge is both captured and voided")
    if not authorization.approved and (captured or voided != canceled):
        raise MalformedBody(f"{where}: a declined charge is captured or voided")
    if captured != (amount_captured > 0):
        raise MalformedBody(f"{where}: 'amount_captured' does not agree with 'captured'")
    if amount_captured > authorization.amount:
        raise MalformedBody(f"{where}: 'amount_captured' is above 'amount'")
    if amount_refunded > amount_captured:
        raise MalformedBody(f"{where}: 'amount_refunded' is above 'amount_captured'")
    if captured != (captured_at is not None) or voided != (voided_at is not None):
        raise MalformedBody(f"{where}: a capture-state timestamp does not agree with its flag")
    return dataclasses.replace(
        authorization,
        captured=captured,
        amount_captured=amount_captured,
        amount_refunded=amount_refunded,
        voided=voided,
        captured_at=captured_at,
        voided_at=voided_at,
    )


def _refund(document: Any, *, replayed: bool, where: str) -> Refund:
    if not isinstance(document, dict):
        raise MalformedBody(f"{where} is not a JSON object")
    fields = _Fields(document, where)
    if fields.get("object", str) != "refund":
        raise MalformedBody(f"{where}: field 'object' is not 'refund'")
    acquirer_reference = fields.identifier("id")
    charge = fields.identifier("charge")
    amount = fields.amount("amount", positive=True)
    currency = fields.currency()
    refund_reference = fields.get("reference", str)
    status = _REFUND_STATUSES.get(fields.get("status", str))
    if status is None:
        raise MalformedBody(f"{where}: field 'status' is neither 'succeeded' nor 'failed'")
    failure_code = fields.get("failure_code", str, nullable=True)
    if status == "succeeded" and failure_code is not None:
        raise MalformedBody(f"{where}: a succeeded refund carries a failure_code")
    created_at = fields.timestamp("created_at")
    return Refund(
        acquirer_reference=acquirer_reference,
        charge=charge,
        amount=amount,
        currency=currency,
        refund_reference=refund_reference,
        status=status,
        failure_code=failure_code,
        created_at=created_at,
        replayed=replayed,
    )


def _timestamp(value: str, *, name: str, where: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise MalformedBody(f"{where}: field {name!r} is not an ISO 8601 timestamp") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise MalformedBody(f"{where}: field {name!r} has no UTC offset")
    return parsed.astimezone(UTC)
