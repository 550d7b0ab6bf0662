"""
One exchange with the acquirer: send one request, read its answer within the call's
deadline, and turn what went wrong into the GatewayError that says so.

Like httpx's `map_httpcore_exceptions`, every low-level failure is mapped at this one place
and re-raised with `raise ... from` (the httpx exception stays the `__cause__`); exceptions
that are no transport failure (a bug, a cancellation) pass through unchanged. The status
codes are mapped by classify.py's table; a 403 is a rate limit only when the answer confirms
it. `Retry-After` is read here (the quota profile first, then the header as delay-seconds)
and the error constructors receive seconds, never a header to parse. Messages carry the
operation, the acquirer's name, the status and a sanitised error code: never the API key,
headers, the card token or a body.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from resilience import deadline as _deadline
from resilience.clock import Clock
from resilience.metrics import Metrics
from resilience.quota import QUOTA_HEADER, ServerWait, quota_profile
from resilience.retry_after import parse_delay_seconds

from ._call import Answer, CallLabel
from .classify import classify_exception
from .errors import (
    AcquirerUnavailableError,
    AuthenticationError,
    GatewayError,
    MalformedResponseError,
    RateLimitedError,
    ResponseTimeoutError,
)
from .types import AcquirerConfig

if TYPE_CHECKING:
    from .dialect import Dialect

__all__ = ["MAX_BODY_BYTES", "Exchange"]

logger = logging.getLogger("gateway_client")

# An answer larger than this is not a charge (or a list of them): it is read no further.
MAX_BODY_BYTES = 1024 * 1024

_DESCRIPTIONS: dict[str, str] = {
    "ConnectionFailedError": "could not connect",
    "ResponseTimeoutError": "timed out waiting for the answer",
    "ConnectionLostError": "connection lost before a complete answer",
    "MalformedResponseError": "the answer could not be decoded",
    "InvalidRequestError": "the request could not be sent as valid HTTP",
}


class _BodyTooLarge(Exception):  # internal signal
    pass


class _DeadlineReached(Exception):  # internal signal
    pass


class Exchange:
    """
    Sends requests on `transport` for the acquirer of `config` and maps their failures;
    `dialect` classifies the provider's error answers and reads their error codes.

    `clock` reads the deadline and the wall clock (for `not_before`); `metrics` counts the
    invalid rate headers; `deadline_sockets` says whether `transport` has the deadline-aware
    sockets of deadline.py installed.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport,
        config: AcquirerConfig,
        dialect: Dialect,
        *,
        clock: Clock,
        metrics: Metrics,
        deadline_sockets: bool,
    ) -> None:
        self._transport = transport
        self._closed = False
        self._config = config
        self._dialect = dialect
        self._clock = clock
        self._metrics = metrics
        self._deadline_sockets = deadline_sockets
        self._profile = quota_profile(config.quota_profile)

    def send(self, call: CallLabel, request: httpx.Request, deadline: float) -> Answer:
        """
        Send `request` and read the whole answer before `deadline` (monotonic seconds).
        Raises the GatewayError of a transport failure (or of a 2xx cut off or too large);
        a non-2xx answer whose body breaks off is returned with `body=None`.
        """
        if not self._deadline_sockets:
            return self._exchange(call, request, deadline)
        # _deadline.attempt_deadline(left), without a generator-based context manager.
        token = _deadline._set_deadline(max(0.0, deadline - self._clock.monotonic()))
        try:
            return self._exchange(call, request, deadline)
        finally:
            _deadline._reset_deadline(token)

    def close(self) -> None:
        """Close the transport's connections. A later `send` raises `RuntimeError`, as a
        closed `httpx.Client` did: a transport would quietly open new connections."""
        self._closed = True
        self._transport.close()

    def _exchange(self, call: CallLabel, request: httpx.Request, deadline: float) -> Answer:
        if self._closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        try:
            response = self._transport.handle_request(request)
        except Exception as exc:
            if classify_exception(exc) is None:
                raise  # not a transport failure: a bug, let it through unchanged
            raise self.transport_error(call, exc, status_code=None) from exc
        try:
            status_code = response.status_code
            try:
                body: bytes | None = self._read_body(response, deadline)
            except _BodyTooLarge:
                if 200 <= status_code <= 299:
                    raise self.error(
                        MalformedResponseError,
                        call,
                        f"HTTP {status_code} with a body larger than {MAX_BODY_BYTES} bytes",
                        status_code=status_code,
                    ) from None
                body = None
            except _DeadlineReached:
                if 200 <= status_code <= 299:
                    raise self.error(
                        ResponseTimeoutError,
                        call,
                        "the answer did not complete before the call's deadline",
                        status_code=status_code,
                    ) from None
                body = None
            except Exception as exc:
                if classify_exception(exc) is None:
                    raise
                if 200 <= status_code <= 299:
                    # Applied or not, we do not know what the acquirer decided.
                    raise self.transport_error(call, exc, status_code=status_code) from exc
                body = None  # the status line already says what happened
            return Answer(status_code, response.headers, body)
        finally:
            try:  # noqa: SIM105 - per attempt: contextlib.suppress would add its own cost
                response.close()
            except httpx.HTTPError:
                pass

    def _read_body(self, response: httpx.Response, deadline: float) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _BodyTooLarge
            chunks.append(chunk)
            if self._clock.monotonic() >= deadline:
                raise _DeadlineReached
        return b"".join(chunks)

    def server_wait(self, answer: Answer) -> ServerWait | None:
        """
        What the answer's headers say about waiting (quota.py, by the config's profile): for
        429, 503, 403, 409 and a 2xx whose quota headers say nothing is left; else None.
        Invalid headers are counted (`invalid_header`) and ignored, never raised.
        """
        status = answer.status_code
        if 200 <= status <= 299 or status in (429, 503, 403, 409):
            try:
                wait = self._profile.server_wait(
                    status,
                    answer.headers,
                    now=self._clock.time(),
                    rate_limited=status == 429 or status == 403,
                )
            except Exception:  # never let a header take the client down
                logger.exception("reading the rate headers failed")
                return None
            for header in wait.invalid:
                self._metrics.increment("invalid_header", header=header)
            if 200 <= status <= 299 and wait.source != QUOTA_HEADER:
                return ServerWait(None, invalid=wait.invalid, seen=wait.seen)
            return wait
        return None

    def status_error(
        self, call: CallLabel, answer: Answer, server_wait: ServerWait | None
    ) -> GatewayError:
        """
        The GatewayError of a non-2xx `answer`. For 429 and 503 (and a confirmed 403):
        `retry_after_header` is the raw header; `retry_after` the server's wait in seconds
        (the quota profile's, else the header read as delay-seconds, else None); with the
        profile's wait also `not_before` and `wait_source`.
        """
        code = self._sanitised_code(answer.body)
        error_class = self._dialect.error_class(answer.status_code, answer.headers, code)
        assert error_class is not None  # 2xx never gets here
        if answer.status_code == 403 and error_class is RateLimitedError:
            confirmed = self._profile.confirms_rate_limit(answer.headers, now=self._clock.time())
            if not confirmed and not _code_names_rate_limit(code):
                error_class = AuthenticationError
        detail = f"HTTP {answer.status_code}" + (f", code {code!r}" if code else "")
        extra: dict[str, Any] = {}
        if issubclass(error_class, RateLimitedError | AcquirerUnavailableError):
            header = answer.headers.get("retry-after")
            wait = server_wait.seconds if server_wait is not None else None
            extra["retry_after_header"] = header
            extra["retry_after"] = wait if wait is not None else parse_delay_seconds(header)
            if server_wait is not None and wait is not None:
                extra["not_before"] = self.not_before(wait)
                extra["wait_source"] = server_wait.source
        return self.error(
            error_class, call, detail, status_code=answer.status_code, code=code, **extra
        )

    def transport_error(
        self, call: CallLabel, exc: BaseException, *, status_code: int | None
    ) -> GatewayError:
        """The GatewayError of a classified httpx exception (its type named, never its text)."""
        error_class = classify_exception(exc)
        assert error_class is not None  # callers let unclassified exceptions through
        description = _DESCRIPTIONS.get(error_class.__name__, "the exchange failed")
        # Only the type of the low-level error: its message could quote what was sent.
        detail = f"{description} (httpx.{type(exc).__name__})"
        return self.error(error_class, call, detail, status_code=status_code)

    def error(
        self,
        error_class: type[GatewayError],
        call: CallLabel,
        detail: str,
        **kwargs: Any,
    ) -> GatewayError:
        """An `error_class` labelled with the call: "<operation> at acquirer '<name>': ..."."""
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

    def not_before(self, seconds: float) -> datetime:
        """The wall-clock instant `seconds` from now (aware, UTC)."""
        return datetime.fromtimestamp(self._clock.time() + seconds, tz=UTC)

    def _sanitised_code(self, body: bytes | None) -> str | None:
        code = self._dialect.error_code(body)
        if code is not None and self._config.api_key in code:
            return None
        return code


def _code_names_rate_limit(code: str | None) -> bool:
    if code is None:
        return False
    lowered = code.lower().replace("-", "_").replace(".", "_")
    return "rate_limit" in lowered or "ratelimit" in lowered or "too_many_requests" in lowered
