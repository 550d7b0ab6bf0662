"""
The sandbox acquirer's dialect (sandbox_acquirer/, docs/sandbox.md): the first connector and
the default, speaking the JSON of wire.py exactly as the client did before the seam existed.

| operation | request |
| --- | --- |
| authorize | `POST /charges` (`"capture": false` only for a manual capture) |
| capture | `POST /charges/{id}/capture`, `{}` or `{"amount": N}` |
| void | `POST /charges/{id}/void`, `{}` |
| refund | `POST /refunds`, `{"charge", "amount"?, "reference"}` |
| lookup | `GET /charges?reference=` (a charge held for the shopper: ActionRequired) |
| lookup_refunds | `GET /refunds?reference=` |

Errors follow the shared table (classify.py) unchanged; the sandbox sends no retry hint and
no request id of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar
from urllib.parse import quote

from ._call import Answer
from .dialect import Dialect, WireRequest, matching_refund
from .types import (
    ActionRequired,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    Refund,
    RefundRequest,
    VoidRequest,
)
from .wire import (
    MalformedBody,
    decode_charge_list,
    decode_charge_or_action,
    decode_operated,
    decode_refund,
    decode_refund_list,
    encode_authorization,
    encode_capture,
    encode_refund,
    encode_void,
)

__all__ = ["SandboxDialect"]

V = TypeVar("V")

_JSON = "application/json"


class SandboxDialect(Dialect):
    """Our sandbox acquirer's wire format (see the module docstring). Stateless."""

    kind: ClassVar[str] = "sandbox"

    def __eq__(self, other: object) -> bool:
        return type(other) is SandboxDialect

    def __hash__(self) -> int:
        return hash(SandboxDialect)

    def __repr__(self) -> str:
        return "SandboxDialect()"

    def authorize_request(self, request: AuthorizationRequest) -> WireRequest:
        """`POST /charges` with the JSON of `wire.encode_authorization`."""
        body = encode_authorization(request)
        return WireRequest("POST", "/charges", body=body, content_type=_JSON)

    def capture_request(self, request: CaptureRequest) -> WireRequest:
        """`POST /charges/{id}/capture`, `{}` or `{"amount": N}`."""
        path = _charge_path(request.acquirer_reference, "capture")
        return WireRequest("POST", path, body=encode_capture(request), content_type=_JSON)

    def void_request(self, request: VoidRequest) -> WireRequest:
        """`POST /charges/{id}/void`, `{}`."""
        path = _charge_path(request.acquirer_reference, "void")
        return WireRequest("POST", path, body=encode_void(), content_type=_JSON)

    def refund_request(self, request: RefundRequest) -> WireRequest:
        """`POST /refunds`, `{"charge", "amount"?, "reference"}`."""
        return WireRequest("POST", "/refunds", body=encode_refund(request), content_type=_JSON)

    def lookup_request(self, payment_reference: str) -> WireRequest:
        """`GET /charges?reference=`."""
        return WireRequest("GET", "/charges", params=(("reference", payment_reference),))

    def lookup_refunds_request(
        self, refund_reference: str, acquirer_reference: str | None
    ) -> WireRequest:
        """`GET /refunds?reference=` (the sandbox files refunds by our reference alone)."""
        return WireRequest("GET", "/refunds", params=(("reference", refund_reference),))

    def decode_authorization(
        self, answer: Answer, request: AuthorizationRequest
    ) -> Authorization | ActionRequired:
        """The charge object, matching the request's amount, currency, reference and capture;
        ActionRequired for a charge held for the shopper, only when the request carried a
        `return_url` (no shopper can come back otherwise)."""
        body = answer.body or b""
        authorization = decode_charge_or_action(body, replayed=self.replayed(answer.headers))
        for name in ("amount", "currency", "payment_reference"):
            if getattr(authorization, name) != getattr(request, name):
                raise MalformedBody(f"the charge does not match the request ({name})")
        if isinstance(authorization, ActionRequired):
            if request.return_url is None:
                raise MalformedBody("a customer action was asked for without a return_url")
            return authorization
        if authorization.captured is not None and authorization.captured != (
            authorization.approved and request.capture
        ):
            raise MalformedBody("the charge's capture state does not match the request")
        return authorization

    def decode_capture(self, answer: Answer, request: CaptureRequest) -> Authorization:
        """That charge, captured for the amount asked (or the whole amount)."""
        charge = decode_operated(
            answer.body or b"", request.acquirer_reference, replayed=self.replayed(answer.headers)
        )
        expected = charge.amount if request.amount is None else request.amount
        if not charge.captured or charge.amount_captured != expected:
            raise MalformedBody("the charge is not captured for the amount asked")
        return charge

    def decode_void(self, answer: Answer, request: VoidRequest) -> Authorization:
        """That charge, voided."""
        charge = decode_operated(
            answer.body or b"", request.acquirer_reference, replayed=self.replayed(answer.headers)
        )
        if not charge.voided:
            raise MalformedBody("the charge is not voided")
        return charge

    def decode_refund(self, answer: Answer, request: RefundRequest) -> Refund:
        """The refund object, for this charge, reference and (when asked) amount."""
        refund = decode_refund(answer.body or b"", replayed=self.replayed(answer.headers))
        return matching_refund(refund, request)

    def decode_lookup(
        self, answer: Answer, payment_reference: str
    ) -> list[Authorization | ActionRequired]:
        """`{"data": [charge, ...]}`, every charge filed under `payment_reference` (one held
        for the shopper as ActionRequired)."""
        return _echoing(
            decode_charge_list(answer.body or b""),
            payment_reference,
            lambda charge: charge.payment_reference,
        )

    def decode_lookup_refunds(self, answer: Answer, refund_reference: str) -> list[Refund]:
        """`{"data": [refund, ...]}`, every refund filed under `refund_reference`."""
        return _echoing(
            decode_refund_list(answer.body or b""),
            refund_reference,
            lambda refund: refund.refund_reference,
        )


def _charge_path(acquirer_reference: str, action: str) -> str:
    return f"/charges/{quote(acquirer_reference, safe='')}/{action}"


def _echoing(items: list[V], reference: str, echoed: Callable[[V], str]) -> list[V]:
    if any(echoed(item) != reference for item in items):
        raise MalformedBody("a listed item has another reference")
    return items
