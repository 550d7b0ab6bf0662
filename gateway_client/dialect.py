"""
The connector seam: one `Dialect` per provider's wire format.

A dialect says how one provider (a "connector": our sandbox, Stripe, later Adyen) is spoken
to, and nothing else: it builds each request (path, query, body, content type) for
authorize, capture, void, refund and the two look-ups; decodes the answers into the client's
values (`Authorization`, `Refund`); maps an error answer into the shared outcome
classification (classify.py: certainly not applied / ambiguous / permanent) and, where the
provider's API makes a refusal a result (Stripe's `card_error` is a decline), into that
result; and reads the provider's hints (whether to retry, its request id, whether the answer
was replayed from its idempotency store).

Everything else is shared and unchanged whatever the dialect: the retry loop, the deadline,
the retry budget, the circuit breakers, the rate gate, the AIMD limiter, the idempotency key
on every attempt and the attempt records (`_retry_loop.py`, `_attempt_state.py`). A dialect
holds no state across calls, does no I/O and never sees the API key's value except to put it
in the authentication header (`auth_headers`); its errors and `MalformedBody` reasons name
fields, never values.

Implementations: `SandboxDialect` (sandbox_dialect.py, our sandbox acquirer's format, the
default) and `StripeDialect` (stripe.py, PaymentIntents API v1). docs/connectors.md has the
checklist for adding one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from ._call import Answer
from .classify import classify_status, error_code
from .errors import GatewayError
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
from .wire import MalformedBody

__all__ = [
    "Dialect",
    "LookupUnsupported",
    "Operation",
    "WireRequest",
    "WriteRequest",
    "matching_refund",
]

#: The client's operations, as a dialect is told which one an answer belongs to.
Operation = Literal[
    "authorize", "capture", "void", "refund", "lookup", "lookup_refunds", "action_details"
]

#: The requests of the client's writes, as `refusal_result` is given them.
WriteRequest = (
    AuthorizationRequest | CaptureRequest | VoidRequest | RefundRequest | ActionDetailsRequest
)


@dataclass(frozen=True, slots=True)
class WireRequest:
    """
    One request as a dialect builds it; the client adds the shared headers (authentication,
    `Accept`, `User-Agent`, `Idempotency-Key` on a write, the caller's request id) and sends
    it, unchanged, on every attempt.

    `method`: "POST" (a write) or "GET" (a look-up, safe to repeat). `path`: relative to the
    acquirer's `base_url`, starting with "/", each identifier already percent-encoded.
    `params`: the query, as (name, value) pairs in order. `body`: the bytes sent (None for a
    GET); `content_type` its media type.
    """

    method: Literal["GET", "POST"]
    path: str
    params: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    content_type: str | None = None


class LookupUnsupported(ValueError):
    """The provider has no look-up by our reference (`Dialect.supports_lookup` False: Adyen).
    Raised before anything is sent; reconciliation asks `supports_lookup` first."""


class Dialect(ABC):
    """
    One provider's wire format (see the module docstring). Subclasses are immutable and
    hashable (the service caches one client per configuration).

    Class attributes:
        kind: the provider type as `ACQUIRERS` names it ("sandbox", "stripe", "adyen").
        max_idempotency_key_length: the longest `Idempotency-Key` the provider keeps
            (characters; Stripe 255, Adyen 64); the client refuses a longer key with
            ValueError before sending anything.
        idempotency_header: the header the idempotency key travels in.
    """

    kind: ClassVar[str]
    max_idempotency_key_length: ClassVar[int] = 255
    idempotency_header: ClassVar[str] = "Idempotency-Key"
    #: False for a provider with no look-up by our reference (Adyen): `lookup` and
    #: `lookup_refunds` raise LookupUnsupported before sending, and reconciliation re-sends
    #: with the same key instead (docs/adr/0041).
    supports_lookup: ClassVar[bool] = True
    #: True for a provider that finishes a customer action on the result the shopper's
    #: browser brings back (Adyen's `/payments/details`; docs/adr/0049) instead of a
    #: look-up: `action_details_request` and `decode_action_details` are its.
    supports_action_details: ClassVar[bool] = False

    # -- requests ---------------------------------------------------------------------------

    def auth_headers(self, api_key: str) -> dict[str, str]:
        """The headers that authenticate every request (default: `Authorization: Bearer`),
        plus any the provider requires on every request (Stripe's pinned `Stripe-Version`)."""
        return {"Authorization": f"Bearer {api_key}"}

    @abstractmethod
    def authorize_request(self, request: AuthorizationRequest) -> WireRequest:
        """The request of an authorization (captured at once, or held when `capture` is
        False). Raises ValueError for a request the provider cannot take (e.g. an amount its
        currency's rules refuse)."""

    @abstractmethod
    def capture_request(self, request: CaptureRequest) -> WireRequest:
        """The request capturing a held authorization (all of it, or `amount` minor units)."""

    @abstractmethod
    def void_request(self, request: VoidRequest) -> WireRequest:
        """The request releasing a held authorization."""

    @abstractmethod
    def refund_request(self, request: RefundRequest) -> WireRequest:
        """The request refunding (part of) a captured charge, carrying our refund reference."""

    @abstractmethod
    def lookup_request(self, payment_reference: str) -> WireRequest:
        """The look-up of the provider's payments filed under our payment reference."""

    def lookup_page_request(self, payment_reference: str, after: str) -> WireRequest:
        """The look-up's next page, after the provider's cursor `after` (what `lookup_cursor`
        returned), for a provider whose look-up is a paged listing (Stripe). The default, for
        a look-up answered in one page: ValueError."""
        raise ValueError(f"{self.kind}'s look-up has one page")

    def lookup_cursor(self, answer: Answer, payment_reference: str) -> str | None:
        """The cursor of the look-up's next page when `answer` is a page that holds nothing
        filed under `payment_reference` and says more pages follow; None when `answer` is to be
        decoded (`decode_lookup`). The default, for a look-up in one page: None."""
        return None

    @abstractmethod
    def lookup_refunds_request(
        self, refund_reference: str, acquirer_reference: str | None
    ) -> WireRequest:
        """The look-up of the refunds filed under our refund reference; `acquirer_reference`
        (the charge's id at the provider) narrows it where the provider lists refunds per
        payment only (Stripe; None: the provider does not need it)."""

    # -- answers (2xx) ----------------------------------------------------------------------
    # Each raises MalformedBody (wire.py) when the answer is not the documented one or does
    # not match the request: an ambiguous outcome, never a value.

    @abstractmethod
    def decode_authorization(
        self, answer: Answer, request: AuthorizationRequest
    ) -> Authorization | ActionRequired:
        """The authorization an answer describes, approved or declined, checked against
        `request` (amount, currency, our reference, the capture state asked for); or
        ActionRequired when the provider holds it for the shopper (3-D Secure), which only a
        request with a `return_url` may get."""

    @abstractmethod
    def decode_capture(self, answer: Answer, request: CaptureRequest) -> Authorization | Received:
        """The charge a capture answered: captured for the amount asked (or the whole); or,
        for a provider that answers before the outcome (Adyen), `Received` (pending)."""

    @abstractmethod
    def decode_void(self, answer: Answer, request: VoidRequest) -> Authorization | Received:
        """The charge a void answered: voided; or `Received` (pending, Adyen)."""

    @abstractmethod
    def decode_refund(self, answer: Answer, request: RefundRequest) -> Refund | Received:
        """The refund a refund answered, succeeded or failed, for this charge and reference;
        or `Received` (pending, Adyen)."""

    @abstractmethod
    def decode_lookup(
        self, answer: Answer, payment_reference: str
    ) -> list[Authorization | ActionRequired]:
        """The authorizations a look-up found for `payment_reference` (may be empty), each
        with its capture state now; ActionRequired for one still held for the shopper."""

    @abstractmethod
    def decode_lookup_refunds(self, answer: Answer, refund_reference: str) -> list[Refund]:
        """The refunds a look-up found for `refund_reference`, oldest first (may be empty)."""

    def action_details_request(self, request: ActionDetailsRequest) -> WireRequest:
        """The request finishing a customer action on the shopper's result. The default, for
        a provider with a look-up instead: ValueError (nothing is sent)."""
        raise ValueError(f"{self.kind} finishes no customer action on a redirect result")

    def decode_action_details(self, answer: Answer, request: ActionDetailsRequest) -> Authorization:
        """The outcome the provider answered for the finished action (approved or declined),
        checked against `request`. The default: MalformedBody (never called)."""
        raise MalformedBody(f"{self.kind} finishes no customer action on a redirect result")

    # -- error answers ----------------------------------------------------------------------

    def refusal_result(
        self,
        operation: Operation,
        answer: Answer,
        request: WriteRequest | None,
    ) -> Authorization | Refund | None:
        """A non-2xx answer that is a result and not an error (Stripe's `402 card_error` on
        an authorization is a decline), or None (the default): the answer is classified."""
        return None

    def error_code(self, body: bytes | None) -> str | None:
        """The provider's error code in an error body (a short token, never the body), or
        None. Default: `code`, `error` or `error.code` (classify.error_code)."""
        return error_code(body)

    def error_class(
        self, status_code: int, headers: Mapping[str, str], code: str | None
    ) -> type[GatewayError] | None:
        """The error class of a non-2xx answer (None only for a 2xx). Default: the shared
        table (classify.classify_status); a dialect overrides it only where its provider
        documents a status otherwise."""
        return classify_status(status_code, headers=headers, code=code)

    def misuse(self, code: str | None) -> bool:
        """True when a refusal's code says our own request was wrong in a way only a bug of
        ours causes (Stripe's `idempotency_error`: a key reused with other parameters). The
        client then counts `idempotency_misuse` and logs at ERROR (an alert); the error stays
        permanent, never retried under another key. Default: False."""
        return False

    def retry_hint(self, answer: Answer) -> bool | None:
        """The provider's own word on retrying this answer, overriding the status's default:
        True (retry, with the same key, within the policy's limits), False (never retry), or
        None (the default: no word, the classification decides)."""
        return None

    def provider_request_id(self, headers: Mapping[str, str]) -> str | None:
        """The provider's id of the request, from the answer's headers (Stripe's
        `Request-Id`), kept on the attempt's record; None (the default) when it sends none."""
        return None

    def replayed(self, headers: Mapping[str, str]) -> bool:
        """True when the answer was replayed from the provider's idempotency store
        (default: `Idempotent-Replayed: true`)."""
        return headers.get("idempotent-replayed", "").strip().lower() == "true"


def matching_refund(refund: Refund, request: RefundRequest) -> Refund:
    """`refund` when it is the one `request` asked for (the same charge at the provider, our
    refund reference, and the amount when one was asked), else MalformedBody naming the
    field that differs."""
    if refund.charge != request.acquirer_reference:
        raise MalformedBody("the refund does not match the request (acquirer_reference)")
    if refund.refund_reference != request.refund_reference:
        raise MalformedBody("the refund does not match the request (refund_reference)")
    if request.amount is not None and refund.amount != request.amount:
        raise MalformedBody("the refund does not match the request (amount)")
    return refund
