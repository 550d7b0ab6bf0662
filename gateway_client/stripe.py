"""
Stripe's dialect: PaymentIntents, API v1 (https://docs.stripe.com/api/payment_intents), with
the API version pinned (`Stripe-Version`) and form-encoded bodies.

- authorize: `POST /v1/payment_intents` with `amount`, `currency`, `payment_method`,
  `confirm=true`, `capture_method` (`automatic` or `manual`), `payment_method_types[0]=card`
  and `metadata[payment_reference]` (ours): one PaymentIntent, created and confirmed.
- capture: `POST /v1/payment_intents/{id}/capture` (`amount_to_capture` for a partial
  capture: the rest is released).
- void: `POST /v1/payment_intents/{id}/cancel`.
- refund: `POST /v1/refunds` with `payment_intent`, `amount`, `metadata[refund_reference]`.
- lookup: `GET /v1/payment_intents?limit=100` (newest first), filtered on
  `metadata[payment_reference]`; a page without ours whose `has_more` is true is followed by
  the next (`starting_after` its last id), at most 20 pages in all (`_lookup_pages.py`).
- lookup_refunds: `GET /v1/refunds?payment_intent=&limit=100`, filtered on
  `metadata[refund_reference]`.

Every write carries our idempotency key as Stripe's `Idempotency-Key` (up to 255 characters,
kept at least 24 hours) and `expand[0]=latest_charge`, so the answer carries the charge's
capture state. `acquirer_reference` is the PaymentIntent's id (`pi_...`).

Answers and errors (docs/connectors.md has the whole table):
- A PaymentIntent `succeeded` is approved and captured; `requires_capture` approved and held;
  `canceled` after an authorization is voided; `requires_payment_method` with a
  `last_payment_error` is a decline; `requires_action` with a `redirect_to_url` (asked with a
  `return_url`) is ActionRequired (stripe_action.py); `processing`, `requires_confirmation` and
  any other action are no final outcome (MalformedBody: ambiguous, reconciled later).
- A `402` answering an authorization (a `card_error`) is a decline with its `decline_code`
  (else its `code`): a result, not an error.
- `429` binds nothing: RateLimitedError (certainly not applied). `idempotency_error` (the same
  key with other parameters) is permanent (InvalidRequestError, code `idempotency_error`):
  alert, never a retry under another key. `409` (the key's first request still in flight) is
  ambiguous. `500`, `502`, `503`, `504` are ambiguous: Stripe does not say a 503 was not
  applied. `Stripe-Should-Retry`, when present, overrides the status's retry decision
  (`retry_hint`). `Request-Id` is kept on every attempt's record.
- A look-up that did not see every page (`has_more` on its last page) and found nothing is
  MalformedBody: "not found" is only ever said about a complete listing, so reconciliation
  never re-creates a PaymentIntent that a later page holds.

Amounts: our minor units (ISO 4217 exponent) are Stripe's except where Stripe documents
otherwise (https://docs.stripe.com/currencies#special-cases): ISK and UGX, zero-decimal in
ISO 4217, are sent as two-decimal amounts (x 100) that must be whole units; the three-decimal
BHD, JOD, KWD, OMR and TND must end in 0. Currencies go lower case on the wire.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

from ._call import Answer
from .dialect import Dialect, Operation, WireRequest, WriteRequest, matching_refund
from .errors import (
    GatewayError,
    IdempotencyConflictError,
    InvalidRequestError,
    RateLimitedError,
    UpstreamServerError,
)
from .stripe_action import redirect_action
from .types import (
    ActionRequired,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    Refund,
    RefundRequest,
    RefundStatus,
    VoidRequest,
)
from .wire import MalformedBody, load_json, load_json_object

__all__ = [
    "DEFAULT_STRIPE_API_VERSION",
    "StripeDialect",
    "from_stripe_amount",
    "to_stripe_amount",
]

#: The API version this dialect was written and tested against (sent as `Stripe-Version`).
DEFAULT_STRIPE_API_VERSION = "2024-06-20"
_API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(\.[a-z]+)?")

_FORM = "application/x-www-form-urlencoded"
_PAGE = "100"
_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: A PaymentIntent's id, as a listing's cursor (`starting_after`).
_INTENT_ID = re.compile(r"pi_[A-Za-z0-9_]{1,250}")
#: ISO 4217 zero-decimal currencies that Stripe takes as two-decimal amounts (x 100).
_TWO_DECIMAL_ON_STRIPE = frozenset({"ISK", "UGX"})
#: Three-decimal currencies whose Stripe amounts must end in 0.
_THREE_DECIMAL = frozenset({"BHD", "JOD", "KWD", "OMR", "TND"})
_CURRENCY = re.compile(r"[a-z]{3}")
_REFUND_STATUSES: dict[str, RefundStatus] = {"succeeded": "succeeded", "failed": "failed"}
# A refund still `pending` or `requires_action` has no outcome yet: ambiguous, like a 500.
_CANCELED_REFUND = "canceled"


def to_stripe_amount(amount: int, currency: str) -> int:
    """Our amount (`currency`'s ISO 4217 minor units, a positive int) as Stripe's. ValueError
    for an amount Stripe would refuse (a fraction of an ISK or UGX unit does not exist; a
    three-decimal amount must end in 0)."""
    if currency in _TWO_DECIMAL_ON_STRIPE:
        return amount * 100
    if currency in _THREE_DECIMAL and amount % 10:
        raise ValueError(f"a {currency} amount on Stripe must be a multiple of 10 minor units")
    return amount


def from_stripe_amount(amount: int, currency: str) -> int:
    """Stripe's amount in `currency` as our ISO 4217 minor units; MalformedBody for one that
    has none (an ISK or UGX amount that is not whole units)."""
    if currency in _TWO_DECIMAL_ON_STRIPE:
        if amount % 100:
            raise MalformedBody(f"a {currency} amount is not a whole number of units")
        return amount // 100
    return amount


@dataclass(frozen=True, slots=True)
class StripeDialect(Dialect):
    """
    Stripe PaymentIntents (see the module docstring). `api_version`: the `Stripe-Version`
    sent on every request (`YYYY-MM-DD`, optionally `.name`); pinned so that an account's
    default version changing at Stripe cannot change what we decode. ValueError otherwise.
    """

    kind: ClassVar[str] = "stripe"
    max_idempotency_key_length: ClassVar[int] = 255

    api_version: str = DEFAULT_STRIPE_API_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.api_version, str) or not _API_VERSION.fullmatch(self.api_version):
            raise ValueError("api_version must look like 2024-06-20")

    # -- requests ---------------------------------------------------------------------------

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """`Authorization: Bearer <secret key>` and the pinned `Stripe-Version`."""
        return {"Authorization": f"Bearer {api_key}", "Stripe-Version": self.api_version}

    def authorize_request(self, request: AuthorizationRequest) -> WireRequest:
        """Create and confirm one PaymentIntent (`confirm=true`), filed under our payment
        reference in its metadata; with the request's `return_url` (3-D Secure by redirect)."""
        back = [] if request.return_url is None else [("return_url", request.return_url)]
        return _post(
            "/v1/payment_intents",
            [
                *back,
                ("amount", str(to_stripe_amount(request.amount, request.currency))),
                ("currency", request.currency.lower()),
                ("payment_method", request.payment_method),
                ("payment_method_types[0]", "card"),
                ("confirm", "true"),
                ("capture_method", "automatic" if request.capture else "manual"),
                ("metadata[payment_reference]", request.payment_reference),
            ],
        )

    def capture_request(self, request: CaptureRequest) -> WireRequest:
        """Capture the PaymentIntent, all of it or `amount_to_capture` (the rest released).
        The currency is not in the request: `ACQUIRERS` never routes ISK or UGX (the two
        currencies whose Stripe amount differs from ours) to a Stripe acquirer
        (acquirers/specs.py), so every other amount is Stripe's as it is."""
        fields = []
        if request.amount is not None:
            fields.append(("amount_to_capture", str(request.amount)))
        return _post(_intent_path(request.acquirer_reference, "capture"), fields)

    def void_request(self, request: VoidRequest) -> WireRequest:
        """Cancel the PaymentIntent (releases the held authorization)."""
        return _post(_intent_path(request.acquirer_reference, "cancel"), [])

    def refund_request(self, request: RefundRequest) -> WireRequest:
        """A refund of the PaymentIntent, filed under our refund reference in its metadata."""
        fields = [("payment_intent", request.acquirer_reference)]
        if request.amount is not None:
            fields.append(("amount", str(request.amount)))
        fields.append(("metadata[refund_reference]", request.refund_reference))
        return _post("/v1/refunds", fields, expand=False)

    def lookup_request(self, payment_reference: str) -> WireRequest:
        """The newest 100 PaymentIntents with their charges (filtered when decoded)."""
        return WireRequest(
            "GET",
            "/v1/payment_intents",
            params=(("limit", _PAGE), ("expand[0]", "data.latest_charge")),
        )

    def lookup_page_request(self, payment_reference: str, after: str) -> WireRequest:
        """The next 100 PaymentIntents, older than the PaymentIntent `after`."""
        return WireRequest(
            "GET",
            "/v1/payment_intents",
            params=(
                ("limit", _PAGE),
                ("starting_after", after),
                ("expand[0]", "data.latest_charge"),
            ),
        )

    def lookup_cursor(self, answer: Answer, payment_reference: str) -> str | None:
        """The last PaymentIntent's id of a page with more after it (`has_more` true) and
        none of ours; None otherwise (a malformed page included: `decode_lookup` says why)."""
        try:
            document = _document(answer)
        except MalformedBody:
            return None
        items = document.get("data")
        if document.get("object") != "list" or document.get("has_more") is not True:
            return None
        if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
            return None
        if any(_reference(item, "payment") == payment_reference for item in items):
            return None
        last = items[-1].get("id")
        return last if isinstance(last, str) and _INTENT_ID.fullmatch(last) else None

    def lookup_refunds_request(
        self, refund_reference: str, acquirer_reference: str | None
    ) -> WireRequest:
        """The PaymentIntent's refunds (Stripe lists refunds per payment): ValueError without
        `acquirer_reference`."""
        if not acquirer_reference:
            raise ValueError("a Stripe refund look-up needs the PaymentIntent's id")
        return WireRequest(
            "GET",
            "/v1/refunds",
            params=(("payment_intent", acquirer_reference), ("limit", _PAGE)),
        )

    # -- answers ----------------------------------------------------------------------------

    def decode_authorization(
        self, answer: Answer, request: AuthorizationRequest
    ) -> Authorization | ActionRequired:
        """The PaymentIntent created, matching the request (amount, currency, our reference,
        captured when automatic, held when manual); ActionRequired when it waits for the
        shopper at a redirect (only for a request with a `return_url`)."""
        authorization = _intent(_document(answer), "body", self.replayed(answer.headers))
        for name in ("amount", "currency", "payment_reference"):
            if getattr(authorization, name) != getattr(request, name):
                raise MalformedBody(f"the PaymentIntent does not match the request ({name})")
        if isinstance(authorization, ActionRequired):
            if request.return_url is None:
                raise MalformedBody("a redirect was asked for without a return_url")
            return authorization
        if authorization.approved and authorization.captured != request.capture:
            raise MalformedBody("the PaymentIntent's capture state does not match the request")
        return authorization

    def decode_capture(self, answer: Answer, request: CaptureRequest) -> Authorization:
        """That PaymentIntent, captured for the amount asked (or the whole amount)."""
        intent = self._operated(answer, request.acquirer_reference)
        expected = intent.amount if request.amount is None else request.amount
        if not intent.captured or intent.amount_captured != expected:
            raise MalformedBody("the PaymentIntent is not captured for the amount asked")
        return intent

    def decode_void(self, answer: Answer, request: VoidRequest) -> Authorization:
        """That PaymentIntent, canceled after its authorization, or before it while it waited
        for the shopper (voided, never approved)."""
        intent = self._operated(answer, request.acquirer_reference)
        if intent.decline_code == "canceled":  # a customer action's, canceled unfinished
            return replace(intent, voided=True)
        if not intent.voided:
            raise MalformedBody("the PaymentIntent is not canceled")
        return intent

    def decode_refund(self, answer: Answer, request: RefundRequest) -> Refund:
        """The refund, for this PaymentIntent, reference and (when asked) amount."""
        refund = _refund(_document(answer), "body", self.replayed(answer.headers))
        return matching_refund(refund, request)

    def decode_lookup(
        self, answer: Answer, payment_reference: str
    ) -> list[Authorization | ActionRequired]:
        """The listed PaymentIntents filed under `payment_reference` (others are skipped)."""
        items = _page(
            _document(answer),
            found=lambda item: _reference(item, "payment") == payment_reference,
        )
        return [_intent(item, f"data[{i}]", False) for i, item in items]

    def decode_lookup_refunds(self, answer: Answer, refund_reference: str) -> list[Refund]:
        """The listed refunds filed under `refund_reference`, oldest first."""
        items = _page(
            _document(answer),
            found=lambda item: _reference(item, "refund") == refund_reference,
        )
        refunds = [_refund(item, f"data[{i}]", False) for i, item in items]
        return sorted(refunds, key=lambda refund: refund.created_at)

    def _operated(self, answer: Answer, acquirer_reference: str) -> Authorization:
        intent = _intent(_document(answer), "body", self.replayed(answer.headers))
        if isinstance(intent, ActionRequired) or intent.acquirer_reference != acquirer_reference:
            raise MalformedBody("the PaymentIntent does not match the request (id)")
        return intent

    # -- error answers ----------------------------------------------------------------------

    def refusal_result(
        self,
        operation: Operation,
        answer: Answer,
        request: WriteRequest | None,
    ) -> Authorization | Refund | None:
        """A `402` answering an authorization is a decline: its `decline_code` (else its
        `code`), filed under the PaymentIntent the error names (else its charge)."""
        if operation != "authorize" or answer.status_code != 402:
            return None
        assert isinstance(request, AuthorizationRequest)
        error = _error_object(answer.body)
        if error is None:
            return None  # not Stripe's error object: classified as a 4xx
        code = _token(error.get("decline_code")) or _token(error.get("code")) or "card_declined"
        intent = error.get("payment_intent")
        reference = intent.get("id") if isinstance(intent, dict) else None
        reference = reference if isinstance(reference, str) and reference else None
        charge = error.get("charge")
        reference = reference or (charge if isinstance(charge, str) and charge else None)
        if reference is None:
            raise MalformedBody("a card_error names neither a PaymentIntent nor a charge")
        created = intent.get("created") if isinstance(intent, dict) else None
        return Authorization(
            acquirer_reference=reference,
            approved=False,
            decline_code=code,
            amount=request.amount,
            currency=request.currency,
            payment_reference=request.payment_reference,
            created_at=_time(created, "created", "error") if created is not None else _now(),
            replayed=self.replayed(answer.headers),
        )

    def error_code(self, body: bytes | None) -> str | None:
        """`error.code`, else `error.type` (`idempotency_error` has no code)."""
        error = _error_object(body)
        if error is None:
            return None
        return _token(error.get("code")) or _token(error.get("type"))

    def error_class(
        self, status_code: int, headers: Mapping[str, str], code: str | None
    ) -> type[GatewayError] | None:
        """Stripe's statuses: 429 a rate limit (binds nothing); 409 ambiguous (the key's
        first request in flight); 503 ambiguous like every 5xx; `idempotency_error` and
        other 4xx permanent; 401 and 403 the shared table's AuthenticationError."""
        if status_code == 429:
            return RateLimitedError
        if status_code == 409:
            return IdempotencyConflictError
        if 500 <= status_code <= 599:
            return UpstreamServerError
        if code == "idempotency_error":
            return InvalidRequestError
        return Dialect.error_class(self, status_code, headers, code)  # slots: no super()

    def misuse(self, code: str | None) -> bool:
        """`idempotency_error`: the same key with other parameters, a bug of ours."""
        return code == "idempotency_error"

    def retry_hint(self, answer: Answer) -> bool | None:
        """`Stripe-Should-Retry: true` or `false` (case-insensitive); absent or other: None."""
        value = answer.headers.get("stripe-should-retry", "").strip().lower()
        return {"true": True, "false": False}.get(value)

    def provider_request_id(self, headers: Mapping[str, str]) -> str | None:
        """Stripe's `Request-Id` (a short token; anything else is not kept)."""
        return _token(headers.get("request-id"))


# -- encoding ---------------------------------------------------------------------------------


def _post(path: str, fields: list[tuple[str, str]], *, expand: bool = True) -> WireRequest:
    if expand:
        fields = [*fields, ("expand[0]", "latest_charge")]
    body = urlencode(fields).encode("ascii")
    return WireRequest("POST", path, body=body, content_type=_FORM)


def _intent_path(acquirer_reference: str, action: str) -> str:
    return f"/v1/payment_intents/{quote(acquirer_reference, safe='')}/{action}"


# -- decoding ---------------------------------------------------------------------------------


def _document(answer: Answer) -> dict[str, Any]:
    return load_json_object(answer.body)


def _page(document: dict[str, Any], *, found: Any) -> list[tuple[int, dict[str, Any]]]:
    """The listing's items for which `found(item)`; MalformedBody when it found none and
    the listing has more pages (a complete listing is the only one that says "none")."""
    if document.get("object") != "list" or not isinstance(document.get("data"), list):
        raise MalformedBody("body is not a Stripe list object")
    items = document["data"]
    if not all(isinstance(item, dict) for item in items):
        raise MalformedBody("a listed item is not a JSON object")
    chosen = [(i, item) for i, item in enumerate(items) if found(item)]
    if not chosen and document.get("has_more") is not False:
        raise MalformedBody("nothing found on a listing with more pages (field 'has_more')")
    return chosen


def _reference(item: dict[str, Any], kind: str) -> str | None:
    metadata = item.get("metadata")
    value = metadata.get(f"{kind}_reference") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) else None


def _get(document: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = document.get(name)
    if type(value) is not kind:
        raise MalformedBody(f"{where}: field {name!r} is missing or not a {kind.__name__}")
    return value


def _currency(document: dict[str, Any], where: str) -> str:
    value: str = _get(document, "currency", str, where)
    if not _CURRENCY.fullmatch(value):
        raise MalformedBody(f"{where}: field 'currency' is not an ISO 4217 code")
    return value.upper()


def _amount(document: dict[str, Any], name: str, currency: str, where: str) -> int:
    value = _get(document, name, int, where)
    if value < 0:
        raise MalformedBody(f"{where}: field {name!r} is negative")
    return from_stripe_amount(value, currency)


def _time(value: Any, name: str, where: str) -> datetime:
    if type(value) is not int or value <= 0:
        raise MalformedBody(f"{where}: field {name!r} is not a Unix time")
    return datetime.fromtimestamp(value, tz=UTC)


def _now() -> datetime:
    return datetime.now(tz=UTC)


def _intent(document: Any, where: str, replayed: bool) -> Authorization | ActionRequired:
    """A PaymentIntent object as an Authorization with its capture state, or ActionRequired
    while it waits for the shopper at a redirect (stripe_action.py)."""
    if not isinstance(document, dict) or document.get("object") != "payment_intent":
        raise MalformedBody(f"{where}: not a payment_intent object")
    reference = _get(document, "id", str, where)
    currency = _currency(document, where)
    amount = _amount(document, "amount", currency, where)
    payment_reference = _reference(document, "payment")
    if payment_reference is None:
        raise MalformedBody(f"{where}: field 'metadata.payment_reference' is missing")
    created_at = _time(document.get("created"), "created", where)
    status = _get(document, "status", str, where)
    charge = document.get("latest_charge")
    charge = charge if isinstance(charge, dict) else None
    base = Authorization(
        acquirer_reference=reference,
        approved=True,
        decline_code=None,
        amount=amount,
        currency=currency,
        payment_reference=payment_reference,
        created_at=created_at,
        replayed=replayed,
    )
    if status == "requires_payment_method":
        error = document.get("last_payment_error")
        if not isinstance(error, dict):
            raise MalformedBody(f"{where}: status 'requires_payment_method' without an error")
        code = _token(error.get("decline_code")) or _token(error.get("code")) or "declined"
        return _state(base, approved=False, decline_code=code)
    if status == "requires_capture":
        return _state(base)
    if status == "succeeded":
        captured, refunded = _captured(document, charge, amount, currency, where)
        return _state(base, captured=True, amount_captured=captured, amount_refunded=refunded)
    if status == "canceled":
        if charge is None or charge.get("status") != "succeeded":
            return _state(base, approved=False, decline_code="canceled")
        canceled = document.get("canceled_at")
        voided_at = _time(canceled, "canceled_at", where) if canceled is not None else None
        return _state(base, voided=True, voided_at=voided_at)
    if status == "requires_action":
        return redirect_action(document, base, where)
    # processing, requires_confirmation: no outcome yet.
    raise MalformedBody(f"{where}: field 'status' is not a final outcome")


def _state(base: Authorization, **changes: Any) -> Authorization:
    fields = {
        "captured": False,
        "amount_captured": 0,
        "amount_refunded": 0,
        "voided": False,
        "captured_at": None,
        "voided_at": None,
    }
    fields.update(changes)
    if fields.get("approved") is False:
        fields["captured"] = fields["voided"] = False
    values = {name: getattr(base, name) for name in base.__slots__}
    values.update(fields)
    return Authorization(**values)


def _captured(
    intent: dict[str, Any], charge: dict[str, Any] | None, amount: int, currency: str, where: str
) -> tuple[int, int]:
    """(amount captured, amount refunded) of a succeeded PaymentIntent, minor units.

    Stripe: `amount_received`, and the charge's `amount_refunded`. A charge without
    `amount_captured` (localstripe, older API versions) records a partial capture's release
    as a refund without our metadata: it is taken off the captured amount, not counted as
    refunded."""
    if charge is None:
        raise MalformedBody(f"{where}: field 'latest_charge' is not expanded")
    refunded = _amount(charge, "amount_refunded", currency, f"{where}.latest_charge")
    if "amount_received" in intent:
        captured = _amount(intent, "amount_received", currency, where)
    elif "amount_captured" in charge:
        captured = _amount(charge, "amount_captured", currency, f"{where}.latest_charge")
    else:
        refunds = charge.get("refunds")
        listed = refunds.get("data") if isinstance(refunds, dict) else None
        if not isinstance(listed, list) or (refunds or {}).get("has_more") is not False:
            raise MalformedBody(f"{where}: the charge's capture state cannot be read")
        released = sum(
            from_stripe_amount(item["amount"], currency)
            for item in listed
            if isinstance(item, dict)
            and type(item.get("amount")) is int
            and _reference(item, "refund") is None
        )
        captured, refunded = amount - released, refunded - released
    if not 0 < captured <= amount or not 0 <= refunded <= captured:
        raise MalformedBody(f"{where}: the captured or refunded amount is out of range")
    return captured, refunded


def _refund(document: Any, where: str, replayed: bool) -> Refund:
    if not isinstance(document, dict) or document.get("object") != "refund":
        raise MalformedBody(f"{where}: not a refund object")
    currency = _currency(document, where)
    amount = _amount(document, "amount", currency, where)
    if amount == 0:
        raise MalformedBody(f"{where}: field 'amount' is not positive")
    refund_reference = _reference(document, "refund")
    if refund_reference is None:
        raise MalformedBody(f"{where}: field 'metadata.refund_reference' is missing")
    raw_status = _get(document, "status", str, where)
    status = _REFUND_STATUSES.get(raw_status, "failed" if raw_status == _CANCELED_REFUND else None)
    if status is None:
        raise MalformedBody(f"{where}: field 'status' is not a final outcome")
    failure = (
        None if status == "succeeded" else (_token(document.get("failure_reason")) or raw_status)
    )
    return Refund(
        acquirer_reference=_get(document, "id", str, where),
        charge=_get(document, "payment_intent", str, where),
        amount=amount,
        currency=currency,
        refund_reference=refund_reference,
        status=status,
        failure_code=failure,
        created_at=_time(document.get("created"), "created", where),
        replayed=replayed,
    )


def _error_object(body: bytes | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        document = load_json(body)
    except MalformedBody:
        return None
    error = document.get("error") if isinstance(document, dict) else None
    return error if isinstance(error, dict) else None


def _token(value: Any) -> str | None:
    return value if isinstance(value, str) and _CODE.fullmatch(value) else None
