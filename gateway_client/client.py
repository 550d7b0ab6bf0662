"""
The acquirer client: one HTTP exchange per call, classified.

First cut: every call makes exactly ONE attempt. Retries (with the same idempotency key),
Retry-After handling, the overall deadline, the retry budget and the circuit breaker wrap
`AcquirerClient._attempt` later; the classification they rely on is already final here (see
classify.py).

Logging: one line per attempt on the `gateway_client` logger with the operation, acquirer name,
our reference, attempt number, HTTP status, outcome (approved, declined, ok or the error class)
and elapsed seconds. Never the API key, headers, card token or bodies.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import httpx

from .classify import classify_exception, classify_status, error_code
from .errors import (
    AcquirerUnavailableError,
    GatewayError,
    MalformedResponseError,
    RateLimitedError,
)
from .types import AcquirerConfig, Authorization, AuthorizationRequest
from .wire import MalformedBody, decode_charge, decode_charge_list, encode_authorization

__all__ = ["AcquirerClient"]

logger = logging.getLogger("gateway_client")

T = TypeVar("T")

USER_AGENT = "payment-service-gateway-client/0.1"

# An answer larger than this is not a charge (or a list of them): it is read no further.
MAX_BODY_BYTES = 1024 * 1024

_DESCRIPTIONS: dict[str, str] = {
    "ConnectionFailedError": "could not connect",
    "ResponseTimeoutError": "timed out waiting for the answer",
    "ConnectionLostError": "connection lost before a complete answer",
    "MalformedResponseError": "the answer could not be decoded",
    "InvalidRequestError": "the request could not be sent as valid HTTP",
}


@dataclass(frozen=True, slots=True)
class _Call:
    """What one call is about: enough to label its errors and its log lines."""

    operation: str
    reference: str
    idempotency_key: str | None
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class _Answer:
    status_code: int
    headers: httpx.Headers
    body: bytes | None  # None: the body could not be read (the status still counts)


class _BodyTooLarge(Exception):
    pass


class AcquirerClient:
    """
    Client for the upstream card acquirer (`POST /charges`, `GET /charges?reference=`).

    Thread-safe: one `httpx.Client` (with its connection pool) is shared by concurrent calls.
    Use as a context manager, or call `close()`.

    `transport` replaces the network (e.g. `httpx.MockTransport` in tests).
    """

    def __init__(
        self, config: AcquirerConfig, *, transport: httpx.BaseTransport | None = None
    ) -> None:
        if not isinstance(config, AcquirerConfig):
            raise TypeError("config must be an AcquirerConfig")
        self._config = config
        self._charges_url = config.base_url.rstrip("/") + "/charges"
        self._http = httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(
                connect=config.connect_timeout,
                read=config.read_timeout,
                write=config.read_timeout,
                pool=config.connect_timeout,
            ),
            headers={
                "Authorization": f"Bearer {config.api_key}",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            },
            follow_redirects=False,
            # Handed its config: no proxies, certificates or .netrc from the environment.
            trust_env=False,
        )

    @property
    def config(self) -> AcquirerConfig:
        """The configuration this client was built with."""
        return self._config

    def __repr__(self) -> str:
        return f"AcquirerClient(name={self._config.name!r}, base_url={self._config.base_url!r})"

    # -- public operations -------------------------------------------------------------------

    def authorize(self, request: AuthorizationRequest) -> Authorization:
        """
        Ask the acquirer to authorise `request` (one attempt).

        Returns the Authorization, approved or declined. Raises a GatewayError subclass:
        RetryableError (not applied), AmbiguousOutcomeError (maybe applied: reconcile) or
        PermanentError (refused).
        """
        if not isinstance(request, AuthorizationRequest):
            raise TypeError("request must be an AuthorizationRequest")
        call = _Call("authorize", request.reference, request.idempotency_key)
        http_request = self._http.build_request(
            "POST",
            self._charges_url,
            content=encode_authorization(request),
            headers={
                "Content-Type": "application/json",
                "Idempotency-Key": request.idempotency_key,
            },
        )

        def decode(answer: _Answer) -> Authorization:
            replayed = answer.headers.get("idempotent-replayed", "").strip().lower() == "true"
            authorization = decode_charge(answer.body or b"", replayed=replayed)
            for name in ("amount", "currency", "reference"):
                if getattr(authorization, name) != getattr(request, name):
                    raise MalformedBody(f"the charge does not match the request ({name})")
            return authorization

        return self._attempt(call, http_request, decode, _authorization_outcome)

    def lookup(self, reference: str) -> list[Authorization]:
        """
        Return the acquirer's charges for our `reference` (one attempt; may be empty).

        Raises the same GatewayError subclasses as `authorize`.
        """
        if not isinstance(reference, str) or not reference:
            raise ValueError("reference must be a non-empty string")
        call = _Call("lookup", reference, None)
        http_request = self._http.build_request(
            "GET", self._charges_url, params={"reference": reference}
        )

        def decode(answer: _Answer) -> list[Authorization]:
            authorizations = decode_charge_list(answer.body or b"")
            if any(item.reference != reference for item in authorizations):
                raise MalformedBody("a listed charge has another reference")
            return authorizations

        return self._attempt(call, http_request, decode, lambda _: "ok")

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> AcquirerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- one attempt -------------------------------------------------------------------------

    def _attempt(
        self,
        call: _Call,
        request: httpx.Request,
        decode: Callable[[_Answer], T],
        outcome: Callable[[T], str],
    ) -> T:
        started = time.monotonic()
        status_code: int | None = None
        try:
            answer = self._exchange(call, request)
            status_code = answer.status_code
            if not 200 <= status_code <= 299:
                raise self._status_error(call, answer)
            try:
                result = decode(answer)
            except MalformedBody as exc:
                raise self._error(
                    MalformedResponseError,
                    call,
                    f"HTTP {status_code} with a body that is not the documented JSON: {exc}",
                    status_code=status_code,
                ) from None
        except GatewayError as error:
            self._log(call, error.status_code, type(error).__name__, started, logging.WARNING)
            raise
        self._log(call, status_code, outcome(result), started, logging.INFO)
        return result

    def _exchange(self, call: _Call, request: httpx.Request) -> _Answer:
        try:
            response = self._http.send(request, stream=True)
        except Exception as exc:
            if classify_exception(exc) is None:
                raise  # not a transport failure: a bug, let it through unchanged
            raise self._transport_error(call, exc, status_code=None) from exc
        try:
            status_code = response.status_code
            try:
                body: bytes | None = _read_body(response)
            except _BodyTooLarge:
                if 200 <= status_code <= 299:
                    raise self._error(
                        MalformedResponseError,
                        call,
                        f"HTTP {status_code} with a body larger than {MAX_BODY_BYTES} bytes",
                        status_code=status_code,
                    ) from None
                body = None
            except Exception as exc:
                if classify_exception(exc) is None:
                    raise
                if 200 <= status_code <= 299:
                    # Applied or not, we do not know what the acquirer decided.
                    raise self._transport_error(call, exc, status_code=status_code) from exc
                body = None  # the status line already says what happened
            return _Answer(status_code, response.headers, body)
        finally:
            with contextlib.suppress(httpx.HTTPError):
                response.close()

    # -- building errors ---------------------------------------------------------------------

    def _status_error(self, call: _Call, answer: _Answer) -> GatewayError:
        code = self._sanitised_code(answer.body)
        error_class = classify_status(answer.status_code, headers=answer.headers, code=code)
        assert error_class is not None  # 2xx never gets here
        detail = f"HTTP {answer.status_code}" + (f", code {code!r}" if code else "")
        extra: dict[str, Any] = {}
        if issubclass(error_class, RateLimitedError | AcquirerUnavailableError):
            extra["retry_after_header"] = answer.headers.get("retry-after")
        return self._error(
            error_class, call, detail, status_code=answer.status_code, code=code, **extra
        )

    def _transport_error(
        self, call: _Call, exc: BaseException, *, status_code: int | None
    ) -> GatewayError:
        error_class = classify_exception(exc)
        assert error_class is not None  # callers let unclassified exceptions through
        description = _DESCRIPTIONS.get(error_class.__name__, "the exchange failed")
        # Only the type of the low-level error: its message could quote what was sent.
        detail = f"{description} (httpx.{type(exc).__name__})"
        return self._error(error_class, call, detail, status_code=status_code)

    def _error(
        self,
        error_class: type[GatewayError],
        call: _Call,
        detail: str,
        **kwargs: Any,
    ) -> GatewayError:
        message = (
            f"{call.operation} at acquirer {self._config.name!r}: {detail} [{error_class.__name__}]"
        )
        return error_class(
            message,
            operation=call.operation,
            attempts=call.attempt,
            idempotency_key=call.idempotency_key,
            acquirer=self._config.name,
            **kwargs,
        )

    def _sanitised_code(self, body: bytes | None) -> str | None:
        code = error_code(body)
        if code is not None and self._config.api_key in code:
            return None
        return code

    # -- logging -----------------------------------------------------------------------------

    def _log(
        self, call: _Call, status_code: int | None, outcome: str, started: float, level: int
    ) -> None:
        elapsed = time.monotonic() - started
        logger.log(
            level,
            "acquirer attempt operation=%s acquirer=%s reference=%s attempt=%d status=%s "
            "outcome=%s elapsed=%.3fs",
            call.operation,
            self._config.name,
            call.reference,
            call.attempt,
            status_code if status_code is not None else "-",
            outcome,
            elapsed,
            extra={
                "gateway_operation": call.operation,
                "gateway_acquirer": self._config.name,
                "gateway_reference": call.reference,
                "gateway_attempt": call.attempt,
                "gateway_status": status_code,
                "gateway_outcome": outcome,
                "gateway_elapsed": elapsed,
            },
        )


def _read_body(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _authorization_outcome(authorization: Authorization) -> str:
    return "approved" if authorization.approved else "declined"
