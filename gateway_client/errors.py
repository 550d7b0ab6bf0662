"""
The errors a call to the acquirer can end with, one tree:

* GatewayError                    operation, attempts, idempotency_key, status_code, code
  x RetryableError                the acquirer certainly did not apply the request;
                                  retry_after, not_before when a wait is known
    - ConnectionFailedError       DNS failure, connection refused, connect timeout, pool timeout
    - RateLimitedError            429 (or a 403 that the answer confirms as a rate limit), or
                                  the scope's rate gate refused to send
      - ConcurrencyLimitedError   no concurrency slot of the quota scope was free in time
                                  (the AIMD limit after rate limits); nothing was sent
    - AcquirerUnavailableError    503
    - CircuitOpenError            the endpoint group's circuit breaker refused the attempt
                                  (open, half-open with every permit taken, forced open);
                                  nothing was sent; retry_after = time until probes
    - RetryBudgetExhaustedError   a retry was needed but the acquirer's retry budget is empty
  x AmbiguousOutcomeError         it may have applied it: reconcile, never a blind retry
    - ResponseTimeoutError        read/write timeout after the request was (maybe) sent
    - UpstreamServerError         500, 502, 504, any other 5xx
    - ConnectionLostError         connection reset or closed after (part of) the request was sent
    - MalformedResponseError      an answer that is not the documented one (2xx with a bad body,
                                  an unexpected status such as a 3xx)
    - IdempotencyConflictError    409: another request with this key is in flight
  x PermanentError                retrying cannot help; acquirer_code: the acquirer's refusal
                                  code (charge_not_found, charge_already_captured, ...)
    - InvalidRequestError         400, 404, 405, 422, any other 4xx; a request we cannot send
    - AuthenticationError         401, 403

A decline is not an error: it is an `Authorization` with `approved=False`; nor is a failed
refund (a `Refund` with `status="failed"`). The acquirer's rule refusals of a capture, void or
refund (404 `charge_not_found`; 422 `charge_already_captured`, `charge_already_voided`,
`charge_declined`, `charge_not_captured`, `amount_exceeds_capturable`,
`amount_exceeds_refundable`, `charge_already_refunded`) are InvalidRequestErrors: the service
tells them apart by `acquirer_code`.

A call of several attempts ends with the error of its last attempt, except that once any
attempt was ambiguous the whole call is: a 500 followed by a 503 raises the ambiguous
UpstreamServerError (the first attempt may have been applied), never a RetryableError.
`attempts` always counts every request sent for the call (0 when the rate gate, the circuit
breaker or the concurrency limiter refused it before the first one), and `attempt_log` lists
each step of the call (`AttemptRecord`s, as its log lines; empty for an error raised outside
a call).

Messages say what happened (operation, acquirer name, HTTP status, error class and a short,
sanitised `code` from the acquirer's error body). They never contain the API key, request or
response headers, the card token, or a response body.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .types import AttemptRecord

__all__ = [
    "AcquirerUnavailableError",
    "AmbiguousOutcomeError",
    "AuthenticationError",
    "CircuitOpenError",
    "ConcurrencyLimitedError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "GatewayError",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "MalformedResponseError",
    "PermanentError",
    "RateLimitedError",
    "ResponseTimeoutError",
    "RetryBudgetExhaustedError",
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
        operation: "authorize", "capture", "void", "refund", "lookup", "lookup_refunds" or
            "action_details".
        attempts: how many requests were sent (or tried) for this call.
        idempotency_key: the acquirer idempotency key of the call, None for a look-up.
        status_code: the HTTP status of the acquirer's answer, None if there was no answer.
        code: the acquirer's error code from the body, sanitised, or None.
        acquirer: the configured name of the acquirer.
        provider_retry: the provider's own word on retrying the answer (Stripe's
            `Stripe-Should-Retry`: True or False), None when it said nothing.
        provider_request_id: the provider's id of the last request (Stripe's `Request-Id`),
            None when it sends none or nothing was answered.
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
        self.attempt_log: tuple[AttemptRecord, ...] = ()
        self.provider_retry: bool | None = None
        self.provider_request_id: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # The keyword-only constructor cannot be rebuilt from `args` alone; keep errors
        # picklable (task queues and multiprocessing carry them).
        return (_restore, (type(self), self.args, dict(self.__dict__)))


class RetryableError(GatewayError):
    """
    The acquirer certainly did not apply the request: sending it again (with the same
    idempotency key) cannot cause a second authorisation.

    Attributes:
        retry_after: seconds to wait before sending again, when the acquirer (Retry-After,
            quota headers) or the scope's rate gate said so; the full wait, never shortened.
            None when no wait is known.
        not_before: the wall-clock instant (aware, UTC) before which no request may be sent,
            `now + retry_after`; None when no wait is known.
        wait_source: where the wait came from: "retry-after", "quota-header" or "gate".
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        not_before: datetime | None = None,
        wait_source: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after
        self.not_before = not_before
        self.wait_source = wait_source


class ConnectionFailedError(RetryableError):
    """
    No connection was established, so nothing was sent: DNS failure, connection refused,
    connect timeout, or no free connection in the pool in time.
    """


# The mixin's base for the type checker only: at run time it is a plain mixin, so the tree's
# branches stay as drawn above (RetryableError's direct subclasses are the five leaves).
if TYPE_CHECKING:
    _RetryableBase = RetryableError
else:
    _RetryableBase = object


class _RetryAfterHeader(_RetryableBase):
    """Mixin of the refusals the acquirer answers itself (429, 503): it may say how long to wait.

    Attributes:
        retry_after_header: the raw `Retry-After` header, or None, kept for the record. The
            client reads it (_exchange.py) and passes the seconds as `retry_after`: no header
            is parsed here.
    """

    def __init__(
        self, message: str, *, retry_after_header: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.retry_after_header = retry_after_header


class RateLimitedError(_RetryAfterHeader, RetryableError):
    """
    The acquirer refused the request because of a rate limit (429, or a 403 whose headers or
    error code confirm a rate limit), or the scope's rate gate refused to send it (attempts
    then counts only the requests sent before). It was not applied.

    Attributes:
        retry_after_header: the raw `Retry-After` header, or None.
        retry_after: the full wait in seconds (Retry-After, quota headers or the gate), or
            None.
        not_before: `now + retry_after` as an aware UTC datetime, or None.
    """


class ConcurrencyLimitedError(RateLimitedError):
    """
    No concurrency slot of the quota scope was free within the call's wait: after rate-limit
    answers the scope's adaptive (AIMD) limit is lower than the calls in flight. Nothing was
    sent by this attempt.

    Attributes:
        scope: the quota scope. limit: its concurrency limit when refused.
        retry_after: a short wait (1 s) before trying again.
    """

    def __init__(
        self, message: str, *, scope: str | None = None, limit: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.scope = scope
        self.limit = limit


class CircuitOpenError(RetryableError):
    """
    The circuit breaker of the endpoint group refused the attempt: the acquirer failed too
    often recently (or an operator forced the breaker open), so nothing was sent. When it
    ends a call after earlier attempts (the breaker opened mid-call), the last attempt's error
    is the `__cause__`; if an earlier attempt was ambiguous, the call raises that ambiguous
    error instead.

    Attributes:
        group: the breaker's endpoint group ("authorize", "capture", "void", "refund",
            "lookup").
        state: "open", "half_open" (every probe permit taken) or "forced_open".
        retry_after: seconds until the breaker admits probes (forced open: its open duration,
            a hint to check back); `not_before` the same as an instant.
    """

    def __init__(
        self, message: str, *, group: str | None = None, state: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.group = group
        self.state = state


class AcquirerUnavailableError(_RetryAfterHeader, RetryableError):
    """
    The acquirer answered 503: it is unavailable and did not apply the request.

    Attributes:
        retry_after_header: the raw `Retry-After` header, or None.
        retry_after: the full wait in seconds (Retry-After or quota headers), or None.
        not_before: `now + retry_after` as an aware UTC datetime, or None.
    """


class RetryBudgetExhaustedError(RetryableError):
    """
    A retry was needed, but the acquirer's retry budget (retries <= 10 % of first attempts
    plus a small reserve, fleet-wide) was empty, so the call failed at once instead of adding
    load. Every attempt made was certainly not applied (after an ambiguous attempt the
    ambiguous error is raised instead). The last attempt's error is the `__cause__`.

    Attributes:
        last_error: the class name of the last attempt's error.
    """

    def __init__(self, message: str, *, last_error: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.last_error = last_error


class AmbiguousOutcomeError(GatewayError):
    """
    The acquirer may have applied the request. Resolve it by reconciliation (a look-up by
    payment reference, or a re-send with the SAME idempotency key to an acquirer that honours keys);
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

    `acquirer_code` is the acquirer's own code for the refusal, read from its answer's body
    (sanitised), e.g. "charge_not_found" (404), "charge_already_captured",
    "amount_exceeds_refundable" or "idempotency_key_reused" (422); None when nothing was
    answered (the request could not be sent) or the answer named no code.
    """

    @property
    def acquirer_code(self) -> str | None:
        """The acquirer's refusal code (sanitised), or None without an answer or a code."""
        return self.code if self.status_code is not None else None


class InvalidRequestError(PermanentError):
    """
    The acquirer refused the request as invalid (400, 404, 405, 422 or another 4xx), or the
    request could not be expressed as valid HTTP.
    """


class AuthenticationError(PermanentError):
    """
    The acquirer refused our credentials (401) or the operation (403, not a rate limit).
    """
