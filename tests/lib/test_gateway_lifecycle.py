"""
Unit tests of gateway_client's lifecycle operations: manual authorisation, capture, void,
refund and lookup_refunds. No sockets: httpx.MockTransport answers as the sandbox acquirer
does (docs/sandbox.md, "Capture, void and refunds", "The acquirer's rules", "Errors"), a
ManualClock is the clock and its `sleep` the sleep. Covered: what goes on the wire, the strict
parsing of the capture state and of refunds, the classification of every status and failure
the sandbox can give each operation, the retries with one idempotency key, the breaker group
of each operation and the labels of its metrics and log lines.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    AuthenticationError,
    Authorization,
    AuthorizationRequest,
    BreakerConfig,
    CaptureRequest,
    CircuitOpenError,
    ConnectionFailedError,
    ConnectionLostError,
    GatewayError,
    IdempotencyConflictError,
    InvalidRequestError,
    MalformedResponseError,
    ManualClock,
    PermanentError,
    RateLimitedError,
    Refund,
    RefundRequest,
    ResponseTimeoutError,
    RetryPolicy,
    UpstreamServerError,
    VoidRequest,
)
from resilience.metrics import CounterMetrics
from tests.lib.test_gateway_client import answer as reply
from tests.lib.test_gateway_client import failing as raising
from tests.lib.test_gateway_retry import Acquirer, Step

API_KEY = "sk_test_lifecycle_Zq81"
BASE_URL = "https://acquirer.test/v1"
CHARGE_ID = "ch_H4R6DMVU3zSJwR0BrS5kDOZn"
REFUND_ID = "re_Yc1Jm0d8F2pQ7rTn4WbX6sLk"
PAYMENT = "pay_0123456789abcdef01234567"
REFUND_REFERENCE = "re_0f1e2d3c4b5a69788796a5b4"
CREATED = "2026-11-29T17:00:00Z"
LATER = "2026-11-29T17:05:00Z"

#: The sandbox's rule refusals (docs/sandbox.md, "The acquirer's rules"), per operation.
CAPTURE_RULES = (
    "charge_already_captured",
    "charge_already_voided",
    "charge_declined",
    "amount_exceeds_capturable",
)
VOID_RULES = ("charge_already_captured", "charge_already_voided", "charge_declined")
REFUND_RULES = (
    "charge_already_voided",
    "charge_declined",
    "charge_not_captured",
    "amount_exceeds_refundable",
    "charge_already_refunded",
)


# -- the acquirer's bodies -------------------------------------------------------------------


def charge(**overrides: Any) -> dict[str, Any]:
    """A charge with its capture state: authorised, uncaptured (a manual authorisation)."""
    body: dict[str, Any] = {
        "id": CHARGE_ID,
        "status": "approved",
        "decline_code": None,
        "amount": 1999,
        "currency": "EUR",
        "reference": PAYMENT,
        "created_at": CREATED,
        "captured": False,
        "amount_captured": 0,
        "amount_refunded": 0,
        "voided": False,
        "captured_at": None,
        "voided_at": None,
    }
    body.update(overrides)
    return body


def captured(amount: int = 1999, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"captured": True, "amount_captured": amount, "captured_at": LATER}
    fields.update(overrides)
    return charge(**fields)


def voided() -> dict[str, Any]:
    return charge(voided=True, voided_at=LATER)


#: The sandbox's answer to an automatic authorisation: the seven fields of before.
AUTOMATIC_ANSWER = {
    key: value
    for key, value in charge().items()
    if key
    not in ("captured", "amount_captured", "amount_refunded", "voided", "captured_at", "voided_at")
}


def refund_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": REFUND_ID,
        "object": "refund",
        "charge": CHARGE_ID,
        "amount": 500,
        "currency": "EUR",
        "reference": REFUND_REFERENCE,
        "status": "succeeded",
        "failure_code": None,
        "created_at": LATER,
    }
    body.update(overrides)
    return body


def problem(status: int, code: str) -> dict[str, Any]:
    return {
        "type": f"https://sandbox-acquirer.invalid/problems/{code}",
        "title": "refused",
        "status": status,
        "detail": "refused.",
        "code": code,
    }


# -- requests and the client ---------------------------------------------------------------


def capture_request(amount: int | None = None) -> CaptureRequest:
    return CaptureRequest(CHARGE_ID, amount, f"capture-{PAYMENT}")


def void_request() -> VoidRequest:
    return VoidRequest(CHARGE_ID, f"void-{PAYMENT}")


def refund_request(amount: int | None = 500) -> RefundRequest:
    return RefundRequest(CHARGE_ID, REFUND_REFERENCE, amount, f"refund-{REFUND_REFERENCE}")


def manual_request(**overrides: Any) -> AuthorizationRequest:
    fields: dict[str, Any] = {
        "amount": 1999,
        "currency": "EUR",
        "payment_method": "tok_visa",
        "payment_reference": PAYMENT,
        "idempotency_key": f"authorize-{PAYMENT}",
        "capture": False,
    }
    fields.update(overrides)
    return AuthorizationRequest(**fields)


def keys(transport: Acquirer) -> list[str | None]:
    return [request.headers.get("Idempotency-Key") for request in transport.requests]


def build(
    *steps: Step,
    policy: RetryPolicy | None = None,
    breakers: dict[str, BreakerConfig | None] | None = None,
    **config: Any,
) -> tuple[AcquirerClient, Acquirer]:
    clock = ManualClock(1000.0, wall=datetime(2026, 11, 29, 17, tzinfo=UTC).timestamp())
    transport = Acquirer(clock, *steps)
    client = AcquirerClient(
        AcquirerConfig(base_url=BASE_URL, api_key=API_KEY, **config),
        transport=transport,
        policy=policy or RetryPolicy(max_attempts=1),
        clock=clock,
        sleep=clock.sleep,
        random=lambda: 0.5,
        breakers=breakers,
    )
    return client, transport


Operation = Callable[[AcquirerClient], Any]

#: Each lifecycle operation, with the answer the sandbox gives when it succeeds.
OPERATIONS: dict[str, tuple[Operation, int, Any]] = {
    "capture": (lambda client: client.capture(capture_request()), 200, captured()),
    "void": (lambda client: client.void(void_request()), 200, voided()),
    "refund": (lambda client: client.refund(refund_request()), 201, refund_body()),
    "lookup_refunds": (
        lambda client: client.lookup_refunds(REFUND_REFERENCE),
        200,
        {"data": [refund_body()]},
    ),
}
WRITES = ("capture", "void", "refund")


def error_of(name: str, *steps: Step, **kwargs: Any) -> GatewayError:
    client, _ = build(*steps, **kwargs)
    with pytest.raises(GatewayError) as info:
        OPERATIONS[name][0](client)
    return info.value


# -- what goes on the wire ---------------------------------------------------------------------


def test_an_automatic_authorization_is_byte_identical_to_before() -> None:
    """capture=True (the default) sends no `capture` field: the body of before, byte for byte."""
    client, transport = build(reply(201, AUTOMATIC_ANSWER))
    authorization = client.authorize(manual_request(capture=True))
    assert transport.requests[0].content == (
        b'{"amount":1999,"currency":"EUR","payment_method":"tok_visa",'
        b'"reference":"pay_0123456789abcdef01234567"}'
    )
    assert authorization.captured is None  # the seven-field answer has no capture state
    default = AuthorizationRequest(
        amount=1999,
        currency="EUR",
        payment_method="tok_visa",
        payment_reference=PAYMENT,
        idempotency_key="k",
    )
    assert default.capture is True


def test_a_manual_authorization_sends_capture_false_and_reads_the_capture_state() -> None:
    """capture=False adds `"capture": false`; the answer's capture state is parsed."""
    client, transport = build(reply(201, charge()))
    authorization = client.authorize(manual_request())
    assert json.loads(transport.requests[0].content)["capture"] is False
    assert transport.requests[0].content.endswith(b',"capture":false}')
    assert (
        authorization.captured,
        authorization.amount_captured,
        authorization.amount_refunded,
        authorization.voided,
        authorization.captured_at,
        authorization.voided_at,
    ) == (False, 0, 0, False, None, None)


def test_an_automatic_answer_with_its_capture_state_must_be_captured() -> None:
    """An automatic approval that carries a capture state is captured, else it is malformed."""
    client, _ = build(reply(201, captured(captured_at=CREATED)))
    assert client.authorize(manual_request(capture=True)).amount_captured == 1999
    client, _ = build(reply(201, charge()))
    with pytest.raises(MalformedResponseError):
        client.authorize(manual_request(capture=True))


def test_a_manual_authorization_answered_captured_is_malformed() -> None:
    """The acquirer captured what we asked it to hold: not the answer to our request."""
    client, _ = build(reply(201, captured()))
    with pytest.raises(MalformedResponseError):
        client.authorize(manual_request())


@pytest.mark.parametrize(("amount", "body"), [(None, b"{}"), (700, b'{"amount":700}')])
def test_capture_posts_to_the_charge_with_its_key(amount: int | None, body: bytes) -> None:
    """POST /charges/{id}/capture, `{}` or `{"amount": N}`, JSON, the request's key."""
    client, transport = build(reply(200, captured(amount or 1999)))
    result = client.capture(capture_request(amount))
    (sent,) = transport.requests
    assert (sent.method, str(sent.url)) == ("POST", f"{BASE_URL}/charges/{CHARGE_ID}/capture")
    assert sent.content == body
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["Idempotency-Key"] == f"capture-{PAYMENT}"
    assert sent.headers["Authorization"] == f"Bearer {API_KEY}"
    assert isinstance(result, Authorization)
    assert (result.captured, result.amount_captured, result.attempts) == (True, amount or 1999, 1)


def test_void_posts_an_empty_object_to_the_charge() -> None:
    """POST /charges/{id}/void with `{}` and the request's key; the answer is voided."""
    client, transport = build(reply(200, voided()))
    result = client.void(void_request())
    (sent,) = transport.requests
    assert (sent.method, str(sent.url), sent.content) == (
        "POST",
        f"{BASE_URL}/charges/{CHARGE_ID}/void",
        b"{}",
    )
    assert sent.headers["Idempotency-Key"] == f"void-{PAYMENT}"
    assert result.voided is True and result.voided_at == datetime(2026, 11, 29, 17, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("amount", "body"),
    [
        (500, {"charge": CHARGE_ID, "amount": 500, "reference": REFUND_REFERENCE}),
        (None, {"charge": CHARGE_ID, "reference": REFUND_REFERENCE}),
    ],
)
def test_refund_posts_the_charge_amount_and_our_reference(
    amount: int | None, body: dict[str, Any]
) -> None:
    """POST /refunds with charge, amount (omitted: all that remains) and reference."""
    client, transport = build(reply(201, refund_body()))
    result = client.refund(refund_request(amount))
    (sent,) = transport.requests
    assert (sent.method, str(sent.url)) == ("POST", f"{BASE_URL}/refunds")
    assert json.loads(sent.content) == body
    assert sent.headers["Idempotency-Key"] == f"refund-{REFUND_REFERENCE}"
    assert result == Refund(
        acquirer_reference=REFUND_ID,
        charge=CHARGE_ID,
        amount=500,
        currency="EUR",
        refund_reference=REFUND_REFERENCE,
        status="succeeded",
        failure_code=None,
        created_at=datetime(2026, 11, 29, 17, 5, tzinfo=UTC),
    )


def test_lookup_refunds_gets_refunds_by_our_reference() -> None:
    """GET /refunds?reference=<ours>, no key; every listed refund comes back, oldest first."""
    second = refund_body(id="re_second", status="failed", failure_code="do_not_honor")
    client, transport = build(reply(200, {"data": [refund_body(), second]}))
    refunds = client.lookup_refunds(REFUND_REFERENCE)
    (sent,) = transport.requests
    assert sent.method == "GET"
    assert sent.url.path == "/v1/refunds"
    assert sent.url.params["reference"] == REFUND_REFERENCE
    assert "Idempotency-Key" not in sent.headers
    assert [(r.acquirer_reference, r.status) for r in refunds] == [
        (REFUND_ID, "succeeded"),
        ("re_second", "failed"),
    ]


def test_lookup_refunds_of_an_unknown_reference_is_empty() -> None:
    client, _ = build(reply(200, {"data": []}))
    assert client.lookup_refunds(REFUND_REFERENCE) == []


def test_lookup_reads_the_capture_state_of_each_charge() -> None:
    """GET /charges lists each charge with its capture state now."""
    client, _ = build(reply(200, {"data": [captured(1500, amount_refunded=500)]}))
    (found,) = client.lookup(PAYMENT)
    assert (found.captured, found.amount_captured, found.amount_refunded) == (True, 1500, 500)


def test_a_charge_id_is_quoted_into_the_path() -> None:
    """An acquirer id with a path character stays one path segment."""
    client, transport = build(reply(200, captured(id="ch_a/b?c")))
    client.capture(CaptureRequest("ch_a/b?c", None, "capture-1"))
    assert transport.requests[0].url.raw_path == b"/v1/charges/ch_a%2Fb%3Fc/capture"


def test_a_failed_refund_is_a_value_not_an_error() -> None:
    """status failed with its failure_code: a result, like a decline."""
    body = refund_body(status="failed", failure_code="insufficient_funds")
    client, _ = build(reply(201, body))
    refund = client.refund(refund_request())
    assert (refund.status, refund.failure_code) == ("failed", "insufficient_funds")


def test_the_replayed_header_marks_a_replay() -> None:
    """Idempotent-Replayed: true -> replayed, for captures, voids and refunds."""
    header = {"Idempotent-Replayed": "true"}
    client, _ = build(reply(200, captured(), header))
    assert client.capture(capture_request()).replayed is True
    client, _ = build(reply(200, voided(), header))
    assert client.void(void_request()).replayed is True
    client, _ = build(reply(201, refund_body(), header))
    assert client.refund(refund_request()).replayed is True


# -- strict parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    ["captured", "amount_captured", "amount_refunded", "voided", "captured_at", "voided_at"],
)
def test_a_capture_state_missing_one_field_is_malformed(field: str) -> None:
    """The capture state is all there or all absent."""
    body = charge()
    del body[field]
    client, _ = build(reply(201, body))
    with pytest.raises(MalformedResponseError, match=field):
        client.authorize(manual_request())


@pytest.mark.parametrize(
    "overrides",
    [
        {"captured": 0},
        {"voided": "false"},
        {"amount_captured": True},
        {"amount_refunded": -1},
        {"amount_captured": 1.5},
        {"captured_at": 1234},
        {"voided_at": "yesterday"},
        {"captured_at": "2026-11-29T17:05:00"},
    ],
    ids=repr,
)
def test_a_capture_state_of_the_wrong_type_is_malformed(overrides: dict[str, Any]) -> None:
    client, _ = build(reply(201, charge(**overrides)))
    with pytest.raises(MalformedResponseError):
        client.authorize(manual_request())


@pytest.mark.parametrize(
    "body",
    [
        captured(voided=True, voided_at=LATER),  # both
        captured(2000),  # above the authorised amount
        captured(1000, amount_refunded=1001),  # refunded more than captured
        charge(amount_captured=100),  # an amount without the flag
        captured(0),  # a flag without an amount
        charge(captured_at=LATER),  # a timestamp without its flag
        charge(voided=True),  # a flag without its timestamp
        captured(status="declined", decline_code="do_not_honor"),  # a captured decline
    ],
    ids=[
        "captured-and-voided",
        "captured-above-amount",
        "refunded-above-captured",
        "amount-without-flag",
        "flag-without-amount",
        "timestamp-without-flag",
        "flag-without-timestamp",
        "captured-decline",
    ],
)
def test_an_inconsistent_capture_state_is_malformed(body: dict[str, Any]) -> None:
    client, _ = build(reply(200, {"data": [body]}))
    with pytest.raises(MalformedResponseError):
        client.lookup(PAYMENT)


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("capture", charge()),  # not captured
        ("capture", captured(1000)),  # captured for another amount
        ("capture", captured(id="ch_other")),  # another charge
        ("capture", AUTOMATIC_ANSWER),  # no capture state
        ("void", charge()),  # not voided
        ("void", AUTOMATIC_ANSWER),
        ("refund", refund_body(charge="ch_other")),
        ("refund", refund_body(reference="re_other")),
        ("refund", refund_body(amount=400)),
        ("refund", refund_body(object="charge")),
        ("refund", refund_body(status="pending")),
        ("refund", refund_body(failure_code="do_not_honor")),  # succeeded with a code
        ("refund", refund_body(amount=0)),
        ("refund", refund_body(amount=True)),
        ("refund", refund_body(currency="eur")),
        ("refund", refund_body(id="")),
        ("refund", {key: value for key, value in refund_body().items() if key != "created_at"}),
        ("lookup_refunds", {"data": [refund_body(reference="re_other")]}),
        ("lookup_refunds", {"data": {}}),
        ("lookup_refunds", [refund_body()]),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_an_answer_that_is_not_the_documented_one_is_malformed(name: str, body: Any) -> None:
    """2xx that does not answer the request: ambiguous (MalformedResponseError), no value."""
    status = OPERATIONS[name][1]
    error = error_of(name, reply(status, body))
    assert type(error) is MalformedResponseError
    assert isinstance(error, AmbiguousOutcomeError) and error.operation == name


AMOUNT = "amount must be None or a positive integer in minor units"
ACQUIRER_REFERENCE = "acquirer_reference must be 1 to 255 characters"
IDEMPOTENCY_KEY = "idempotency_key must be 1 to 255 characters"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CaptureRequest(CHARGE_ID, 0, "k"), AMOUNT),
        (lambda: CaptureRequest(CHARGE_ID, -5, "k"), AMOUNT),
        (lambda: CaptureRequest(CHARGE_ID, True, "k"), AMOUNT),
        (lambda: CaptureRequest(CHARGE_ID, 1.5, "k"), AMOUNT),
        (lambda: CaptureRequest("", None, "k"), ACQUIRER_REFERENCE),
        (lambda: CaptureRequest("ch 1", None, "k"), ACQUIRER_REFERENCE),
        (lambda: CaptureRequest(CHARGE_ID, None, ""), IDEMPOTENCY_KEY),
        (lambda: VoidRequest(CHARGE_ID, "x" * 256), IDEMPOTENCY_KEY),
        (lambda: VoidRequest(None, "k"), ACQUIRER_REFERENCE),
        (lambda: RefundRequest(CHARGE_ID, "", 5, "k"), "refund_reference must be 1 to 255"),
        (lambda: RefundRequest(CHARGE_ID, REFUND_REFERENCE, 0, "k"), AMOUNT),
        (lambda: manual_request(capture="false"), "capture must be a bool"),
        (lambda: manual_request(capture=None), "capture must be a bool"),
    ],
)
def test_bad_requests_are_refused_on_creation(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_the_operations_check_their_argument_types() -> None:
    client, transport = build(reply(200, captured()))
    with pytest.raises(TypeError):
        client.capture(void_request())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.void(capture_request())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.refund(capture_request())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^refund_reference must be a non-empty string$"):
        client.lookup_refunds("")
    assert transport.requests == []


# -- classification: every status and failure the sandbox can give -----------------------------


def _statuses() -> Iterator[tuple[str, int, str, type[GatewayError]]]:
    common: list[tuple[int, str, type[GatewayError]]] = [
        (400, "invalid_request", InvalidRequestError),
        (401, "invalid_api_key", AuthenticationError),
        (403, "permission_denied", AuthenticationError),
        (404, "not_found", InvalidRequestError),
        (405, "method_not_allowed", InvalidRequestError),
        (409, "idempotency_key_in_use", IdempotencyConflictError),
        (411, "length_required", InvalidRequestError),
        (413, "payload_too_large", InvalidRequestError),
        (415, "unsupported_media_type", InvalidRequestError),
        (422, "idempotency_key_reused", InvalidRequestError),
        (422, "unprocessable_request", InvalidRequestError),
        (429, "rate_limited", RateLimitedError),
        (500, "api_error", UpstreamServerError),
        (502, "bad_gateway", UpstreamServerError),
        (503, "service_unavailable", AcquirerUnavailableError),
        (504, "gateway_timeout", UpstreamServerError),
    ]
    rules = {"capture": CAPTURE_RULES, "void": VOID_RULES, "refund": REFUND_RULES}
    for name in OPERATIONS:
        for status, code, error_class in common:
            yield name, status, code, error_class
        if name in rules:
            yield name, 404, "charge_not_found", InvalidRequestError
            for code in rules[name]:
                yield name, 422, code, InvalidRequestError


@pytest.mark.parametrize(("name", "status", "code", "error_class"), list(_statuses()))
def test_every_status_of_every_operation_is_classified(
    name: str, status: int, code: str, error_class: type[GatewayError]
) -> None:
    """The table authorize uses, operation by operation; the acquirer's code is kept."""
    error = error_of(name, reply(status, problem(status, code)))
    assert type(error) is error_class
    assert (error.operation, error.status_code, error.code, error.attempts) == (
        name,
        status,
        code,
        1,
    )
    if isinstance(error, PermanentError):
        assert error.acquirer_code == code


@pytest.mark.parametrize("name", list(OPERATIONS))
@pytest.mark.parametrize(
    ("exc", "error_class"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), ConnectionFailedError),
        (httpx.ConnectTimeout("timed out"), ConnectionFailedError),
        (httpx.ReadTimeout("timed out"), ResponseTimeoutError),
        (httpx.ReadError("[Errno 104] Connection reset by peer"), ConnectionLostError),
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            ConnectionLostError,
        ),
    ],
    ids=["refused", "connect-timeout", "read-timeout", "reset", "closed"],
)
def test_every_transport_failure_of_every_operation_is_classified(
    name: str, exc: Exception, error_class: type[GatewayError]
) -> None:
    """Refused: nothing sent (retryable); a timeout, reset or close after sending: ambiguous."""
    error = error_of(name, raising(exc))
    assert type(error) is error_class and error.operation == name


@pytest.mark.parametrize("name", WRITES)
def test_a_write_error_carries_its_idempotency_key(name: str) -> None:
    error = error_of(name, reply(500, problem(500, "api_error")))
    expected = {
        "capture": f"capture-{PAYMENT}",
        "void": f"void-{PAYMENT}",
        "refund": f"refund-{REFUND_REFERENCE}",
    }[name]
    assert error.idempotency_key == expected


def test_acquirer_code_is_none_without_an_answer() -> None:
    """A request that could not be sent has no acquirer code (and no status)."""
    error = error_of("capture", raising(httpx.LocalProtocolError("bad header")))
    assert isinstance(error, InvalidRequestError)
    assert (error.status_code, error.acquirer_code) == (None, None)


# -- retries: one key, the classification of authorize ----------------------------------------

THREE = RetryPolicy(max_attempts=3)


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_503_twice_then_success_within_the_retries(name: str) -> None:
    """Certainly not applied twice, then the answer: one call, three attempts, one key."""
    operation, status, body = OPERATIONS[name]
    unavailable = reply(503, problem(503, "service_unavailable"))
    client, transport = build(unavailable, unavailable, reply(status, body), policy=THREE)
    result = operation(client)
    assert len(transport.requests) == 3
    if name in WRITES:
        assert result.attempts == 3
        assert len(set(keys(transport))) == 1 and keys(transport)[0] is not None
    else:
        assert keys(transport) == [None, None, None]


@pytest.mark.parametrize("name", WRITES)
def test_an_ambiguous_write_is_resent_with_the_same_key(name: str) -> None:
    """500 after commit, then the replay: the same key both times, the replay is the answer."""
    operation, status, body = OPERATIONS[name]
    client, transport = build(
        reply(500, problem(500, "api_error")),
        reply(status, body, {"Idempotent-Replayed": "true"}),
        policy=THREE,
    )
    result = operation(client)
    assert result.replayed is True and result.attempts == 2
    assert keys(transport)[0] == keys(transport)[1] is not None


@pytest.mark.parametrize("name", WRITES)
def test_once_ambiguous_always_ambiguous(name: str) -> None:
    """A timeout then 503s: the call's error is the ambiguous one (the first may have applied)."""
    unavailable = reply(503, problem(503, "service_unavailable"))
    error = error_of(name, raising(httpx.ReadTimeout("timed out")), unavailable, policy=THREE)
    assert type(error) is ResponseTimeoutError
    assert error.attempts == 3
    assert isinstance(error.__cause__, AcquirerUnavailableError)


@pytest.mark.parametrize("name", WRITES)
def test_an_ambiguous_write_is_not_resent_without_key_honouring(name: str) -> None:
    """An acquirer that does not honour keys: a 500 ends the call (reconcile)."""
    client, transport = build(
        reply(500, problem(500, "api_error")), policy=THREE, honours_idempotency_keys=False
    )
    with pytest.raises(UpstreamServerError):
        OPERATIONS[name][0](client)
    assert len(transport.requests) == 1


def test_lookup_refunds_repeats_an_ambiguous_get() -> None:
    """A GET is safe to repeat: a 500 is retried even without key honouring."""
    client, transport = build(
        reply(500, problem(500, "api_error")),
        reply(200, {"data": []}),
        policy=THREE,
        honours_idempotency_keys=False,
    )
    assert client.lookup_refunds(REFUND_REFERENCE) == []
    assert len(transport.requests) == 2


@pytest.mark.parametrize("name", WRITES)
def test_a_rule_refusal_is_never_retried(name: str) -> None:
    code = {"capture": "charge_already_captured", "void": "charge_already_voided"}.get(
        name, "amount_exceeds_refundable"
    )
    client, transport = build(reply(422, problem(422, code)), policy=THREE)
    with pytest.raises(InvalidRequestError) as info:
        OPERATIONS[name][0](client)
    assert info.value.acquirer_code == code
    assert len(transport.requests) == 1


# -- breaker groups, metrics and the log -----------------------------------------------------

CONFIG_C = BreakerConfig(window_size=10, minimum_calls=5, open_duration=30.0, half_open_permits=3)


@pytest.mark.parametrize(
    ("name", "group"),
    [("capture", "capture"), ("void", "void"), ("refund", "refund"), ("lookup_refunds", "lookup")],
)
def test_each_operation_has_its_breaker_group(name: str, group: str) -> None:
    """Failures of one operation open its group only; the refusal names the group."""
    client, transport = build(
        reply(503, problem(503, "service_unavailable")),
        breakers=dict.fromkeys(("authorize", "capture", "void", "refund", "lookup"), CONFIG_C),
    )
    for _ in range(5):
        with pytest.raises(AcquirerUnavailableError):
            OPERATIONS[name][0](client)
    states = {g: client.breaker_state(g).state for g in client.breakers}
    assert states == {g: "open" if g == group else "closed" for g in states}
    assert client.admits(group).allowed is False
    assert all(client.admits(other).allowed for other in states if other != group)
    with pytest.raises(CircuitOpenError) as info:
        OPERATIONS[name][0](client)
    assert (info.value.group, info.value.operation, info.value.attempts) == (group, name, 0)
    assert len(transport.requests) == 5


def test_a_failed_refund_is_a_success_to_the_breaker() -> None:
    """Like a decline, a failed refund proves the acquirer healthy."""
    client, _ = build(reply(201, refund_body(status="failed", failure_code="do_not_honor")))
    client.refund(refund_request())
    snapshot = client.breaker_state("refund")
    assert (snapshot.buffered_calls, snapshot.failed_calls) == (1, 0)


def test_metrics_and_log_lines_name_the_operation(caplog: pytest.LogCaptureFixture) -> None:
    """`attempts{operation}` and `gateway_operation`/`gateway_reference` per operation."""
    client, _ = build(reply(201, refund_body(status="failed", failure_code="do_not_honor")))
    metrics = client.metrics
    assert isinstance(metrics, CounterMetrics)
    with caplog.at_level(logging.INFO, logger="gateway_client"):
        client.refund(refund_request())
    (record,) = [r for r in caplog.records if r.name == "gateway_client"]
    assert (record.gateway_operation, record.gateway_reference, record.gateway_outcome) == (
        "refund",
        REFUND_REFERENCE,
        "failed",
    )
    assert metrics.get("attempts", operation="refund", outcome="ok") == 1
    client, _ = build(reply(200, captured()))
    with caplog.at_level(logging.INFO, logger="gateway_client"):
        client.capture(capture_request())
    assert caplog.records[-1].gateway_operation == "capture"
    assert caplog.records[-1].gateway_reference == CHARGE_ID
