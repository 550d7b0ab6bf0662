"""The sandbox acquirer's resources: the charge, the refund, their requests, canonical JSON.

A charge is the acquirer's record of one card payment attempt: an authorization that is
captured at once (``capture`` omitted or ``true``) or held until a capture or a void
(``capture: false``). A refund gives back part or all of a captured charge. Amounts are
integers in the currency's minor units (``1050`` with ``"EUR"`` is 10.50 EUR); currencies are
ISO 4217 alphabetic codes; times are RFC 3339 UTC strings with a ``Z`` suffix, to the second.

The acquirer's own rules for the lifecycle live here as pure functions on the frozen values
(``Charge.captured_by``, ``Charge.voided_at_time``, ``Charge.refundable``), raising
``OperationRefused`` with the 4xx ``code`` to answer; ``store`` applies them under its lock, so
concurrent captures or refunds of one charge are decided one at a time::

    approved, capture omitted/true  -> captured (amount_captured = amount)
    approved, capture false         -> authorized --capture(N <= amount)--> captured (N)
                                                  --void---------------> voided
    captured                        --refund(N <= amount_captured - amount_refunded)--> captured
    declined                        -> nothing further is allowed
    requires_action (tok_3ds_challenge with a return_url: the shopper's 3-D Secure challenge)
                                    --Approve on the challenge page--> approved (as above)
                                    --Deny--> declined (authentication_failed)
                                    --void--> canceled (voided; never authorized)

Nothing here does I/O or keeps state; ``store`` keeps charges and refunds, ``app`` renders them.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "MAX_TEXT_LENGTH",
    "CaptureRequest",
    "Charge",
    "ChargeRequest",
    "ChargeStatus",
    "InvalidRequest",
    "OperationRefused",
    "Refund",
    "RefundRequest",
    "RefundStatus",
    "StoredResponse",
    "VoidRequest",
    "canonical_json",
    "format_timestamp",
    "new_charge_id",
    "new_refund_id",
    "parse_capture_request",
    "parse_charge_request",
    "parse_json_body",
    "parse_refund_request",
    "parse_void_request",
]

#: Longest accepted ``payment_method`` and ``reference``, in characters.
MAX_TEXT_LENGTH = 255

ChargeStatus = Literal["approved", "declined", "requires_action", "canceled"]
RefundStatus = Literal["succeeded", "failed"]

_CURRENCY = re.compile(r"[A-Z]{3}")
_ID_ALPHABET = string.ascii_letters + string.digits
_CHARGE_FIELDS = frozenset({"amount", "currency", "payment_method", "reference"})
_CHARGE_OPTIONAL_FIELDS = frozenset({"capture", "return_url"})
#: Longest accepted ``return_url``, in characters.
MAX_URL_LENGTH = 2048
_REFUND_FIELDS = frozenset({"charge", "reference"})
_REFUND_OPTIONAL_FIELDS = frozenset({"amount"})


class InvalidRequest(ValueError):
    """The request is malformed; answered with 400 and never recorded.

    ``detail`` is a human-readable sentence for the problem body.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class OperationRefused(Exception):
    """The acquirer's own rules refuse a capture, void or refund of a charge.

    ``status`` is 404 (``charge_not_found``) or 422 (a rule: ``charge_already_captured``,
    ``charge_already_voided``, ``charge_not_captured``, ``charge_declined``,
    ``charge_already_refunded``, ``amount_exceeds_capturable``,
    ``amount_exceeds_refundable``); ``detail`` is a sentence for the problem body. Nothing is
    recorded and the idempotency key stays free (see docs/sandbox.md).
    """

    def __init__(self, code: str, detail: str, status: int = 422) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.status = status


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
    #: ``None`` when the body has no ``capture`` field (captured at once, today's answer
    #: shape); ``True``/``False`` when given (``False``: authorize only).
    capture: bool | None = None
    #: Where the challenge page sends the shopper back (``http(s)://``, at most 2048); None:
    #: no shopper can come back, so a token asking for the challenge is declined.
    return_url: str | None = None

    @property
    def captures_now(self) -> bool:
        """Whether an approval is captured at once (``capture`` omitted or ``true``)."""
        return self.capture is not False

    def as_dict(self) -> dict[str, Any]:
        """The request as a JSON-ready dict, the input of the idempotency fingerprint.

        ``capture`` appears only when the body gave it, so a body without it has the same
        fingerprint as before the field existed.
        """
        result: dict[str, Any] = {
            "amount": self.amount,
            "currency": self.currency,
            "payment_method": self.payment_method,
            "reference": self.reference,
        }
        if self.capture is not None:
            result["capture"] = self.capture
        if self.return_url is not None:
            result["return_url"] = self.return_url
        return result


@dataclass(frozen=True, slots=True)
class CaptureRequest:
    """A validated ``POST /charges/{id}/capture`` body: ``amount`` in minor units, or
    ``None`` for the whole authorized amount."""

    amount: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The body as a JSON-ready dict (the fingerprint's input): ``{}`` or
        ``{"amount": N}``."""
        return {} if self.amount is None else {"amount": self.amount}


@dataclass(frozen=True, slots=True)
class VoidRequest:
    """A validated ``POST /charges/{id}/void`` body (always ``{}``)."""

    def as_dict(self) -> dict[str, Any]:
        """``{}``: the fingerprint's input."""
        return {}


@dataclass(frozen=True, slots=True)
class RefundRequest:
    """A validated ``POST /refunds`` body.

    ``charge`` is the charge id (``ch_...``); ``reference`` the caller's own id for the
    refund (1 to 255 characters), used by ``GET /refunds?reference=``; ``amount`` in minor
    units, or ``None`` for everything that remains refundable.
    """

    charge: str
    reference: str
    amount: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The body as a JSON-ready dict (the fingerprint's input)."""
        result: dict[str, Any] = {"charge": self.charge, "reference": self.reference}
        if self.amount is not None:
            result["amount"] = self.amount
        return result


@dataclass(frozen=True, slots=True)
class Charge:
    """One recorded charge, approved or declined, with its capture state.

    ``id`` is ``ch_`` followed by 24 random letters and digits; ``decline_code`` is ``None``
    when approved; ``created_at`` is an aware UTC datetime. ``status`` is the authorization's
    outcome and never changes; the capture state does: ``captured`` (with
    ``amount_captured`` > 0 and ``captured_at``), ``voided`` (with ``voided_at``), or
    neither (authorized, awaiting a capture or a void; or declined). ``amount_refunded`` is
    the sum of the charge's succeeded refunds, at most ``amount_captured``. Amounts are
    minor units of ``currency``.
    """

    id: str
    status: ChargeStatus
    decline_code: str | None
    amount: int
    currency: str
    reference: str
    created_at: datetime
    captured: bool = False
    amount_captured: int = 0
    amount_refunded: int = 0
    voided: bool = False
    captured_at: datetime | None = None
    voided_at: datetime | None = None
    #: A charge held for the shopper (``requires_action``): the challenge page's address, the
    #: shopper's way back, and whether an approval captures at once.
    action_url: str | None = None
    return_url: str | None = None
    capture_on_approval: bool = True

    @classmethod
    def record(
        cls,
        *,
        id: str,
        status: ChargeStatus,
        decline_code: str | None,
        request: ChargeRequest,
        created_at: datetime,
        action_url: str | None = None,
    ) -> Charge:
        """A new charge for ``request``: an approval is captured at once unless
        ``request.capture`` is ``False``; a decline is never captured; ``requires_action``
        (with ``action_url``, the challenge page) waits for the shopper."""
        capture = status == "approved" and request.captures_now
        return cls(
            action_url=action_url,
            return_url=request.return_url if status == "requires_action" else None,
            capture_on_approval=request.captures_now,
            id=id,
            status=status,
            decline_code=decline_code,
            amount=request.amount,
            currency=request.currency,
            reference=request.reference,
            created_at=created_at,
            captured=capture,
            amount_captured=request.amount if capture else 0,
            captured_at=created_at if capture else None,
        )

    @property
    def amount_refundable(self) -> int:
        """What can still be refunded: ``amount_captured - amount_refunded``."""
        return self.amount_captured - self.amount_refunded

    def captured_by(self, amount: int | None, at: datetime) -> Charge:
        """This charge captured for ``amount`` (``None``: the whole authorized amount) at
        ``at``; the rest of the authorization is released (single capture).

        Raises ``OperationRefused``: ``charge_declined``, ``charge_already_captured``,
        ``charge_already_voided``, ``amount_exceeds_capturable`` (``amount`` above the
        authorized amount).
        """
        self._require_authorized("captured")
        amount = self.amount if amount is None else amount
        if amount > self.amount:
            raise OperationRefused(
                "amount_exceeds_capturable",
                f"amount {amount} is above the authorized amount {self.amount}.",
            )
        return replace(self, captured=True, amount_captured=amount, captured_at=at)

    def voided_at_time(self, at: datetime) -> Charge:
        """This charge's authorization released at ``at``; a charge still waiting for the
        shopper is ``canceled`` (voided, never authorized: its challenge is closed).

        Raises ``OperationRefused``: ``charge_declined``, ``charge_already_captured``,
        ``charge_already_voided``.
        """
        if self.status == "requires_action":
            return replace(self, status="canceled", voided=True, voided_at=at)
        self._require_authorized("voided")
        return replace(self, voided=True, voided_at=at)

    def challenge_completed(self, approve: bool, at: datetime) -> Charge:
        """This charge after the shopper's 3-D Secure challenge at ``at``: approved
        (captured at once unless the request said ``capture: false``) or declined
        ``authentication_failed``.

        Raises ``OperationRefused`` 409 ``charge_not_awaiting_action`` for a charge that is
        not ``requires_action`` (answered already, or voided when the action expired).
        """
        if self.status != "requires_action":
            raise OperationRefused(
                "charge_not_awaiting_action",
                f"Charge {self.id} is {self.status}: its challenge is closed.",
                status=409,
            )
        if not approve:
            return replace(self, status="declined", decline_code="authentication_failed")
        capture = self.capture_on_approval
        return replace(
            self,
            status="approved",
            captured=capture,
            amount_captured=self.amount if capture else 0,
            captured_at=at if capture else None,
        )

    def refundable(self, amount: int | None) -> int:
        """The amount a refund of ``amount`` (``None``: all that remains) takes.

        Raises ``OperationRefused``: ``charge_declined``, ``charge_already_voided``,
        ``charge_not_captured``, ``charge_already_refunded`` (nothing remains, amount
        omitted), ``amount_exceeds_refundable`` (above captured minus refunded).
        """
        if self.status == "declined":
            raise OperationRefused("charge_declined", f"Charge {self.id} was declined.")
        if self.voided:
            raise OperationRefused("charge_already_voided", f"Charge {self.id} was voided.")
        if not self.captured:
            raise OperationRefused(
                "charge_not_captured", f"Charge {self.id} is not captured; void it instead."
            )
        remaining = self.amount_refundable
        if amount is None:
            if remaining == 0:
                raise OperationRefused(
                    "charge_already_refunded", f"Charge {self.id} is fully refunded."
                )
            return remaining
        if amount > remaining:
            raise OperationRefused(
                "amount_exceeds_refundable",
                f"amount {amount} is above what remains refundable ({remaining}).",
            )
        return amount

    def refunded_by(self, amount: int) -> Charge:
        """This charge with a succeeded refund of ``amount`` added (checked by
        ``refundable`` first)."""
        return replace(self, amount_refunded=self.amount_refunded + amount)

    def _require_authorized(self, verb: str) -> None:
        if self.status == "requires_action":
            raise OperationRefused(
                "charge_requires_action",
                f"Charge {self.id} waits for the shopper and cannot be {verb}.",
            )
        if self.status == "declined":
            raise OperationRefused(
                "charge_declined", f"Charge {self.id} was declined and cannot be {verb}."
            )
        if self.voided:
            raise OperationRefused("charge_already_voided", f"Charge {self.id} was voided.")
        if self.captured:
            raise OperationRefused(
                "charge_already_captured", f"Charge {self.id} is already captured."
            )

    def to_json(self, *, lifecycle: bool = True) -> dict[str, Any]:
        """The public representation, as in the 201 body and the lookup list.

        ``lifecycle=False`` leaves out the capture state: the 201 body of a
        ``POST /charges`` without a ``capture`` field, byte-identical to the answers before
        that field existed.
        """
        result: dict[str, Any] = {
            "id": self.id,
            "status": self.status,
            "decline_code": self.decline_code,
            "amount": self.amount,
            "currency": self.currency,
            "reference": self.reference,
            "created_at": format_timestamp(self.created_at),
        }
        if self.status == "requires_action":
            result["next_action"] = {"type": "redirect_to_url", "url": self.action_url}
        if lifecycle:
            result.update(
                captured=self.captured,
                amount_captured=self.amount_captured,
                amount_refunded=self.amount_refunded,
                voided=self.voided,
                captured_at=_optional_timestamp(self.captured_at),
                voided_at=_optional_timestamp(self.voided_at),
            )
        return result


@dataclass(frozen=True, slots=True)
class Refund:
    """One recorded refund of a captured charge.

    ``id`` is ``re_`` and 24 random letters and digits; ``charge`` the charge id;
    ``reference`` the caller's id for the refund; ``amount`` in minor units of ``currency``
    (the charge's); ``status`` ``succeeded`` (counted in the charge's ``amount_refunded``) or
    ``failed`` (refused by the acquirer, ``failure_code`` says why; counts for nothing);
    ``created_at`` aware UTC.
    """

    id: str
    charge: str
    amount: int
    currency: str
    reference: str
    status: RefundStatus
    failure_code: str | None
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The public representation: the 201 body and the look-up list."""
        return {
            "id": self.id,
            "object": "refund",
            "charge": self.charge,
            "amount": self.amount,
            "currency": self.currency,
            "reference": self.reference,
            "status": self.status,
            "failure_code": self.failure_code,
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


def new_refund_id() -> str:
    """A fresh refund id: ``re_`` and 24 characters of [A-Za-z0-9] from ``secrets``."""
    return "re_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def _optional_timestamp(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


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
    _check_fields(data, _CHARGE_FIELDS, _CHARGE_OPTIONAL_FIELDS)
    amount = _amount(data["amount"])
    capture = data.get("capture")
    if "capture" in data and not isinstance(capture, bool):
        raise InvalidRequest("capture must be true or false.")
    currency = data["currency"]
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise InvalidRequest("currency must be three upper-case letters (ISO 4217), e.g. EUR.")
    payment_method = _text(data, "payment_method")
    if not payment_method.startswith("tok_"):
        raise InvalidRequest("payment_method must be a token starting with tok_.")
    reference = _text(data, "reference")
    return_url = data.get("return_url")
    if "return_url" in data and (
        not isinstance(return_url, str)
        or not 0 < len(return_url) <= MAX_URL_LENGTH
        or not return_url.isascii()
        or not return_url.isprintable()
        or not return_url.startswith(("https://", "http://"))
    ):
        raise InvalidRequest(
            f"return_url must be an absolute http(s) URL of at most {MAX_URL_LENGTH} characters."
        )
    return ChargeRequest(
        amount=amount,
        currency=currency,
        payment_method=payment_method,
        reference=reference,
        capture=capture,
        return_url=return_url,
    )


def parse_capture_request(data: Any) -> CaptureRequest:
    """Validate a decoded ``POST /charges/{id}/capture`` body (``{}`` or
    ``{"amount": N}``, N a positive integer); raises ``InvalidRequest``."""
    _check_fields(data, frozenset(), frozenset({"amount"}))
    return CaptureRequest(amount=_amount(data["amount"]) if "amount" in data else None)


def parse_void_request(data: Any) -> VoidRequest:
    """Validate a decoded ``POST /charges/{id}/void`` body (``{}``); raises
    ``InvalidRequest``."""
    _check_fields(data, frozenset(), frozenset())
    return VoidRequest()


def parse_refund_request(data: Any) -> RefundRequest:
    """Validate a decoded ``POST /refunds`` body: ``charge`` and ``reference`` (non-empty
    strings of at most 255 characters), ``amount`` optional (a positive integer); raises
    ``InvalidRequest``."""
    _check_fields(data, _REFUND_FIELDS, _REFUND_OPTIONAL_FIELDS)
    return RefundRequest(
        charge=_text(data, "charge"),
        reference=_text(data, "reference"),
        amount=_amount(data["amount"]) if "amount" in data else None,
    )


def _check_fields(data: Any, required: frozenset[str], optional: frozenset[str]) -> None:
    if not isinstance(data, Mapping):
        raise InvalidRequest("The body must be a JSON object.")
    unknown = sorted(set(data) - required - optional)
    if unknown:
        raise InvalidRequest(f"Unknown field(s): {', '.join(unknown)}.")
    missing = sorted(required - set(data))
    if missing:
        raise InvalidRequest(f"Missing field(s): {', '.join(missing)}.")


def _amount(amount: Any) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise InvalidRequest("amount must be a positive integer in minor units.")
    return amount


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
