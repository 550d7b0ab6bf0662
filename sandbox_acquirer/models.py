"""The sandbox acquirer's resources: the charge, its request, and canonical JSON.

A charge is the acquirer's record of one card payment attempt. Amounts are integers in the
currency's minor units (``1050`` with ``"EUR"`` is 10.50 EUR); currencies are ISO 4217
alphabetic codes; times are RFC 3339 UTC strings with a ``Z`` suffix, to the second.

Nothing here does I/O or keeps state; ``store`` keeps charges, ``app`` renders them.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "MAX_TEXT_LENGTH",
    "Charge",
    "ChargeRequest",
    "ChargeStatus",
    "InvalidRequest",
    "StoredResponse",
    "canonical_json",
    "format_timestamp",
    "new_charge_id",
    "parse_charge_request",
    "parse_json_body",
]

#: Longest accepted ``payment_method`` and ``reference``, in characters.
MAX_TEXT_LENGTH = 255

ChargeStatus = Literal["approved", "declined"]

_CURRENCY = re.compile(r"[A-Z]{3}")
_ID_ALPHABET = string.ascii_letters + string.digits
_CHARGE_FIELDS = frozenset({"amount", "currency", "payment_method", "reference"})


class InvalidRequest(ValueError):
    """The request is malformed; answered with 400 and never recorded.

    ``detail`` is a human-readable sentence for the problem body.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ChargeRequest:
    """A validated ``POST /charges`` body.

    ``amount`` is a positive integer in minor units, ``currency`` three upper-case ASCII
    letters, ``payment_method`` a ``tok_...`` token and ``reference`` the merchant's own
    reference (an order id, say), both 1 to 255 characters.
    """

    amount: int
    currency: str
    payment_method: str
    reference: str

    def as_dict(self) -> dict[str, Any]:
        """The request as a JSON-ready dict, the input of the idempotency fingerprint."""
        return {
            "amount": self.amount,
            "currency": self.currency,
            "payment_method": self.payment_method,
            "reference": self.reference,
        }


@dataclass(frozen=True, slots=True)
class Charge:
    """One recorded charge, approved or declined.

    ``id`` is ``ch_`` followed by 24 random letters and digits; ``decline_code`` is ``None``
    when approved; ``created_at`` is an aware UTC datetime.
    """

    id: str
    status: ChargeStatus
    decline_code: str | None
    amount: int
    currency: str
    reference: str
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The public representation, as in the 201 body and the lookup list."""
        return {
            "id": self.id,
            "status": self.status,
            "decline_code": self.decline_code,
            "amount": self.amount,
            "currency": self.currency,
            "reference": self.reference,
            "created_at": format_timestamp(self.created_at),
        }


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response kept for an idempotency key and replayed as is.

    ``body`` is the exact bytes first sent, so a replay is byte-identical.
    """

    status: int
    body: bytes
    content_type: str = "application/json"


def new_charge_id() -> str:
    """A fresh charge id: ``ch_`` and 24 characters of [A-Za-z0-9] from ``secrets``."""
    return "ch_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def format_timestamp(moment: datetime) -> str:
    """``moment`` (aware) as RFC 3339 UTC to the second, e.g. ``2026-11-29T17:00:00Z``."""
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_json(value: Any) -> bytes:
    """``value`` as compact JSON with sorted keys, UTF-8: equal data gives equal bytes.

    Used both to compare idempotent requests (key order and whitespace do not matter) and
    to render response bodies.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def parse_json_body(body: bytes) -> Any:
    """Decode a UTF-8 JSON body strictly.

    Rejects, with ``InvalidRequest``: invalid UTF-8 or JSON, ``NaN``/``Infinity`` and
    duplicate object keys (ambiguous: which one did the client mean?).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest("The body is not valid UTF-8.") from exc
    try:
        return json.loads(
            text, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant
        )
    except InvalidRequest:
        raise
    except ValueError as exc:  # json.JSONDecodeError, or an integer too long to convert
        raise InvalidRequest("The body is not valid JSON.") from exc


def parse_charge_request(data: Any) -> ChargeRequest:
    """Validate a decoded ``POST /charges`` body into a ``ChargeRequest``.

    Raises ``InvalidRequest`` naming the first problem found: not an object, an unknown or
    missing field, an amount that is not a positive integer (``true``, ``1.0`` and ``"5"``
    are refused), a currency that is not three upper-case letters, a ``payment_method`` that
    does not start with ``tok_``, or an empty or over-long string.
    """
    if not isinstance(data, Mapping):
        raise InvalidRequest("The body must be a JSON object.")
    unknown = sorted(set(data) - _CHARGE_FIELDS)
    if unknown:
        raise InvalidRequest(f"Unknown field(s): {', '.join(unknown)}.")
    missing = sorted(_CHARGE_FIELDS - set(data))
    if missing:
        raise InvalidRequest(f"Missing field(s): {', '.join(missing)}.")

    amount = data["amount"]
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise InvalidRequest("amount must be a positive integer in minor units.")
    currency = data["currency"]
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise InvalidRequest("currency must be three upper-case letters (ISO 4217), e.g. EUR.")
    payment_method = _text(data, "payment_method")
    if not payment_method.startswith("tok_"):
        raise InvalidRequest("payment_method must be a token starting with tok_.")
    reference = _text(data, "reference")
    return ChargeRequest(
        amount=amount, currency=currency, payment_method=payment_method, reference=reference
    )


def _text(data: Mapping[str, Any], field: str) -> str:
    value = data[field]
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{field} must be a non-empty string.")
    if len(value) > MAX_TEXT_LENGTH:
        raise InvalidRequest(f"{field} must be at most {MAX_TEXT_LENGTH} characters.")
    return value


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise InvalidRequest(f"Duplicate key in JSON object: {key}.")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise InvalidRequest(f"{name} is not valid JSON.")
