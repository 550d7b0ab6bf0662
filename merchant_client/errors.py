"""
The error tree of the merchant client: one class per problem `code` of the payment API.

Every answer the API refuses is an RFC 9457 problem document (`application/problem+json`) with
a stable `code`; the client raises the class registered for that code (`ERROR_CLASSES`), or,
for a code it does not know yet, the class of the HTTP status. A failure without an answer (a
refused connection, a reset, a timeout) is a `TransportError`.

    MerchantApiError                      every error: attempts, idempotency_key, request_id,
    │                                     replayed, retry_after, not_before
    ├── TransportError                    no complete answer
    │   ├── ConnectionFailed              certainly not sent (refused, DNS, connect timeout)
    │   └── OutcomeUnknown                sent, answer lost (reset, read timeout, garbled 2xx):
    │                                     re-send with the same idempotency key
    └── ProblemError                      an answer: status_code, code, problem (the document)
        ├── InvalidRequest          400   invalid_json, duplicate_key, json_too_deep, ...
        │   ├── ValidationError           validation_error (field errors in `errors`)
        │   ├── CardDataNotAccepted       card_data_not_accepted
        │   ├── IdempotencyKeyMissing     idempotency_key_missing
        │   └── IdempotencyKeyInvalid     idempotency_key_invalid
        ├── Unauthorized            401   authentication_required, authentication_failed
        ├── PermissionDenied        403   permission_denied
        ├── NotFound                404   not_found
        ├── Conflict                409
        │   ├── IdempotencyKeyInUse       idempotency_key_in_use (retried after Retry-After)
        │   ├── InvalidPaymentState       invalid_payment_state
        │   ├── AmountExceedsCapturable   amount_exceeds_capturable
        │   └── AmountExceedsRefundable   amount_exceeds_refundable
        ├── IdempotencyKeyReused    422   idempotency_key_reused
        ├── RateLimited             429   rate_limited (retried after Retry-After)
        │   ├── ConcurrencyLimited        concurrency_limited: too many of the merchant's
        │   │                             payment POSTs in progress
        │   └── AuthenticationRateLimited authentication_rate_limited: too many requests
        │                                 with a missing or invalid key from this address
        └── ServerError             5xx   internal_error, a proxy's 502/504 (retried, same key)
            ├── AcquirerError       502   acquirer_error: stored and replayed; payment_id
            ├── ServiceUnavailable  503   acquirer_unavailable: certainly not applied,
            │                             key released; retry_after
            └── DatabaseUnavailable 503   service_unavailable: the service lost its database;
                                          the outcome may be unknown: retry, same key

`retry_after` is the server's wait in seconds (`Retry-After`, RFC 9110 section 10.2.3) and
`not_before` the wall-clock instant it ends (aware UTC), both None when the answer gave none.
Messages name the operation, the status and the code: never the API key, a header or a body.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

__all__ = [
    "ERROR_CLASSES",
    "STATUS_CLASSES",
    "AcquirerError",
    "AmountExceedsCapturable",
    "AmountExceedsRefundable",
    "CardDataNotAccepted",
    "Conflict",
    "ConnectionFailed",
    "IdempotencyKeyInUse",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyMissing",
    "IdempotencyKeyReused",
    "InvalidPaymentState",
    "InvalidRequest",
    "MerchantApiError",
    "NotFound",
    "OutcomeUnknown",
    "PermissionDenied",
    "ProblemError",
    "RateLimited",
    "ServerError",
    "ServiceUnavailable",
    "TransportError",
    "Unauthorized",
    "ValidationError",
    "error_class",
]


class MerchantApiError(Exception):
    """
    Base of every error the client raises for a call.

    `attempts`: requests sent in the call (>= 1; 0 if none was). `idempotency_key`: the key
    of a mutating call (None for a GET). `request_id`: the last answer's `Request-Id` header,
    None without one. `replayed`: True when the last answer carried `Idempotent-Replayed:
    true` (a stored answer, such as a 502 `acquirer_error`, replayed). `retry_after` (seconds)
    and `not_before` (aware UTC datetime): when to come back, if the server said.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: int = 0,
        idempotency_key: str | None = None,
        request_id: str | None = None,
        replayed: bool = False,
        retry_after: float | None = None,
        not_before: datetime | None = None,
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.idempotency_key = idempotency_key
        self.request_id = request_id
        self.replayed = replayed
        self.retry_after = retry_after
        self.not_before = not_before


class TransportError(MerchantApiError):
    """No complete answer arrived (the `__cause__` is the httpx exception)."""


class ConnectionFailed(TransportError):
    """The request was certainly not sent (refused connection, DNS, connect timeout)."""


class OutcomeUnknown(TransportError):
    """
    The request may have been applied: the connection was reset or closed after sending, the
    answer timed out, or a 2xx could not be decoded. Re-send it with the same idempotency key
    (the API replays what it did), or look the object up.
    """


class ProblemError(MerchantApiError):
    """
    The API answered an RFC 9457 problem. `status_code` (int), `code` (the problem's stable
    `code`, None if the body was not a problem document), `problem` (the document as a dict,
    `{}` if none), `title`, `detail` and `errors` (field errors: a list of
    `{"field", "code", "message"}`) read from it.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        problem: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.status_code = status_code
        self.problem: dict[str, Any] = dict(problem or {})
        code = self.problem.get("code")
        self.code: str | None = code if isinstance(code, str) else None

    @property
    def title(self) -> str | None:
        """The problem's `title`, or None."""
        value = self.problem.get("title")
        return value if isinstance(value, str) else None

    @property
    def detail(self) -> str | None:
        """The problem's `detail`, or None."""
        value = self.problem.get("detail")
        return value if isinstance(value, str) else None

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The problem's field errors (`[{"field", "code", "message"}]`), or `[]`."""
        value = self.problem.get("errors")
        return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


class InvalidRequest(ProblemError):
    """400: the request is malformed (never stored: fix it; the key stays free)."""


class ValidationError(InvalidRequest):
    """400 `validation_error`: field errors, listed in `errors`."""


class CardDataNotAccepted(InvalidRequest):
    """400 `card_data_not_accepted`: a card-number-like digit run; send a token (`tok_...`)."""


class IdempotencyKeyMissing(InvalidRequest):
    """400 `idempotency_key_missing`."""


class IdempotencyKeyInvalid(InvalidRequest):
    """400 `idempotency_key_invalid`: empty, longer than 255, or outside `%x21-7E`."""


class Unauthorized(ProblemError):
    """401 `authentication_required` / `authentication_failed`: no or a wrong API key."""


class PermissionDenied(ProblemError):
    """403 `permission_denied`."""


class NotFound(ProblemError):
    """404 `not_found`: unknown, or another merchant's, payment or refund."""


class Conflict(ProblemError):
    """409: the request conflicts with the current state (never stored)."""


class IdempotencyKeyInUse(Conflict):
    """409 `idempotency_key_in_use`: the key's first request is still running (`Retry-After`)."""


class InvalidPaymentState(Conflict):
    """409 `invalid_payment_state`: capture/void of a payment not `requires_capture`, refund
    of one not `succeeded`."""


class AmountExceedsCapturable(Conflict):
    """409 `amount_exceeds_capturable`: a capture above the authorized amount."""


class AmountExceedsRefundable(Conflict):
    """409 `amount_exceeds_refundable`: a refund above what remains refundable."""


class IdempotencyKeyReused(ProblemError):
    """422 `idempotency_key_reused`: the key was used with another body or route."""


class RateLimited(ProblemError):
    """429 `rate_limited`; `retry_after` says when to come back."""


class ConcurrencyLimited(RateLimited):
    """429 `concurrency_limited`: the merchant's payment POSTs in progress are at its cap;
    `retry_after` (1 s) says when to come back. Nothing was stored."""


class AuthenticationRateLimited(RateLimited):
    """429 `authentication_rate_limited`: too many requests with a missing or invalid API key
    came from this client's address; `retry_after` says when to come back. Fix the key first:
    a request with a key the service accepts is never refused this way."""


class ServerError(ProblemError):
    """5xx: a server failure; a re-send with the same idempotency key is safe."""


class AcquirerError(ServerError):
    """
    502 `acquirer_error`: the acquirer refused the request; the payment (or refund) is
    `failed` with `acquirer_rejected`. Stored and replayed, so it is never re-sent. `payment_id`
    and `refund_id` (None if absent) name what was refused.
    """

    @property
    def payment_id(self) -> str | None:
        """The problem's `payment_id`, or None."""
        value = self.problem.get("payment_id")
        return value if isinstance(value, str) else None

    @property
    def refund_id(self) -> str | None:
        """The problem's `refund_id`, or None."""
        value = self.problem.get("refund_id")
        return value if isinstance(value, str) else None


class ServiceUnavailable(ServerError):
    """
    503 `acquirer_unavailable`: certainly not applied (nothing was charged); the key was
    released. Come back after `retry_after` seconds (at `not_before`), with the same key.
    """


class DatabaseUnavailable(ServerError):
    """
    503 `service_unavailable`: the service could not reach its database, or a statement timed
    out. Unlike `ServiceUnavailable` this promises nothing: the payment may exist, as after a
    crash (the service reconciles it). Retry after `retry_after` seconds with the same key.
    """


#: The problem `code`s of the API (docs/api.md, "Errors"; payments/api/problems.py), their
#: classes.
ERROR_CLASSES: dict[str, type[ProblemError]] = {
    "validation_error": ValidationError,
    "card_data_not_accepted": CardDataNotAccepted,
    "idempotency_key_missing": IdempotencyKeyMissing,
    "idempotency_key_invalid": IdempotencyKeyInvalid,
    "invalid_json": InvalidRequest,
    "duplicate_key": InvalidRequest,
    "json_too_deep": InvalidRequest,
    "body_too_large": InvalidRequest,
    "length_required": InvalidRequest,
    "invalid_content_length": InvalidRequest,
    "body_incomplete": InvalidRequest,
    "webhook_endpoint_limit_reached": InvalidRequest,
    "unsupported_media_type": InvalidRequest,
    "bad_request": InvalidRequest,
    "authentication_required": Unauthorized,
    "authentication_failed": Unauthorized,
    "permission_denied": PermissionDenied,
    "not_found": NotFound,
    "idempotency_key_in_use": IdempotencyKeyInUse,
    "invalid_payment_state": InvalidPaymentState,
    "amount_exceeds_capturable": AmountExceedsCapturable,
    "amount_exceeds_refundable": AmountExceedsRefundable,
    "idempotency_key_reused": IdempotencyKeyReused,
    "rate_limited": RateLimited,
    "concurrency_limited": ConcurrencyLimited,
    "authentication_rate_limited": AuthenticationRateLimited,
    "internal_error": ServerError,
    "acquirer_error": AcquirerError,
    "acquirer_unavailable": ServiceUnavailable,
    "service_unavailable": DatabaseUnavailable,
}

#: The class of an answer whose code is absent or unknown, by status.
STATUS_CLASSES: dict[int, type[ProblemError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: IdempotencyKeyReused,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_class(status_code: int, code: str | None) -> type[ProblemError]:
    """
    The class for an error answer: the code's when the code is known and belongs to that
    status's branch, else the status's (`STATUS_CLASSES`), else `ServerError` for 5xx and
    `ProblemError` for any other status.
    """
    by_status = STATUS_CLASSES.get(status_code)
    if by_status is None:
        by_status = ServerError if 500 <= status_code <= 599 else ProblemError
    by_code = ERROR_CLASSES.get(code) if code is not None else None
    if by_code is not None and issubclass(by_code, _branch(by_status)):
        return by_code
    return by_status


def _branch(cls: type[ProblemError]) -> type[ProblemError]:
    """The direct child of ProblemError that `cls` belongs to (InvalidRequest, Conflict, ...)."""
    for base in cls.__mro__:
        if ProblemError in base.__bases__:
            return base
    return cls
