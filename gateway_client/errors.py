"""
The errors a call to the acquirer can end with, one tree:

* GatewayError                    operation, attempts, idempotency_key, status_code, code
  x RetryableError                the acquirer certainly did not apply the request
    - ConnectionFailedError       DNS failure, connection refused, connect timeout, pool timeout
    - RateLimitedError            429 (or a 403 that the answer confirms as a rate limit)
    - AcquirerUnavailableError    503
  x AmbiguousOutcomeError         it may have applied it: reconcile, never a blind retry
    - ResponseTimeoutError        read/write timeout after the request was (maybe) sent
    - UpstreamServerError         500, 502, 504, any other 5xx
    - ConnectionLostError         connection reset or closed after (part of) the request was sent
    - MalformedResponseError      an answer that is not the documented one (2xx with a bad body,
                                  an unexpected status such as a 3xx)
    - IdempotencyConflictError    409: another request with this key is in flight
  x PermanentError                retrying cannot help
    - InvalidRequestError         400, 404, 405, 422, any other 4xx; a request we cannot send
    - AuthenticationError         401, 403

A decline is not an error: it is an `Authorization` with `approved=False`.

Messages say what happened (operation, acquirer name, HTTP status, error class and a short,
sanitised `code` from the acquirer's error body). They never contain the API key, request or
response headers, the card token, or a response body.
"""

from __future__ import annotations

from typing import Any

from .retry_after import parse_delay_seconds

__all__ = [
    "AcquirerUnavailableError",
    "AmbiguousOutcomeError",
    "AuthenticationError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "GatewayError",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "MalformedResponseError",
    "PermanentError",
    "RateLimitedError",
    "ResponseTimeoutError",
    "RetryableError",
    "UpstreamServerError",
]


def _restore(cls: type[GatewayError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class GatewayError(Exception):
    """
    Base class of every error raised by `AcquirerClient`.

    Attributes:
        operation: "authorize" or "lookup".
        attempts: how many requests were sent (or tried) for this call.
        idempotency_key: the acquirer idempotency key of the call, None for a look-up.
        status_code: the HTTP status of the acquirer's answer, None if there was no answer.
        code: the acquirer's error code from the body, sanitised, or None.
        acquirer: the configured name of the acquirer.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        attempts: int = 1,
        idempotency_key: str | None = None,
        status_code: int | None = None,
        code: str | None = None,
        acquirer: str | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.attempts = attempts
        self.idempotency_key = idempotency_key
        self.status_code = status_code
        self.code = code
        self.acquirer = acquirer

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only constructor cannot be rebuilt from `args` alone; keep errors
        # picklable (task queues and multiprocessing carry them).
        return (_restore, (type(self), self.args, dict(self.__dict__)))


class RetryableError(GatewayError):
    """
    The acquirer certainly did not apply the request: sending it again (with the same
    idempotency key) cannot cause a second authorisation.
    """


class ConnectionFailedError(RetryableError):
    """
    No connection was established, so nothing was sent: DNS failure, connection refused,
    connect timeout, or no free connection in the pool in time.
    """


class RateLimitedError(RetryableError):
    """
    The acquirer refused the request because of a rate limit (429, or a 403 whose headers or
    error code confirm a rate limit). It did not apply it.

    Attributes:
        retry_after_header: the raw `Retry-After` header, or None.
        retry_after: the header read as delay-seconds (ASCII digits only), else None.
            HTTP-date values are not read yet (a full RFC 9110 parser comes later).
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after_header: str | None = None,
        retry_after: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.retry_after_header = retry_after_header
        self.retry_after = (
            retry_after if retry_after is not None else parse_delay_seconds(retry_after_header)
        )


class AcquirerUnavailableError(RetryableError):
    """
    The acquirer answered 503: it is unavailable and did not apply the request.

    Attributes:
        retry_after_header: the raw `Retry-After` header, or None.
        retry_after: the header read as delay-seconds (ASCII digits only), else None.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after_header: str | None = None,
        retry_after: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.retry_after_header = retry_after_header
        self.retry_after = (
            retry_after if retry_after is not None else parse_delay_seconds(retry_after_header)
        )


class AmbiguousOutcomeError(GatewayError):
    """
    The acquirer may have applied the request. Resolve it by reconciliation (a look-up by
    reference, or a re-send with the SAME idempotency key to an acquirer that honours keys);
    never by a blind retry.
    """


class ResponseTimeoutError(AmbiguousOutcomeError):
    """
    A read or write timeout after the connection was established: the request may have been
    received and processed.
    """


class UpstreamServerError(AmbiguousOutcomeError):
    """
    The acquirer (or a gateway in front of it) answered 500, 502, 504 or another 5xx other
    than 503: whether the request was applied is unknown.
    """


class ConnectionLostError(AmbiguousOutcomeError):
    """
    The connection was reset or closed after (part of) the request was sent, before a complete
    answer arrived.
    """


class MalformedResponseError(AmbiguousOutcomeError):
    """
    The acquirer answered, but not with the documented answer: a 2xx whose body is not the
    documented JSON (or does not match the request), or a status the API never uses (1xx, 3xx).
    """


class IdempotencyConflictError(AmbiguousOutcomeError):
    """
    The acquirer answered 409: another request with this idempotency key is still in flight,
    so the payment may be authorised by that request.
    """


class PermanentError(GatewayError):
    """
    The acquirer processed and refused the request, or it could not be sent as it is:
    retrying the same request cannot help.
    """


class InvalidRequestError(PermanentError):
    """
    The acquirer refused the request as invalid (400, 404, 405, 422 or another 4xx), or the
    request could not be expressed as valid HTTP.
    """


class AuthenticationError(PermanentError):
    """
    The acquirer refused our credentials (401) or the operation (403, not a rate limit).
    """
