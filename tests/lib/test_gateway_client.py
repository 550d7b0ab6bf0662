"""
Unit tests of gateway_client's single attempt: no sockets, httpx.MockTransport stands in for the
acquirer. Clients here make one attempt per call (`ONE_ATTEMPT`); retries are tested in
test_gateway_retry.py.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

import gateway_client
from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    AuthenticationError,
    Authorization,
    AuthorizationRequest,
    ConnectionFailedError,
    ConnectionLostError,
    GatewayError,
    IdempotencyConflictError,
    InvalidRequestError,
    MalformedResponseError,
    ManualClock,
    PermanentError,
    RateLimitedError,
    ResponseTimeoutError,
    RetryableError,
    RetryPolicy,
    UpstreamServerError,
)
from gateway_client.classify import classify_exception, classify_status
from resilience.retry_after import parse_delay_seconds

API_KEY = "sk_test_9fQx2LmZpR7vT4"
BASE_URL = "https://acquirer.test/v1"
IDEMPOTENCY_KEY = "acq_7d0b8a3c-1f2e-4c5d-9a8b-112233445566"
REFERENCE = "pay_01HZX3"
TOKEN = "tok_visa_4242"

Handler = Callable[[httpx.Request], httpx.Response]

ONE_ATTEMPT = RetryPolicy(max_attempts=1)


def charge(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "ch_123",
        "status": "approved",
        "decline_code": None,
        "amount": 1999,
        "currency": "EUR",
        "reference": REFERENCE,
        "created_at": "2026-11-29T17:00:00Z",
    }
    body.update(overrides)
    return body


def authorization_request(**overrides: Any) -> AuthorizationRequest:
    fields: dict[str, Any] = {
        "amount": 1999,
        "currency": "EUR",
        "payment_method": TOKEN,
        "payment_reference": REFERENCE,
        "idempotency_key": IDEMPOTENCY_KEY,
    }
    fields.update(overrides)
    return AuthorizationRequest(**fields)


def config(**overrides: Any) -> AcquirerConfig:
    fields: dict[str, Any] = {"base_url": BASE_URL, "api_key": API_KEY}
    fields.update(overrides)
    return AcquirerConfig(**fields)


class RecordingTransport(httpx.MockTransport):
    """A MockTransport that keeps the requests it saw and whether it was closed."""

    def __init__(self, handler: Handler) -> None:
        self.requests: list[httpx.Request] = []
        self.closed = False

        def record(request: httpx.Request) -> httpx.Response:
            request.read()
            self.requests.append(request)
            return handler(request)

        super().__init__(record)

    def close(self) -> None:
        self.closed = True


def client_for(
    handler: Handler, *, clock: ManualClock | None = None, **config_overrides: Any
) -> tuple[AcquirerClient, RecordingTransport]:
    transport = RecordingTransport(handler)
    cfg = config(**config_overrides)
    policy = ONE_ATTEMPT.replace(connect_timeout=cfg.connect_timeout, read_timeout=cfg.read_timeout)
    client = AcquirerClient(cfg, transport=transport, policy=policy, clock=clock)
    return client, transport


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, bytes):
            return httpx.Response(status, content=body, headers=headers)
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return handler


def failing(exc: Exception) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


def authorize_error(handler: Handler) -> GatewayError:
    client, _ = client_for(handler)
    with pytest.raises(GatewayError) as info:
        client.authorize(authorization_request())
    return info.value


class BrokenStream(httpx.SyncByteStream):
    """A response body that breaks off after its first chunk."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __iter__(self) -> Iterator[bytes]:
        yield b'{"id": "ch_'
        raise self.exc


# -- the docs/reference/retries.md table, row by row -----------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("[Errno -2] Name or service not known"),
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.ConnectTimeout("timed out"),
        httpx.PoolTimeout("timed out"),
    ],
    ids=["dns-failure", "connection-refused", "connect-timeout", "pool-timeout"],
)
def test_row_not_connected_is_retryable_connection_failed(exc: Exception) -> None:
    """Row 1: DNS failure, refused connection, connect or pool timeout: nothing sent, retryable."""
    error = authorize_error(failing(exc))
    assert type(error) is ConnectionFailedError
    assert isinstance(error, RetryableError)
    assert error.status_code is None


@pytest.mark.parametrize(
    ("status", "error_class"),
    [(429, RateLimitedError), (503, AcquirerUnavailableError)],
)
def test_row_429_and_503_with_retry_after_are_retryable(
    status: int, error_class: type[GatewayError]
) -> None:
    """Row 2: 429 and 503 with Retry-After: not applied, retryable, the header kept."""
    error = authorize_error(answer(status, {"code": "slow_down"}, {"Retry-After": "7"}))
    assert type(error) is error_class
    assert isinstance(error, RetryableError)
    assert error.status_code == status
    assert error.retry_after_header == "7"
    assert error.retry_after == 7.0


@pytest.mark.parametrize("status", [502, 504])
def test_row_502_and_504_are_ambiguous(status: int) -> None:
    """Row 3: 502 and 504: a gateway may have forwarded the request, the outcome is unknown."""
    error = authorize_error(answer(status))
    assert type(error) is UpstreamServerError
    assert isinstance(error, AmbiguousOutcomeError)
    assert error.status_code == status


@pytest.mark.parametrize(
    ("handler", "error_class"),
    [
        (answer(500), UpstreamServerError),
        (failing(httpx.ReadTimeout("timed out")), ResponseTimeoutError),
        (failing(httpx.ReadError("[Errno 104] Connection reset by peer")), ConnectionLostError),
        (answer(201, b"<html>garbled</html>"), MalformedResponseError),
    ],
    ids=["500", "read-timeout", "reset-after-send", "garbled-body"],
)
def test_row_500_timeout_reset_garbled_are_ambiguous(
    handler: Handler, error_class: type[GatewayError]
) -> None:
    """Row 4: 500, read timeout, reset after sending, garbled body: outcome unknown."""
    error = authorize_error(handler)
    assert type(error) is error_class
    assert isinstance(error, AmbiguousOutcomeError)


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, InvalidRequestError),
        (401, AuthenticationError),
        (403, AuthenticationError),
        (404, InvalidRequestError),
        (422, InvalidRequestError),
    ],
)
def test_row_refused_requests_are_permanent(status: int, error_class: type[GatewayError]) -> None:
    """Row 5: 400, 401, 403 (no rate-limit sign), 404, 422: processed and refused, never retried."""
    error = authorize_error(answer(status, {"code": "refused"}))
    assert type(error) is error_class
    assert isinstance(error, PermanentError)
    assert error.status_code == status


@pytest.mark.parametrize("status", [200, 201])
def test_row_2xx_approved_is_a_result(status: int) -> None:
    """Row 6: a 2xx approval is returned as an Authorization, not raised."""
    client, _ = client_for(answer(status, charge()))
    authorization = client.authorize(authorization_request())
    assert authorization.approved is True


def test_row_2xx_declined_is_a_result_not_an_error() -> None:
    """Row 6: a 2xx decline is returned as a value with its decline code."""
    client, _ = client_for(
        answer(201, charge(status="declined", decline_code="insufficient_funds"))
    )
    authorization = client.authorize(authorization_request())
    assert authorization.approved is False
    assert authorization.decline_code == "insufficient_funds"


# -- every other status ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, InvalidRequestError),
        (401, AuthenticationError),
        (403, AuthenticationError),
        (404, InvalidRequestError),
        (405, InvalidRequestError),
        (408, InvalidRequestError),
        (409, IdempotencyConflictError),
        (410, InvalidRequestError),
        (418, InvalidRequestError),
        (422, InvalidRequestError),
        (429, RateLimitedError),
        (500, UpstreamServerError),
        (501, UpstreamServerError),
        (502, UpstreamServerError),
        (503, AcquirerUnavailableError),
        (504, UpstreamServerError),
        (507, UpstreamServerError),
        (599, UpstreamServerError),
        (301, MalformedResponseError),
        (302, MalformedResponseError),
        (304, MalformedResponseError),
        (307, MalformedResponseError),
        (600, MalformedResponseError),
    ],
)
def test_status_maps_to_error_class(status: int, error_class: type[GatewayError]) -> None:
    """Each non-2xx status raises exactly its documented error class."""
    error = authorize_error(answer(status))
    assert type(error) is error_class
    assert error.status_code == status


def test_409_is_an_ambiguous_idempotency_conflict() -> None:
    """409 means the same key is in flight elsewhere: the payment may still be authorised."""
    error = authorize_error(answer(409, {"code": "idempotency_key_in_use"}))
    assert isinstance(error, AmbiguousOutcomeError)
    assert error.code == "idempotency_key_in_use"


def test_redirect_is_not_followed() -> None:
    """A 3xx is not followed: exactly one request is sent."""
    client, transport = client_for(answer(307, None, {"Location": "https://elsewhere.test/"}))
    with pytest.raises(MalformedResponseError):
        client.authorize(authorization_request())
    assert len(transport.requests) == 1


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Retry-After": "30"}, None),
        ({"X-RateLimit-Remaining": "0"}, None),
        ({"RateLimit": '"default";r=0;t=30'}, None),
        ({}, {"code": "rate_limit_exceeded"}),
        ({}, {"error": {"code": "secondary_rate_limit"}}),
    ],
    ids=["retry-after", "x-ratelimit-remaining-0", "ratelimit-r-0", "code", "nested-code"],
)
def test_403_confirmed_as_rate_limit_is_rate_limited(
    headers: dict[str, str], body: dict[str, Any] | None
) -> None:
    """A 403 whose headers or error code confirm a rate limit is a RateLimitedError."""
    error = authorize_error(answer(403, body, headers))
    assert type(error) is RateLimitedError
    assert error.status_code == 403


@pytest.mark.parametrize(
    "headers",
    [{"X-RateLimit-Remaining": "12"}, {"RateLimit": '"default";r=5;t=30'}, {}],
    ids=["remaining-12", "ratelimit-r-5", "none"],
)
def test_403_without_rate_limit_sign_is_authentication_error(headers: dict[str, str]) -> None:
    """A 403 with quota left, or no rate-limit sign at all, is permanent."""
    error = authorize_error(answer(403, {"code": "forbidden"}, headers))
    assert type(error) is AuthenticationError


# -- transport exceptions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "error_class"),
    [
        (httpx.ConnectError("refused"), ConnectionFailedError),
        (httpx.ConnectTimeout("timed out"), ConnectionFailedError),
        (httpx.PoolTimeout("timed out"), ConnectionFailedError),
        (httpx.ProxyError("proxy refused"), ConnectionFailedError),
        (httpx.ReadTimeout("timed out"), ResponseTimeoutError),
        (httpx.WriteTimeout("timed out"), ResponseTimeoutError),
        (httpx.RemoteProtocolError("Server disconnected"), ConnectionLostError),
        (httpx.ReadError("reset"), ConnectionLostError),
        (httpx.WriteError("broken pipe"), ConnectionLostError),
        (httpx.CloseError("close failed"), ConnectionLostError),
        (httpx.LocalProtocolError("illegal header"), InvalidRequestError),
        (httpx.UnsupportedProtocol("no such scheme"), InvalidRequestError),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else value.__name__,
)
def test_transport_exception_maps_to_error_class(
    exc: Exception, error_class: type[GatewayError]
) -> None:
    """Each httpx failure raises exactly its documented error class."""
    error = authorize_error(failing(exc))
    assert type(error) is error_class
    assert error.status_code is None


def test_transport_exception_is_kept_as_cause() -> None:
    """The low-level httpx error is chained with `raise ... from`."""
    cause = httpx.ReadTimeout("timed out")
    error = authorize_error(failing(cause))
    assert error.__cause__ is cause


def test_non_transport_exception_propagates_unchanged() -> None:
    """A bug (not an httpx failure) is not disguised as a gateway error."""
    client, _ = client_for(failing(ZeroDivisionError("bug")))
    with pytest.raises(ZeroDivisionError):
        client.authorize(authorization_request())


def test_2xx_body_breaking_off_is_connection_lost() -> None:
    """A 201 whose body breaks off is ambiguous: the decision was never read."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, stream=BrokenStream(httpx.ReadError("reset")))

    error = authorize_error(handler)
    assert type(error) is ConnectionLostError
    assert error.status_code == 201


def test_2xx_body_timing_out_is_response_timeout() -> None:
    """A 201 whose body stops arriving is a response timeout."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, stream=BrokenStream(httpx.ReadTimeout("timed out")))

    error = authorize_error(handler)
    assert type(error) is ResponseTimeoutError


def test_error_status_body_breaking_off_is_classified_by_status() -> None:
    """A 503 whose body breaks off is still AcquirerUnavailableError: the status decides."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            503, headers={"Retry-After": "3"}, stream=BrokenStream(httpx.ReadError("reset"))
        )

    error = authorize_error(handler)
    assert type(error) is AcquirerUnavailableError
    assert error.retry_after == 3.0


def test_undecodable_content_encoding_is_malformed() -> None:
    """A 2xx whose gzip body cannot be decoded is a malformed response."""
    error = authorize_error(answer(201, b"not gzip at all", {"Content-Encoding": "gzip"}))
    assert type(error) is MalformedResponseError


def test_oversized_2xx_body_is_malformed() -> None:
    """A 2xx body beyond the size limit is not read to the end and is malformed."""
    huge = b'{"pad": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    error = authorize_error(answer(201, huge))
    assert type(error) is MalformedResponseError


# -- malformed 2xx bodies --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'"approved"',
        b"null",
        b"\xff\xfe\x00garbage",
        b'{"id": "ch_1", "status": "approved", "decline_code": null, "amount": NaN,'
        b' "currency": "EUR", "reference": "pay_01HZX3", "created_at": "2026-11-29T17:00:00Z"}',
    ],
    ids=["empty", "text", "list", "string", "null", "binary", "nan"],
)
def test_2xx_body_that_is_not_a_json_object_is_malformed(body: bytes) -> None:
    """A 2xx whose body is not a JSON charge object is a MalformedResponseError."""
    error = authorize_error(answer(201, body))
    assert type(error) is MalformedResponseError
    assert error.status_code == 201


@pytest.mark.parametrize(
    "field", ["id", "status", "decline_code", "amount", "currency", "reference", "created_at"]
)
def test_2xx_body_missing_a_field_is_malformed(field: str) -> None:
    """A 2xx charge without one of its documented fields is malformed."""
    body = charge()
    del body[field]
    error = authorize_error(answer(201, body))
    assert type(error) is MalformedResponseError
    assert repr(field) in str(error)


@pytest.mark.parametrize(
    "overrides",
    [
        {"id": 123},
        {"id": ""},
        {"id": None},
        {"status": "pending"},
        {"status": "APPROVED"},
        {"status": True},
        {"decline_code": 51},
        {"status": "approved", "decline_code": "do_not_honor"},
        {"amount": "1999"},
        {"amount": 1999.0},
        {"amount": True},
        {"amount": None},
        {"currency": "eur"},
        {"currency": 978},
        {"reference": None},
        {"created_at": "yesterday"},
        {"created_at": "2026-11-29T17:00:00"},
        {"created_at": 1795971600},
    ],
    ids=lambda overrides: ",".join(f"{k}={v!r}" for k, v in overrides.items()),
)
def test_2xx_body_with_wrong_type_or_value_is_malformed(overrides: dict[str, Any]) -> None:
    """A 2xx charge whose field has the wrong type or an undocumented value is malformed."""
    error = authorize_error(answer(201, charge(**overrides)))
    assert type(error) is MalformedResponseError


@pytest.mark.parametrize(
    "overrides",
    [{"amount": 2000}, {"currency": "USD"}, {"reference": "pay_other"}],
    ids=["amount", "currency", "reference"],
)
def test_2xx_charge_not_matching_the_request_is_malformed(overrides: dict[str, Any]) -> None:
    """A charge for another amount, currency or reference is not an answer to our request."""
    error = authorize_error(answer(201, charge(**overrides)))
    assert type(error) is MalformedResponseError


def test_malformed_error_does_not_quote_the_body() -> None:
    """The MalformedResponseError message names the problem, never the body's content."""
    error = authorize_error(answer(201, charge(status="TOP-SECRET-VALUE")))
    assert "TOP-SECRET-VALUE" not in str(error)


# -- results ---------------------------------------------------------------------------------------


def test_approved_answer_fields() -> None:
    """An approval is decoded into every Authorization field."""
    client, _ = client_for(answer(201, charge()))
    assert client.authorize(authorization_request()) == Authorization(
        acquirer_reference="ch_123",
        approved=True,
        decline_code=None,
        amount=1999,
        currency="EUR",
        payment_reference=REFERENCE,
        created_at=datetime(2026, 11, 29, 17, 0, tzinfo=UTC),
        replayed=False,
    )


def test_created_at_with_offset_is_converted_to_utc() -> None:
    """created_at with another offset comes back as the same instant in UTC."""
    client, _ = client_for(answer(201, charge(created_at="2026-11-29T18:00:00+01:00")))
    created_at = client.authorize(authorization_request()).created_at
    assert created_at == datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
    assert created_at.tzinfo is UTC


def test_declined_without_code_is_a_result() -> None:
    """A decline without a decline code is still a value."""
    client, _ = client_for(answer(201, charge(status="declined", decline_code=None)))
    authorization = client.authorize(authorization_request())
    assert authorization.approved is False
    assert authorization.decline_code is None


@pytest.mark.parametrize("value", ["true", "True", " TRUE "])
def test_idempotent_replayed_header_sets_replayed(value: str) -> None:
    """`Idempotent-Replayed: true` marks the answer as replayed."""
    client, _ = client_for(answer(201, charge(), {"Idempotent-Replayed": value}))
    assert client.authorize(authorization_request()).replayed is True


@pytest.mark.parametrize("headers", [{}, {"Idempotent-Replayed": "false"}])
def test_answer_without_replayed_true_is_not_replayed(headers: dict[str, str]) -> None:
    """Without `Idempotent-Replayed: true` the answer is a fresh one."""
    client, _ = client_for(answer(201, charge(), headers))
    assert client.authorize(authorization_request()).replayed is False


# -- what is sent ----------------------------------------------------------------------------------


def test_authorize_posts_to_charges_with_json_body() -> None:
    """authorize sends POST {base_url}/charges with the documented JSON body, amount an int."""
    client, transport = client_for(answer(201, charge()))
    client.authorize(authorization_request())
    (sent,) = transport.requests
    assert sent.method == "POST"
    assert str(sent.url) == "https://acquirer.test/v1/charges"
    assert sent.headers["Content-Type"] == "application/json"
    assert json.loads(sent.content) == {
        "amount": 1999,
        "currency": "EUR",
        "payment_method": TOKEN,
        "reference": REFERENCE,
    }
    assert b"1999.0" not in sent.content


def test_trailing_slash_in_base_url_is_not_doubled() -> None:
    """A base_url ending in / still yields a single slash before charges."""
    client, transport = client_for(answer(201, charge()), base_url="https://acquirer.test/")
    client.authorize(authorization_request())
    assert str(transport.requests[0].url) == "https://acquirer.test/charges"


def test_bearer_api_key_is_sent() -> None:
    """The API key goes in `Authorization: Bearer <key>`."""
    client, transport = client_for(answer(201, charge()))
    client.authorize(authorization_request())
    assert transport.requests[0].headers["Authorization"] == f"Bearer {API_KEY}"


def test_idempotency_key_is_sent_unchanged() -> None:
    """The caller's idempotency key is sent as `Idempotency-Key`, unchanged."""
    client, transport = client_for(answer(201, charge()))
    client.authorize(authorization_request())
    assert transport.requests[0].headers["Idempotency-Key"] == IDEMPOTENCY_KEY


def test_same_idempotency_key_is_sent_on_every_call() -> None:
    """Repeating a request sends the same key again: the client never generates keys."""
    statuses = iter([503, 201])

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(statuses)
        return httpx.Response(status, json=charge() if status == 201 else None)

    client, transport = client_for(handler)
    with pytest.raises(AcquirerUnavailableError):
        client.authorize(authorization_request())
    client.authorize(authorization_request())
    keys = [request.headers["Idempotency-Key"] for request in transport.requests]
    assert keys == [IDEMPOTENCY_KEY, IDEMPOTENCY_KEY]


def test_timeouts_are_handed_to_httpx() -> None:
    """connect/pool use connect_timeout, read/write use read_timeout."""
    client, transport = client_for(answer(201, charge()), connect_timeout=0.5, read_timeout=2.5)
    client.authorize(authorization_request())
    assert transport.requests[0].extensions["timeout"] == {
        "connect": 0.5,
        "read": 2.5,
        "write": 2.5,
        "pool": 0.5,
    }


def test_default_timeouts_are_one_and_three_seconds() -> None:
    """The default config gives a 1 s connect and a 3 s read timeout."""
    client, transport = client_for(answer(201, charge()))
    client.authorize(authorization_request())
    assert transport.requests[0].extensions["timeout"] == {
        "connect": 1.0,
        "read": 3.0,
        "write": 3.0,
        "pool": 1.0,
    }


# -- look-up ---------------------------------------------------------------------------------------


def test_lookup_gets_charges_by_reference() -> None:
    """lookup sends GET {base_url}/charges?reference=R with the Bearer key."""
    client, transport = client_for(answer(200, {"data": []}))
    client.lookup("pay_a&b=c")
    (sent,) = transport.requests
    assert sent.method == "GET"
    assert sent.url.path == "/v1/charges"
    assert sent.url.params["reference"] == "pay_a&b=c"
    assert sent.headers["Authorization"] == f"Bearer {API_KEY}"
    assert "Idempotency-Key" not in sent.headers


def test_lookup_returns_every_listed_charge() -> None:
    """lookup decodes each listed charge into an Authorization."""
    declined = charge(id="ch_1", status="declined", decline_code="do_not_honor")
    approved = charge(id="ch_2")
    client, _ = client_for(answer(200, {"data": [declined, approved]}))
    found = client.lookup(REFERENCE)
    assert [(a.acquirer_reference, a.approved) for a in found] == [("ch_1", False), ("ch_2", True)]


def test_lookup_of_unknown_reference_is_empty() -> None:
    """An empty data list means the acquirer has no charge for the reference."""
    client, _ = client_for(answer(200, {"data": []}))
    assert client.lookup(REFERENCE) == []


@pytest.mark.parametrize(
    "body",
    [
        {"data": {}},
        {"items": []},
        [],
        {"data": [charge(amount="1")]},
        {"data": [charge(reference="pay_other")]},
    ],
    ids=["data-not-list", "no-data", "list", "bad-item", "other-reference"],
)
def test_lookup_malformed_body_is_malformed(body: Any) -> None:
    """A look-up answer that is not `{"data": [charge, ...]}` for our reference is malformed."""
    client, _ = client_for(answer(200, body))
    with pytest.raises(MalformedResponseError):
        client.lookup(REFERENCE)


def test_lookup_errors_use_the_same_classes() -> None:
    """A failed look-up raises the same classes, with operation "lookup" and no key."""
    client, _ = client_for(answer(502))
    with pytest.raises(UpstreamServerError) as info:
        client.lookup(REFERENCE)
    assert info.value.operation == "lookup"
    assert info.value.idempotency_key is None


def test_lookup_rejects_empty_reference() -> None:
    """lookup refuses an empty reference before sending anything."""
    client, transport = client_for(answer(200, {"data": []}))
    with pytest.raises(ValueError, match=r"^payment_reference must be a non-empty string$"):
        client.lookup("")
    assert transport.requests == []


# -- error attributes and messages -----------------------------------------------------------------


def test_error_carries_call_attributes() -> None:
    """An error carries operation, attempts, idempotency key, status and acquirer name."""
    error = authorize_error(answer(500))
    assert error.operation == "authorize"
    assert error.attempts == 1
    assert error.idempotency_key == IDEMPOTENCY_KEY
    assert error.status_code == 500
    assert error.acquirer == "acquirer"


def test_error_message_says_what_happened() -> None:
    """The message names the operation, the acquirer, the status, the code and the class."""
    error = authorize_error(answer(422, {"code": "invalid_amount", "message": "long text"}))
    message = str(error)
    for part in ("authorize", "'acquirer'", "422", "invalid_amount", "InvalidRequestError"):
        assert part in message
    assert "long text" not in message


def test_error_code_is_sanitised() -> None:
    """An error code that is not a short token is dropped, never quoted."""
    error = authorize_error(answer(400, {"code": "<script>alert(1)</script>"}))
    assert error.code is None
    assert "script" not in str(error)


def test_retry_after_http_date_is_read_against_the_clock() -> None:
    """A Retry-After HTTP-date is kept raw and read as the seconds from the client's clock."""
    client, _ = client_for(
        answer(429, None, {"Retry-After": "Mon, 03 Jun 2019 11:30:12 GMT"}), clock=ManualClock()
    )
    with pytest.raises(RateLimitedError) as info:
        client.authorize(authorization_request())
    assert info.value.retry_after_header == "Mon, 03 Jun 2019 11:30:12 GMT"
    assert info.value.retry_after == 1812.0
    assert info.value.not_before == datetime(2019, 6, 3, 11, 30, 12, tzinfo=UTC)


def test_429_without_retry_after_has_none() -> None:
    """A 429 without Retry-After has neither header nor delay."""
    error = authorize_error(answer(429))
    assert isinstance(error, RateLimitedError)
    assert error.retry_after_header is None
    assert error.retry_after is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), ("  5 ", 5.0), ("0", 0.0), ("007", 7.0), ("9" * 40, math.inf)],
)
def test_retry_after_delay_seconds_are_read(value: str, expected: float) -> None:
    """Retry-After delay-seconds (ASCII digits, surrounding whitespace ignored) are read."""
    assert parse_delay_seconds(value) == expected


@pytest.mark.parametrize(
    "value",
    ["-1", "+1", "1.0", "1.5", "1e3", "0x10", "1m0s", "", " ", "١٢", "²", "5\n", None],
)
def test_retry_after_invalid_values_read_as_none(value: str | None) -> None:
    """Anything but ASCII digits reads as None (ignore the header, use the backoff)."""
    assert parse_delay_seconds(value) is None


def test_errors_survive_pickling() -> None:
    """Errors keep their class and attributes through pickle (task queues carry them)."""
    error = authorize_error(answer(429, None, {"Retry-After": "3"}))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is RateLimitedError
    assert str(copy) == str(error)
    assert (copy.operation, copy.status_code, copy.retry_after) == ("authorize", 429, 3.0)
    assert copy.idempotency_key == IDEMPOTENCY_KEY


def test_error_tree_shape() -> None:
    """Each error class sits on its documented branch of the tree."""
    assert {c.__name__ for c in RetryableError.__subclasses__()} == {
        "ConnectionFailedError",
        "RateLimitedError",
        "AcquirerUnavailableError",
        "CircuitOpenError",
        "RetryBudgetExhaustedError",
    }
    assert {c.__name__ for c in AmbiguousOutcomeError.__subclasses__()} == {
        "ResponseTimeoutError",
        "UpstreamServerError",
        "ConnectionLostError",
        "MalformedResponseError",
        "IdempotencyConflictError",
    }
    assert {c.__name__ for c in PermanentError.__subclasses__()} == {
        "InvalidRequestError",
        "AuthenticationError",
    }
    assert {c.__name__ for c in GatewayError.__subclasses__()} == {
        "RetryableError",
        "AmbiguousOutcomeError",
        "PermanentError",
    }


def test_package_exports_the_public_api() -> None:
    """The package's __all__ names the client, the dataclasses, every error and the retry API."""
    assert set(gateway_client.__all__) >= {
        "AcquirerClient",
        "AcquirerConfig",
        "Authorization",
        "AuthorizationRequest",
        "GatewayError",
        "RetryableError",
        "ConnectionFailedError",
        "RateLimitedError",
        "AcquirerUnavailableError",
        "AmbiguousOutcomeError",
        "ResponseTimeoutError",
        "UpstreamServerError",
        "ConnectionLostError",
        "MalformedResponseError",
        "IdempotencyConflictError",
        "PermanentError",
        "InvalidRequestError",
        "AuthenticationError",
        "RetryBudgetExhaustedError",
        "RetryPolicy",
        "MemoryStore",
        "RedisStore",
        "ManualClock",
    }
    for name in gateway_client.__all__:
        assert getattr(gateway_client, name)


# -- classification functions directly -------------------------------------------------------------


def test_classify_status_2xx_is_not_an_error() -> None:
    """classify_status returns None for every 2xx."""
    assert all(classify_status(status) is None for status in range(200, 300))


def test_classify_exception_ignores_non_httpx_errors() -> None:
    """classify_exception returns None for an exception that is not an httpx failure."""
    assert classify_exception(KeyError("x")) is None


# -- secrets ---------------------------------------------------------------------------------------


def test_api_key_not_in_config_repr() -> None:
    """repr(config) and str(config) never show the API key."""
    assert API_KEY not in repr(config())
    assert API_KEY not in str(config())


def test_api_key_not_in_client_repr() -> None:
    """repr(client) never shows the API key."""
    client, _ = client_for(answer(201, charge()))
    assert API_KEY not in repr(client)


def test_card_token_not_in_request_repr() -> None:
    """repr(AuthorizationRequest) never shows the card token."""
    assert TOKEN not in repr(authorization_request())


@pytest.mark.parametrize(
    "handler",
    [
        answer(401, {"code": API_KEY, "message": f"bad key {API_KEY}"}),
        answer(403, {"error": f"Bearer {API_KEY}"}),
        answer(500, f"Authorization: Bearer {API_KEY}".encode()),
        answer(201, {"id": API_KEY}),
        failing(httpx.ReadTimeout(f"timed out Bearer {API_KEY}")),
        failing(httpx.LocalProtocolError(f"Illegal header value b'Bearer {API_KEY}'")),
    ],
    ids=["401-echo", "403-echo", "500-echo", "malformed", "timeout", "local-protocol"],
)
def test_api_key_not_in_error_message(handler: Handler) -> None:
    """str(error) never contains the API key, even when the acquirer echoes it."""
    error = authorize_error(handler)
    assert API_KEY not in str(error)
    assert API_KEY not in repr(error)


def test_api_key_and_token_not_in_log_records(caplog: pytest.LogCaptureFixture) -> None:
    """No log record (ours or httpx's) contains the API key, the header or the card token."""
    caplog.set_level(logging.DEBUG)
    client, _ = client_for(answer(401, {"code": API_KEY}))
    with pytest.raises(AuthenticationError):
        client.authorize(authorization_request())
    client2, _ = client_for(answer(201, charge()))
    client2.authorize(authorization_request())
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + repr(vars(record))
        assert API_KEY not in text
        assert "Bearer" not in text
        assert TOKEN not in text


def test_api_key_not_in_config_validation_errors() -> None:
    """A rejected API key is not quoted in the ValueError."""
    bad_key = "sk_live_secret with space"
    with pytest.raises(ValueError, match=r"^api_key must be a non-empty string") as info:
        config(api_key=bad_key)
    assert bad_key not in str(info.value)
    assert "secret" not in str(info.value)


# -- logging ---------------------------------------------------------------------------------------


def gateway_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "gateway_client"]


def test_one_log_line_per_successful_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """A call logs exactly one INFO line with operation, reference, status, outcome, elapsed."""
    caplog.set_level(logging.INFO, logger="gateway_client")
    client, _ = client_for(answer(201, charge(status="declined", decline_code="expired_card")))
    client.authorize(authorization_request())
    (record,) = gateway_records(caplog)
    assert record.levelno == logging.INFO
    assert record.gateway_operation == "authorize"
    assert record.gateway_reference == REFERENCE
    assert record.gateway_status == 201
    assert record.gateway_outcome == "declined"
    assert record.gateway_elapsed >= 0
    for part in ("operation=authorize", f"reference={REFERENCE}", "status=201", "outcome=declined"):
        assert part in record.getMessage()


def test_one_warning_line_per_failed_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """A failed call logs one WARNING line naming the error class."""
    caplog.set_level(logging.INFO, logger="gateway_client")
    authorize_error(failing(httpx.ConnectError("refused")))
    (record,) = gateway_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.gateway_outcome == "ConnectionFailedError"
    assert record.gateway_status is None


def test_lookup_logs_its_reference(caplog: pytest.LogCaptureFixture) -> None:
    """A look-up logs one line with operation lookup and the reference looked up."""
    caplog.set_level(logging.INFO, logger="gateway_client")
    client, _ = client_for(answer(200, {"data": []}))
    client.lookup(REFERENCE)
    (record,) = gateway_records(caplog)
    assert (record.gateway_operation, record.gateway_reference) == ("lookup", REFERENCE)
    assert record.gateway_outcome == "ok"


# -- lifecycle and concurrency ---------------------------------------------------------------------


def test_context_manager_closes_transport() -> None:
    """Leaving the `with` block closes the client and its transport."""
    transport = RecordingTransport(answer(201, charge()))
    with AcquirerClient(config(), transport=transport) as client:
        client.authorize(authorization_request())
    assert transport.closed is True


def test_a_closed_client_sends_nothing() -> None:
    """After `close()` a call raises RuntimeError (a transport alone would reconnect)."""
    transport = RecordingTransport(answer(201, charge()))
    client = AcquirerClient(config(), transport=transport)
    client.authorize(authorization_request())
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.authorize(authorization_request())
    assert len(transport.requests) == 1


def test_concurrent_calls_share_one_client() -> None:
    """Calls from several threads on one client all complete."""
    client, transport = client_for(answer(201, charge()))
    results: list[Authorization] = []
    lock = threading.Lock()

    def call() -> None:
        authorization = client.authorize(authorization_request())
        with lock:
            results.append(authorization)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert len(results) == 16
    assert len(transport.requests) == 16


def test_client_requires_a_config() -> None:
    """AcquirerClient refuses anything but an AcquirerConfig."""
    with pytest.raises(TypeError):
        AcquirerClient({"base_url": BASE_URL, "api_key": API_KEY})  # type: ignore[arg-type]


# -- config validation -----------------------------------------------------------------------------


def test_config_defaults() -> None:
    """The config defaults: 1 s connect, 3 s read, keys honoured, name "acquirer"."""
    value = config()
    assert (value.connect_timeout, value.read_timeout) == (1.0, 3.0)
    assert value.honours_idempotency_keys is True
    assert value.name == "acquirer"


def test_config_is_frozen() -> None:
    """AcquirerConfig cannot be changed after creation."""
    with pytest.raises(AttributeError):
        config().api_key = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("base_url", "problem"),
    [
        ("ftp://acquirer.test", "must be an absolute http:// or https:// URL with a host"),
        ("acquirer.test", "must be an absolute http:// or https:// URL with a host"),
        ("/charges", "must be an absolute http:// or https:// URL with a host"),
        ("http://", "must be an absolute http:// or https:// URL with a host"),
        ("https://user:pass@acquirer.test", "must not carry credentials; pass api_key instead"),
        ("https://acquirer.test/?x=1", "must not have a query or a fragment"),
        ("https://acquirer.test/#frag", "must not have a query or a fragment"),
        ("https://acquirer.test:99999", "is not a valid URL"),
        ("https://acquirer .test", "must be printable ASCII without spaces"),
        ("", "must be printable ASCII without spaces"),
    ],
)
def test_config_rejects_bad_base_url(base_url: str, problem: str) -> None:
    """base_url must be an absolute http(s) URL with a host and no credentials or query."""
    with pytest.raises(ValueError, match=f"^base_url {re.escape(problem)}$"):
        config(base_url=base_url)


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:8001", "https://acquirer.test/v1/"])
def test_config_accepts_http_and_https_urls(base_url: str) -> None:
    """http and https URLs, with a port or a path, are accepted."""
    assert config(base_url=base_url).base_url == base_url


@pytest.mark.parametrize("field", ["connect_timeout", "read_timeout"])
@pytest.mark.parametrize("value", [0, -1, 0.0, math.inf, math.nan, True, "1"])
def test_config_rejects_bad_timeouts(field: str, value: Any) -> None:
    """Timeouts must be positive, finite numbers of seconds."""
    with pytest.raises(ValueError, match=f"^{field} must be (> 0|a finite number of) seconds$"):
        config(**{field: value})


@pytest.mark.parametrize("api_key", ["", "has space", "line\nbreak", "k\u00e9y", None])
def test_config_rejects_bad_api_key(api_key: Any) -> None:
    """The API key must be non-empty printable ASCII (it goes into a header)."""
    with pytest.raises(ValueError, match=r"^api_key must be a non-empty string of printable ASCII"):
        config(api_key=api_key)


@pytest.mark.parametrize("name", ["", "   ", None])
def test_config_rejects_empty_name(name: Any) -> None:
    """The acquirer name must be a non-empty string."""
    with pytest.raises(ValueError, match=r"^name must be a non-empty string of printable ASCII"):
        config(name=name)


# -- request validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("amount", [19.99, 1999.0, True, 0, -5, "1999", None])
def test_request_rejects_non_positive_or_non_integer_amount(amount: Any) -> None:
    """The amount must be a positive int in minor units: never a float or a bool."""
    with pytest.raises(ValueError, match=r"^amount must be a positive integer in minor units$"):
        authorization_request(amount=amount)


@pytest.mark.parametrize("currency", ["eur", "EURO", "EU", "", "E1R", None])
def test_request_rejects_bad_currency(currency: Any) -> None:
    """The currency must be an upper-case ISO 4217 alpha-3 code."""
    with pytest.raises(
        ValueError, match=r"^currency must be an ISO 4217 alpha-3 code in upper case$"
    ):
        authorization_request(currency=currency)


@pytest.mark.parametrize(
    "key", ["", "a" * 256, "ab c", "key\n", "cl\u00e9", None], ids=lambda k: repr(k)[:12]
)
def test_request_rejects_bad_idempotency_key(key: Any) -> None:
    """The idempotency key must be 1 to 255 printable ASCII characters without spaces."""
    with pytest.raises(
        ValueError, match=r"^idempotency_key must be 1 to 255 characters of printable ASCII"
    ):
        authorization_request(idempotency_key=key)


def test_request_accepts_255_character_key() -> None:
    """A 255-character idempotency key is accepted."""
    assert authorization_request(idempotency_key="a" * 255).idempotency_key == "a" * 255


@pytest.mark.parametrize("field", ["payment_method", "payment_reference"])
def test_request_rejects_empty_strings(field: str) -> None:
    """payment_method and payment_reference must be non-empty strings."""
    with pytest.raises(ValueError, match=f"^{field} must be a non-empty string$"):
        authorization_request(**{field: ""})


def test_error_constructors_parse_no_header() -> None:
    """The client reads Retry-After (_exchange.py); a refusal built by hand keeps the raw header
    and has only the seconds it was given."""
    error = RateLimitedError("429", operation="authorize", retry_after_header="7")
    assert (error.retry_after_header, error.retry_after) == ("7", None)
    error = AcquirerUnavailableError(
        "503", operation="authorize", retry_after_header="7", retry_after=7.0
    )
    assert (error.retry_after_header, error.retry_after) == ("7", 7.0)


# -- the caller's request id ---------------------------------------------------------------------


def test_a_call_sends_its_request_id_and_logs_it(caplog):
    """`request_id` goes out as X-Request-Id (writes and look-ups) and into the attempt log;
    without one, no such header."""
    client, transport = client_for(answer(201, charge()))
    lookups, lookup_transport = client_for(answer(200, {"data": [charge()]}))
    with caplog.at_level(logging.INFO, logger="gateway_client"):
        client.authorize(authorization_request(), request_id="req_abc")
        client.authorize(authorization_request())
        lookups.lookup(REFERENCE, request_id="req_def")
    assert [r.headers.get("x-request-id") for r in transport.requests] == ["req_abc", None]
    assert lookup_transport.requests[0].headers["x-request-id"] == "req_def"
    assert [r.gateway_request_id for r in caplog.records] == ["req_abc", None, "req_def"]


@pytest.mark.parametrize("bad", ["", "a b", "x" * 201, "new\nline", "é", 7])
def test_an_invalid_request_id_is_refused_before_sending(bad):
    client, transport = client_for(answer(201, charge()))
    with pytest.raises(ValueError, match="request_id"):
        client.authorize(authorization_request(), request_id=bad)
    assert transport.requests == []
