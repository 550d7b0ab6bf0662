"""
Classifying one attempt: was the request applied, and may it be sent again?

The rule (docs/reference/retries.md), for one attempt of a POST to the acquirer:

| outcome                                 | was the request applied? | retry?                     |
| --------------------------------------- | ------------------------ | -------------------------- |
| DNS failure, connection refused,        | certainly not            | yes                        |
| connect timeout                         |                          |                            |
| 429, 503 with Retry-After               | not applied (the server  | yes, not before the        |
|                                         | says so)                 | server's time              |
| 502, 504                                | unknown in general (a    | only with an idempotency   |
|                                         | gateway may have         | key                        |
|                                         | forwarded it)            |                            |
| 500, read timeout, connection reset     | unknown                  | only with an idempotency   |
| after the body was sent, garbled body   |                          | key that the acquirer      |
|                                         |                          | honours                    |
| 400, 401, 403 (unless confirmed as a    | processed and refused    | never                      |
| rate limit), 404, 422                   |                          |                            |
| 2xx (approved or declined)              | applied                  | never (a decline is a      |
|                                         |                          | result, not an error)      |

How it maps onto the error tree (errors.py):

| outcome                                                  | error                          |
| -------------------------------------------------------- | ------------------------------ |
| httpx.ConnectError (DNS, refused, TLS handshake),        | ConnectionFailedError          |
| ConnectTimeout, PoolTimeout, ProxyError                  |   (retryable)                  |
| 429; a 403 confirmed as a rate limit                     | RateLimitedError (retryable)   |
| 503                                                      | AcquirerUnavailableError       |
|                                                          |   (retryable)                  |
| httpx.ReadTimeout, WriteTimeout                          | ResponseTimeoutError (ambig.)  |
| 500, 502, 504, any other 5xx                             | UpstreamServerError (ambig.)   |
| httpx.RemoteProtocolError, ReadError, WriteError,        | ConnectionLostError (ambig.)   |
| CloseError; a 2xx whose body broke off                   |                                |
| 2xx whose body is not the documented JSON or does not    | MalformedResponseError         |
| match the request; 1xx, 3xx, >= 600; httpx.DecodingError |   (ambiguous)                  |
| 409 (same idempotency key in flight)                     | IdempotencyConflictError       |
|                                                          |   (ambiguous)                  |
| 400, 404, 405, 422, any other 4xx; httpx.LocalProtocol-  | InvalidRequestError (perm.)    |
| Error, UnsupportedProtocol, InvalidURL (nothing sent)    |                                |
| 401; a 403 not confirmed as a rate limit                 | AuthenticationError (perm.)    |
| 2xx approved or declined                                 | no error: an Authorization     |

A 403 is a rate limit only when the answer confirms it: a `Retry-After` header,
`X-RateLimit-Remaining: 0`, a `RateLimit` field with `r=0`, or an error code naming a rate limit.

For an error status whose body breaks off, the status decides (the status line already says
what the acquirer did). A 503 is retryable with or without Retry-After.

"Retry" is decided by the caller (and later by the retry layer), not here: an ambiguous outcome
may be re-sent only with the same idempotency key to an acquirer that honours keys
(`AcquirerConfig.honours_idempotency_keys`), and is otherwise reconciled. The same classes
apply to a look-up (a GET, safe to repeat).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import httpx

from resilience import aimd, breaker_types
from resilience.quota import ratelimit_exhausted

from .errors import (
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    AuthenticationError,
    ConnectionFailedError,
    ConnectionLostError,
    GatewayError,
    IdempotencyConflictError,
    InvalidRequestError,
    MalformedResponseError,
    PermanentError,
    RateLimitedError,
    ResponseTimeoutError,
    UpstreamServerError,
)

__all__ = [
    "breaker_outcome",
    "classify_exception",
    "classify_status",
    "error_code",
    "limiter_outcome",
]

_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_RATE_LIMIT_CODE = re.compile(r"rate[_.\-]?limit|too[_.\-]?many[_.\-]?requests", re.IGNORECASE)


def classify_status(
    status_code: int,
    *,
    headers: Mapping[str, str] | None = None,
    code: str | None = None,
) -> type[GatewayError] | None:
    """Return the error class for an answer with this status, or None for a 2xx (a result)."""
    if 200 <= status_code <= 299:
        return None
    if status_code == 429:
        return RateLimitedError
    if status_code == 401:
        return AuthenticationError
    if status_code == 403:
        if _confirms_rate_limit(headers or {}, code):
            return RateLimitedError
        return AuthenticationError
    if status_code == 409:
        return IdempotencyConflictError
    if 400 <= status_code <= 499:
        return InvalidRequestError
    if status_code == 503:
        return AcquirerUnavailableError
    if 500 <= status_code <= 599:
        return UpstreamServerError
    # 1xx that reached us, 3xx (redirects are not followed), or nonsense: not an answer the API
    # documents, and nothing says the request was not applied.
    return MalformedResponseError


def classify_exception(exc: BaseException) -> type[GatewayError] | None:
    """Return the error class for an httpx failure, or None if `exc` is not one (propagate it)."""
    # Order matters: ConnectTimeout and PoolTimeout are TimeoutExceptions, ConnectError is a
    # NetworkError, and they are the only ones that prove nothing was sent.
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return ConnectionFailedError
    if isinstance(exc, httpx.ProxyError):
        return ConnectionFailedError
    if isinstance(exc, httpx.TimeoutException):  # ReadTimeout, WriteTimeout
        return ResponseTimeoutError
    if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol | httpx.InvalidURL):
        # Our request could not be expressed as valid HTTP; it was never sent.
        return InvalidRequestError
    if isinstance(exc, httpx.DecodingError):
        return MalformedResponseError
    if isinstance(exc, httpx.RequestError):
        # ReadError, WriteError, CloseError, RemoteProtocolError, and anything else that
        # interrupted an exchange which may have reached the acquirer.
        return ConnectionLostError
    return None


def error_code(body: bytes | None) -> str | None:
    """
    Return the acquirer's error code from an error body, sanitised, or None.

    Looks at `{"code": ...}`, `{"error": "..."}` and `{"error": {"code": ...}}`. Only a short
    token of letters, digits, `_`, `.` and `-` is kept: the body itself is never repeated.
    """
    if not body:
        return None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict):
        return None
    candidate = document.get("code")
    error = document.get("error")
    if candidate is None and isinstance(error, str):
        candidate = error
    if candidate is None and isinstance(error, dict):
        candidate = error.get("code")
    if isinstance(candidate, str) and _CODE.fullmatch(candidate):
        return candidate
    return None


def _confirms_rate_limit(headers: Mapping[str, str], code: str | None) -> bool:
    lowered = {name.lower(): value for name, value in headers.items()}
    if lowered.get("retry-after", "").strip():
        return True
    if lowered.get("x-ratelimit-remaining", "").strip() == "0":
        return True
    # `RateLimit: "default";r=0;t=30`: read strictly (quota.py); an invalid field says nothing.
    if ratelimit_exhausted(lowered.get("ratelimit")):
        return True
    return code is not None and _RATE_LIMIT_CODE.search(code) is not None


def breaker_outcome(error: GatewayError | None) -> str:
    """What one attempt means to the circuit breaker: SUCCESS, FAILURE or IGNORED (breaker.py)."""
    if error is None:
        return breaker_types.SUCCESS  # 2xx, approved or declined
    if isinstance(error, RateLimitedError | IdempotencyConflictError | PermanentError):
        return breaker_types.IGNORED  # the rate gate's, our duplicate in flight, our own 4xx
    if isinstance(error, ConnectionFailedError) and isinstance(error.__cause__, httpx.PoolTimeout):
        return breaker_types.IGNORED  # our own connection pool is exhausted, not the acquirer
    if isinstance(error, ConnectionFailedError | AcquirerUnavailableError | AmbiguousOutcomeError):
        return breaker_types.FAILURE  # refused/DNS/connect timeout, 503, 5xx, timeouts, resets
    return breaker_types.IGNORED


def limiter_outcome(error: GatewayError | None) -> str:
    """What one attempt means to the AIMD limiter: a rate limit drops, a result succeeds."""
    if error is None:
        return aimd.SUCCESS
    if isinstance(error, RateLimitedError):
        return aimd.DROP
    return aimd.IGNORE
