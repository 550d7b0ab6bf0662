"""
Adyen's dialect: the Checkout API v71 (https://docs.adyen.com/api-explorer/Checkout/71), JSON
bodies, the API key in `X-API-Key`.

- authorize: `POST /payments` with `merchantAccount`, `amount` (Adyen's minor units),
  `reference` (our payment id: Adyen's `merchantReference`), the card token as a stored
  payment method (`paymentMethod: {"type": "scheme", "storedPaymentMethodId": ...}`: our
  `spm_<id>` sent as `<id>`, any other token as it is, ADR 0051;
  `shopperInteraction: ContAuth`, `recurringProcessingModel: UnscheduledCardOnFile`),
  `returnUrl` (the payment's return address when the merchant gave a `return_url`, else the
  configured one, never visited), and for a manual capture
  `additionalData.manualCapture: "true"` (automatic: `captureDelayHours: 0`).
  `acquirer_reference` is Adyen's `pspReference` of the payment.
- customer actions (docs/adr/0049, adyen_action.py): with our return address, a shopper
  code answered with a `GET` redirect `action` is ActionRequired; `action_details`:
  `POST /payments/details` with the `redirectResult` the shopper brought back, decoded like
  the authorization (`supports_action_details`).
- capture: `POST /payments/{pspReference}/captures` with the amount and currency and our
  operation's id as `reference`; void: `POST /payments/{pspReference}/cancels`; refund:
  `POST /payments/{pspReference}/refunds` with the amount and our refund id as `reference`.
  Each answers `201` `"status": "received"`: accepted, outcome unknown until the notification
  (CAPTURE / CAPTURE_FAILED, CANCELLATION, REFUND / REFUND_FAILED): decoded as `Received`,
  which is pending, never done.
- No look-up by our reference exists (`supports_lookup` False): reconciliation re-sends with
  the same key while Adyen keeps it (at least 31 days), then hands the row to a person
  (docs/adr/0041).

Every write carries our acquirer idempotency key as `Idempotency-Key` (at most 64 characters:
`max_idempotency_key_length`; the client refuses a longer one before sending).

Answers and errors (adyen_codes.py holds the tables; docs/connectors.md the failure table):
`resultCode` `Authorised` is approved; `Refused`, `Cancelled` and `Error` are declines with
`refusalReasonCode` (else `refusalReason`, else the result code); the shopper's actions
(`RedirectShopper`, `IdentifyShopper`, `ChallengeShopper`, `PresentToShopper`) are
ActionRequired when the payment has a return address and Adyen gave a `GET` redirect, else
declines `shopper_action_required` (no shopper can act); `Received`, `Pending`,
`PartiallyAuthorised`, the authentication-only codes and `Success` carry no final outcome of
our authorization (MalformedBody: ambiguous). `429` binds nothing (RateLimitedError); every
5xx is ambiguous (Adyen does not say a 5xx was not applied); `422` with errorCode `704` (the
key's first request still in progress) is ambiguous, and `Transient-Error: true` says to
send it again with the same key; `401` and `403` are AuthenticationError; other 4xx
(`validation`, `configuration`) permanent. The answer's `pspReference` header is kept as the
provider's request id.

Amounts: ISO 4217 minor units, except where Adyen documents otherwise
(`ADYEN_EXPONENT_EXCEPTIONS`: CLP and ISK have two decimals on Adyen, CVE and IDR none); an
amount that has no Adyen equivalent is refused before sending (ValueError).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal
from urllib.parse import quote, urlsplit

from ._call import Answer
from .adyen_action import details_body, redirect_action
from .adyen_codes import (
    ADYEN_EXPONENT_EXCEPTIONS,
    AUTHORIZATION_RESULTS,
    IDEMPOTENCY_IN_PROGRESS,
    SHOPPER_ACTION_REQUIRED,
)
from .dialect import Dialect, WireRequest
from .errors import (
    GatewayError,
    IdempotencyConflictError,
    RateLimitedError,
    UpstreamServerError,
)
from .types import (
    ActionDetailsRequest,
    ActionRequired,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    Received,
    Refund,
    RefundRequest,
    VoidRequest,
)
from .wire import MalformedBody, load_json, load_json_object

__all__ = [
    "ADYEN_TEST_BASE_URL",
    "STORED_PAYMENT_METHOD_PREFIX",
    "AdyenDialect",
    "adyen_live_base_url",
    "from_adyen_amount",
    "to_adyen_amount",
]

#: Checkout v71 on Adyen's test platform.
ADYEN_TEST_BASE_URL = "https://checkout-test.adyen.com/v71"
#: How the service's API writes an Adyen stored payment method: `spm_<storedPaymentMethodId>`.
STORED_PAYMENT_METHOD_PREFIX = "spm_"
_LIVE_PREFIX = re.compile(r"[a-z0-9]{1,40}(-[a-z0-9]{1,40}){0,3}")
_MERCHANT_ACCOUNT = re.compile(r"[A-Za-z0-9_.\-]{1,80}")
_TOKEN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_PSP_REFERENCE = re.compile(r"[A-Za-z0-9]{1,64}")
_JSON = "application/json"


def adyen_live_base_url(live_url_prefix: str) -> str:
    """The live Checkout v71 endpoint of a company's `live_url_prefix` (Customer Area:
    Developers > API URLs), `https://<prefix>-checkout-live.adyenpayments.com/checkout/v71`.
    ValueError for a prefix that is not lower-case letters, digits and hyphens."""
    if not isinstance(live_url_prefix, str) or not _LIVE_PREFIX.fullmatch(live_url_prefix):
        raise ValueError("live_url_prefix must be lower-case letters, digits and hyphens")
    return f"https://{live_url_prefix}-checkout-live.adyenpayments.com/checkout/v71"


def to_adyen_amount(amount: int, currency: str) -> int:
    """Our amount (`currency`'s ISO 4217 minor units, a positive int) as Adyen's minor units.
    ValueError when Adyen has no such amount (a CVE or IDR amount must be whole units)."""
    iso, adyen = ADYEN_EXPONENT_EXCEPTIONS.get(currency, (0, 0))
    factor = int(10 ** abs(adyen - iso))
    if adyen >= iso:
        return amount * factor
    if amount % factor:
        raise ValueError(f"a {currency} amount on Adyen must be a whole number of units")
    return amount // factor


def from_adyen_amount(value: int, currency: str) -> int:
    """Adyen's minor units of `currency` as ours (ISO 4217); MalformedBody for an amount
    that has none (a CLP or ISK amount that is not whole units)."""
    iso, adyen = ADYEN_EXPONENT_EXCEPTIONS.get(currency, (0, 0))
    factor = int(10 ** abs(adyen - iso))
    if iso >= adyen:
        return value * factor
    if value % factor:
        raise MalformedBody(f"a {currency} amount is not a whole number of units")
    return value // factor


@dataclass(frozen=True, slots=True)
class AdyenDialect(Dialect):
    """
    Adyen Checkout v71 (see the module docstring).

    `merchant_account`: the merchant account every request names (1-80 of letters, digits,
    `_`, `.`, `-`). `return_url`: the `returnUrl` `/payments` requires of an authorization
    without a return address of its own (an absolute https or http URL; never visited: such
    a payment's shopper action is declined). ValueError otherwise. The API
    key is not here: the client puts it in `X-API-Key` (`auth_headers`).
    """

    kind: ClassVar[str] = "adyen"
    max_idempotency_key_length: ClassVar[int] = 64
    supports_lookup: ClassVar[bool] = False
    supports_action_details: ClassVar[bool] = True

    merchant_account: str
    return_url: str

    def __post_init__(self) -> None:
        if not isinstance(self.merchant_account, str) or not _MERCHANT_ACCOUNT.fullmatch(
            self.merchant_account
        ):
            raise ValueError("merchant_account must be 1-80 of A-Z, a-z, 0-9, _, . and -")
        parts = urlsplit(self.return_url) if isinstance(self.return_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("return_url must be an absolute http:// or https:// URL")

    # -- requests ---------------------------------------------------------------------------

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """`X-API-Key: <API key>` (Adyen's API key authentication)."""
        return {"X-API-Key": api_key}

    def authorize_request(self, request: AuthorizationRequest) -> WireRequest:
        """`POST /payments`: one payment filed under our payment id (`reference`); the card
        token `spm_<id>` is Adyen's stored payment method `<id>`; `returnUrl` the request's
        return address, else the configured one."""
        stored_id = request.payment_method.removeprefix(STORED_PAYMENT_METHOD_PREFIX)
        body: dict[str, Any] = {
            "merchantAccount": self.merchant_account,
            "amount": _amount(request.amount, request.currency),
            "reference": request.payment_reference,
            "paymentMethod": {"type": "scheme", "storedPaymentMethodId": stored_id},
            "shopperInteraction": "ContAuth",
            "recurringProcessingModel": "UnscheduledCardOnFile",
            "returnUrl": request.return_url or self.return_url,
        }
        if request.capture:
            body["captureDelayHours"] = 0
        else:
            body["additionalData"] = {"manualCapture": "true"}
        return _post("/payments", body)

    def capture_request(self, request: CaptureRequest) -> WireRequest:
        """`POST /payments/{pspReference}/captures` for `amount` of `currency` (both
        required: ValueError), under our operation's id."""
        if request.amount is None or request.currency is None:
            raise ValueError("an Adyen capture names its amount and currency")
        body = self._modification(request.reference)
        body["amount"] = _amount(request.amount, request.currency)
        return _post(_payment_path(request.acquirer_reference, "captures"), body)

    def void_request(self, request: VoidRequest) -> WireRequest:
        """`POST /payments/{pspReference}/cancels`, under our operation's id."""
        body = self._modification(request.reference)
        return _post(_payment_path(request.acquirer_reference, "cancels"), body)

    def refund_request(self, request: RefundRequest) -> WireRequest:
        """`POST /payments/{pspReference}/refunds` for `amount` of `currency` (both
        required: ValueError), under our refund id."""
        if request.amount is None or request.currency is None:
            raise ValueError("an Adyen refund names its amount and currency")
        body = self._modification(request.refund_reference)
        body["amount"] = _amount(request.amount, request.currency)
        return _post(_payment_path(request.acquirer_reference, "refunds"), body)

    def lookup_request(self, payment_reference: str) -> WireRequest:
        """Adyen has no look-up by our reference: ValueError (the client raises
        LookupUnsupported before it gets here)."""
        raise ValueError("Adyen has no look-up of a payment by merchantReference")

    def lookup_refunds_request(
        self, refund_reference: str, acquirer_reference: str | None
    ) -> WireRequest:
        """Adyen has no look-up of a refund by our reference: ValueError."""
        raise ValueError("Adyen has no look-up of a refund by reference")

    def action_details_request(self, request: ActionDetailsRequest) -> WireRequest:
        """`POST /payments/details` with `details.redirectResult` (adyen_action.py)."""
        return _post("/payments/details", details_body(request.redirect_result))

    def _modification(self, reference: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"merchantAccount": self.merchant_account}
        if reference is not None:
            body["reference"] = reference
        return body

    # -- answers ----------------------------------------------------------------------------

    def decode_authorization(
        self, answer: Answer, request: AuthorizationRequest
    ) -> Authorization | ActionRequired:
        """The `PaymentResponse`, by its `resultCode` (adyen_codes.AUTHORIZATION_RESULTS),
        matching the request (our reference, and the amount when the answer names one). A
        shopper code is ActionRequired when the request carried a return address and Adyen
        gave a `GET` redirect (adyen_action.py), else a decline `shopper_action_required`."""
        document = _document(answer)
        authorization = self._payment(
            document, answer, request.payment_reference, request.amount, request.currency,
            request.capture,
        )  # fmt: skip
        if authorization.decline_code == SHOPPER_ACTION_REQUIRED and request.return_url:
            return redirect_action(document, authorization) or authorization
        return authorization

    def decode_action_details(self, answer: Answer, request: ActionDetailsRequest) -> Authorization:
        """The `PaymentDetailsResponse` of a finished redirect, decoded like `/payments`' answer
        (approved or declined), matching the payment; MalformedBody (no outcome yet) for a
        shopper code again (another action) or a code that is not final."""
        authorization = self._payment(
            _document(answer), answer, request.payment_reference, request.amount,
            request.currency, request.capture,
        )  # fmt: skip
        if authorization.decline_code == SHOPPER_ACTION_REQUIRED:
            raise MalformedBody("field 'resultCode' asks for another shopper action")
        return authorization

    def _payment(
        self,
        document: dict[str, Any],
        answer: Answer,
        payment_reference: str,
        amount: int,
        currency: str,
        capture: bool,
    ) -> Authorization:
        """A `PaymentResponse` or `PaymentDetailsResponse` for our payment (reference,
        amount) as an Authorization; a shopper code as a decline `shopper_action_required`;
        MalformedBody for another payment or a code without a final outcome."""
        reference = _string(document, "pspReference")
        if not _PSP_REFERENCE.fullmatch(reference):
            raise MalformedBody("field 'pspReference' is not a PSP reference")
        result = _string(document, "resultCode")
        meaning = AUTHORIZATION_RESULTS.get(result)
        if meaning is None:
            raise MalformedBody("field 'resultCode' is not one Checkout v71 documents")
        echoed = document.get("merchantReference")
        if echoed is not None and echoed != payment_reference:
            raise MalformedBody("the payment does not match the request (merchantReference)")
        named = _decoded_amount(document["amount"], "amount") if "amount" in document else None
        if named is not None and named != (amount, currency):
            raise MalformedBody("the payment does not match the request (amount)")
        if meaning == "unknown":
            raise MalformedBody("field 'resultCode' is not a final outcome of an authorization")
        decline_code = None
        if meaning == "shopper":
            decline_code = SHOPPER_ACTION_REQUIRED
        elif meaning == "declined":
            code = _token(document.get("refusalReasonCode"))
            decline_code = (
                _snake(document.get("refusalReason"))
                or (f"refusal_{code}" if code else None)
                or _snake(result)
            )
        approved = meaning == "approved"
        manual = approved and not capture
        return Authorization(
            acquirer_reference=reference,
            approved=approved,
            decline_code=decline_code,
            amount=amount,
            currency=currency,
            payment_reference=payment_reference,
            created_at=datetime.now(tz=UTC),
            replayed=self.replayed(answer.headers),
            captured=False if manual else None,
            amount_captured=0 if manual else None,
            amount_refunded=0 if manual else None,
            voided=False if manual else None,
        )

    def decode_capture(self, answer: Answer, request: CaptureRequest) -> Received:
        """`201` `received` for this payment, amount and reference: pending."""
        return self._received(
            answer, "capture", request.acquirer_reference, request.reference,
            (request.amount, request.currency),
        )  # fmt: skip

    def decode_void(self, answer: Answer, request: VoidRequest) -> Received:
        """`201` `received` for this payment and reference: pending."""
        return self._received(answer, "void", request.acquirer_reference, request.reference, None)

    def decode_refund(self, answer: Answer, request: RefundRequest) -> Received:
        """`201` `received` for this payment, amount and refund reference: pending."""
        return self._received(
            answer, "refund", request.acquirer_reference, request.refund_reference,
            (request.amount, request.currency),
        )  # fmt: skip

    def decode_lookup(
        self, answer: Answer, payment_reference: str
    ) -> list[Authorization | ActionRequired]:
        """Never called (no look-up): MalformedBody."""
        raise MalformedBody("Adyen has no look-up by merchantReference")

    def decode_lookup_refunds(self, answer: Answer, refund_reference: str) -> list[Refund]:
        """Never called (no look-up): MalformedBody."""
        raise MalformedBody("Adyen has no look-up of refunds by reference")

    def _received(
        self,
        answer: Answer,
        operation: Literal["capture", "void", "refund"],
        payment: str,
        reference: str | None,
        amount: tuple[int | None, str | None] | None,
    ) -> Received:
        document = _document(answer)
        if document.get("status") != "received":
            raise MalformedBody("field 'status' is not 'received'")
        if _string(document, "paymentPspReference") != payment:
            raise MalformedBody("the modification does not match the request (payment)")
        if _string(document, "merchantAccount") != self.merchant_account:
            raise MalformedBody("the modification does not match the request (merchantAccount)")
        modification = _string(document, "pspReference")
        if not _PSP_REFERENCE.fullmatch(modification):
            raise MalformedBody("field 'pspReference' is not a PSP reference")
        echoed = document.get("reference")
        if echoed is not None and echoed != reference:
            raise MalformedBody("the modification does not match the request (reference)")
        value = currency = None
        if amount is not None:
            value, currency = _decoded_amount(document.get("amount"), "amount")
            if (value, currency) != amount:
                raise MalformedBody("the modification does not match the request (amount)")
        return Received(
            operation=operation,
            acquirer_reference=modification,
            charge=payment,
            reference=echoed,
            amount=value,
            currency=currency,
            replayed=self.replayed(answer.headers),
        )

    # -- error answers ----------------------------------------------------------------------

    def error_code(self, body: bytes | None) -> str | None:
        """A `ServiceError`'s `errorCode` (a short token), else None."""
        error = _service_error(body)
        return None if error is None else _token(error.get("errorCode"))

    def error_class(
        self, status_code: int, headers: Mapping[str, str], code: str | None
    ) -> type[GatewayError] | None:
        """Adyen's statuses: 429 a rate limit (binds nothing); `422` `704` ambiguous (the
        key's first request in progress); every 5xx ambiguous; 401/403 and the other 4xx as
        the shared table (AuthenticationError, InvalidRequestError: permanent)."""
        if status_code == 429:
            return RateLimitedError
        if 500 <= status_code <= 599:
            return UpstreamServerError
        if status_code == 422 and code == IDEMPOTENCY_IN_PROGRESS:
            return IdempotencyConflictError
        return Dialect.error_class(self, status_code, headers, code)  # slots: no super()

    def retry_hint(self, answer: Answer) -> bool | None:
        """`Transient-Error: true`: send it again (same key); absent: None."""
        value = answer.headers.get("transient-error", "").strip().lower()
        return True if value == "true" else None

    def provider_request_id(self, headers: Mapping[str, str]) -> str | None:
        """The answer's `pspReference` header (a short token; anything else is not kept)."""
        return _token(headers.get("pspreference"))


# -- encoding ---------------------------------------------------------------------------------


def _amount(amount: int, currency: str) -> dict[str, Any]:
    return {"currency": currency, "value": to_adyen_amount(amount, currency)}


def _post(path: str, body: dict[str, Any]) -> WireRequest:
    content = json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return WireRequest("POST", path, body=content, content_type=_JSON)


def _payment_path(psp_reference: str, action: str) -> str:
    return f"/payments/{quote(psp_reference, safe='')}/{action}"


# -- decoding ---------------------------------------------------------------------------------


def _document(answer: Answer) -> dict[str, Any]:
    return load_json_object(answer.body)


def _string(document: dict[str, Any], name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise MalformedBody(f"field {name!r} is missing or not a string")
    return value


def _decoded_amount(value: Any, where: str) -> tuple[int, str]:
    """An `Amount` object as (our minor units, currency)."""
    if not isinstance(value, dict):
        raise MalformedBody(f"field {where!r} is missing or not an object")
    currency, minor = value.get("currency"), value.get("value")
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
        raise MalformedBody(f"field '{where}.currency' is not an ISO 4217 code")
    if type(minor) is not int or minor < 0:
        raise MalformedBody(f"field '{where}.value' is not a non-negative integer")
    return from_adyen_amount(minor, currency), currency


def _service_error(body: bytes | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        document = load_json(body)
    except MalformedBody:
        return None
    return document if isinstance(document, dict) else None


def _snake(value: Any) -> str | None:
    """`"Not enough balance"` -> `not_enough_balance` (letters and digits only), else None."""
    if not isinstance(value, str):
        return None
    words = re.findall(r"[A-Za-z0-9]+", value)
    return "_".join(word.lower() for word in words)[:64] or None


def _token(value: Any) -> str | None:
    return value if isinstance(value, str) and _TOKEN.fullmatch(value) else None
