"""
The acquirer's wire format: the JSON we send and the JSON we accept back.

Decoding is strict: anything that is not the documented charge object raises `MalformedBody`,
which the client turns into a `MalformedResponseError` (an ambiguous outcome). Reasons name the
field and the problem, never the value.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from .types import Authorization, AuthorizationRequest

__all__ = ["MalformedBody", "decode_charge", "decode_charge_list", "encode_authorization"]

_CURRENCY = re.compile(r"[A-Z]{3}")
_STATUSES = {"approved": True, "declined": False}


class MalformedBody(ValueError):
    """The body is not the documented JSON; the message says why without quoting it."""


def encode_authorization(request: AuthorizationRequest) -> bytes:
    """Return the JSON body of `POST /charges` for this request."""
    return json.dumps(
        {
            "amount": request.amount,
            "currency": request.currency,
            "payment_method": request.payment_method,
            "reference": request.payment_reference,  # the wire keeps its name
        },
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode("ascii")


def decode_charge(body: bytes, *, replayed: bool = False) -> Authorization:
    """Return the Authorization described by a charge object body."""
    return _charge(_load(body), replayed=replayed, where="body")


def decode_charge_list(body: bytes) -> list[Authorization]:
    """Return the Authorizations of a `{"data": [charge, ...]}` body."""
    document = _load(body)
    if not isinstance(document, dict):
        raise MalformedBody("body is not a JSON object")
    items = document.get("data")
    if not isinstance(items, list):
        raise MalformedBody("field 'data' is missing or not a list")
    return [_charge(item, replayed=False, where=f"data[{i}]") for i, item in enumerate(items)]


def _reject_constant(name: str) -> Any:
    raise MalformedBody(f"body contains the non-JSON constant {name}")


def _load(body: bytes) -> Any:
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except MalformedBody:
        raise
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MalformedBody("body is not valid JSON") from None


def _charge(document: Any, *, replayed: bool, where: str) -> Authorization:
    if not isinstance(document, dict):
        raise MalformedBody(f"{where} is not a JSON object")

    def field(name: str, kind: type, *, nullable: bool = False) -> Any:
        if name not in document:
            raise MalformedBody(f"{where}: field {name!r} is missing")
        value = document[name]
        if value is None and nullable:
            return None
        # bool is an int in Python, and must not pass for an amount.
        if type(value) is not kind:
            raise MalformedBody(f"{where}: field {name!r} is not a {kind.__name__}")
        return value

    acquirer_reference = field("id", str)
    if not acquirer_reference:
        raise MalformedBody(f"{where}: field 'id' is empty")
    status = field("status", str)
    if status not in _STATUSES:
        raise MalformedBody(f"{where}: field 'status' is neither 'approved' nor 'declined'")
    approved = _STATUSES[status]
    decline_code = field("decline_code", str, nullable=True)
    if approved and decline_code is not None:
        raise MalformedBody(f"{where}: an approved charge carries a decline_code")
    amount = field("amount", int)
    if amount < 0:
        raise MalformedBody(f"{where}: field 'amount' is negative")
    currency = field("currency", str)
    if not _CURRENCY.fullmatch(currency):
        raise MalformedBody(f"{where}: field 'currency' is not an ISO 4217 alpha-3 code")
    payment_reference = field("reference", str)
    created_at = _timestamp(field("created_at", str), where=where)
    return Authorization(
        acquirer_reference=acquirer_reference,
        approved=approved,
        decline_code=decline_code,
        amount=amount,
        currency=currency,
        payment_reference=payment_reference,
        created_at=created_at,
        replayed=replayed,
    )


def _timestamp(value: str, *, where: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise MalformedBody(f"{where}: field 'created_at' is not an ISO 8601 timestamp") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise MalformedBody(f"{where}: field 'created_at' has no UTC offset")
    return parsed.astimezone(UTC)
