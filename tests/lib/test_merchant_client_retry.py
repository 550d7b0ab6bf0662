"""merchant_client's retry decisions: the table of merchant_client/retry.py, then the same rules
through the client's loop (httpx's MockTransport stands for the network; the clock is
gateway_client's ManualClock, so every wait is exact and nothing sleeps)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest

from merchant_client import (
    DEFAULT_POLICY,
    AcquirerError,
    CardDataNotAccepted,
    ConnectionFailed,
    IdempotencyKeyReused,
    InvalidPaymentState,
    InvalidRequest,
    MerchantClient,
    NotFound,
    OutcomeUnknown,
    Payment,
    Pending,
    RateLimited,
    Refund,
    ServerError,
    ServiceUnavailable,
    Unauthorized,
    ValidationError,
)
from merchant_client.retry import AMBIGUOUS, NOT_SENT, Outcome, decide
from merchant_client.types import DecodeError, decode_payment
from resilience.clock import ManualClock

HALF = 0.5  # the injected random number: full jitter = half its bound
TOO_LONG = "server_wait_too_long"


def ra(value: str) -> dict[str, str]:
    return {"Retry-After": value}


# Default policy: 3 attempts, 30 s, jitter bounds 0.5 s then 1 s (so 0.25 s, then 0.5 s).
# (status, headers, code, transport, attempts, elapsed) -> (retry, wait, reason, retry_after)
TABLE = [
    # results
    (201, {}, None, None, 1, 0.0, (False, 0.0, "result", None)),
    (200, {}, None, None, 1, 0.0, (False, 0.0, "result", None)),
    (202, ra("5"), None, None, 1, 0.0, (False, 0.0, "result", 5.0)),
    # no answer: the same key again after the backoff
    (None, None, None, NOT_SENT, 1, 0.0, (True, 0.25, "retry", None)),
    (None, None, None, AMBIGUOUS, 1, 0.0, (True, 0.25, "retry", None)),
    (None, None, None, AMBIGUOUS, 2, 1.0, (True, 0.5, "retry", None)),
    (None, None, None, AMBIGUOUS, 3, 2.0, (False, 0.0, "max_attempts", None)),
    # 409 in use: after its Retry-After; the other 409s never
    (409, ra("1"), "idempotency_key_in_use", None, 1, 0.0, (True, 1.25, "retry", 1.0)),
    (409, {}, "idempotency_key_in_use", None, 1, 0.0, (True, 0.25, "retry", None)),
    (409, {}, "invalid_payment_state", None, 1, 0.0, (False, 0.0, "never", None)),
    (409, {}, "amount_exceeds_capturable", None, 1, 0.0, (False, 0.0, "never", None)),
    (409, {}, "amount_exceeds_refundable", None, 1, 0.0, (False, 0.0, "never", None)),
    # 503 and 429: after Retry-After while the deadline allows, else at once with the wait
    (503, ra("10"), "acquirer_unavailable", None, 1, 0.0, (True, 10.25, "retry", 10.0)),
    (503, ra("10"), "acquirer_unavailable", None, 2, 10.25, (True, 10.5, "retry", 10.0)),
    (503, ra("10"), "acquirer_unavailable", None, 3, 20.75, (False, 0.0, "max_attempts", 10.0)),
    (503, ra("10"), "acquirer_unavailable", None, 1, 20.0, (False, 0.0, TOO_LONG, 10.0)),
    (503, ra("40"), "acquirer_unavailable", None, 1, 0.0, (False, 0.0, TOO_LONG, 40.0)),
    (503, ra("Mon, 03 Jun 2019 11:00:05 GMT"), None, None, 1, 0.0, (True, 5.25, "retry", 5.0)),
    (503, ra("soon"), None, None, 1, 0.0, (True, 0.25, "retry", None)),
    (503, {}, None, None, 1, 0.0, (True, 0.25, "retry", None)),
    (429, ra("2"), "rate_limited", None, 1, 0.0, (True, 2.25, "retry", 2.0)),
    (429, ra("2"), "rate_limited", None, 3, 5.0, (False, 0.0, "max_attempts", 2.0)),
    (429, ra("29"), "rate_limited", None, 1, 1.0, (False, 0.0, TOO_LONG, 29.0)),
    # other 5xx: the same key again after the backoff; the stored 502 acquirer_error never
    (500, {}, "internal_error", None, 1, 0.0, (True, 0.25, "retry", None)),
    (502, {}, None, None, 1, 0.0, (True, 0.25, "retry", None)),
    (504, {}, None, None, 2, 3.0, (True, 0.5, "retry", None)),
    (500, {}, "internal_error", None, 1, 29.5, (False, 0.0, "deadline", None)),
    (502, {}, "acquirer_error", None, 1, 0.0, (False, 0.0, "never", None)),
    # never
    (400, {}, "validation_error", None, 1, 0.0, (False, 0.0, "never", None)),
    (400, {}, "card_data_not_accepted", None, 1, 0.0, (False, 0.0, "never", None)),
    (400, {}, "idempotency_key_invalid", None, 1, 0.0, (False, 0.0, "never", None)),
    (401, {}, "authentication_failed", None, 1, 0.0, (False, 0.0, "never", None)),
    (403, {}, "permission_denied", None, 1, 0.0, (False, 0.0, "never", None)),
    (404, {}, "not_found", None, 1, 0.0, (False, 0.0, "never", None)),
    (422, {}, "idempotency_key_reused", None, 1, 0.0, (False, 0.0, "never", None)),
    (418, {}, None, None, 1, 0.0, (False, 0.0, "never", None)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("status", "headers", "code", "transport", "attempts", "elapsed", "expected"), TABLE
)
def test_retry_decision_table(status, headers, code, transport, attempts, elapsed, expected):
    """Status and headers (or no answer) -> retry or not, and the wait."""
    outcome = Outcome(status, headers, code, transport)
    decision = decide(
        outcome,
        attempts=attempts,
        elapsed=elapsed,
        policy=DEFAULT_POLICY,
        now=ManualClock.DEFAULT_WALL,
        random=lambda: HALF,
    )

    assert (decision.retry, decision.wait, decision.reason, decision.retry_after) == expected


@pytest.mark.parametrize(
    ("outcome", "retry"),
    [
        (Outcome(500, {}, "internal_error"), False),  # may have been applied
        (Outcome(transport=AMBIGUOUS), False),
        (Outcome(transport=NOT_SENT), True),  # certainly not sent: always safe
        (Outcome(503, ra("1"), "acquirer_unavailable"), True),
        (Outcome(409, ra("1"), "idempotency_key_in_use"), True),
    ],
)
def test_retry_ambiguous_false_stops_only_what_may_have_been_applied(outcome, retry):
    policy = DEFAULT_POLICY.replace(retry_ambiguous=False)
    decision = decide(outcome, attempts=1, elapsed=0.0, policy=policy, now=0.0, random=lambda: 0)

    assert decision.retry is retry


# -- through the client ---------------------------------------------------------------------

PAYMENT = {
    "id": "pay_0123456789abcdef01234567", "object": "payment", "status": "succeeded",
    "amount": 1999, "currency": "EUR", "payment_method": "tok_visa", "reference": "order-1",
    "description": None, "decline_code": None, "failure_code": None,
    "acquirer_reference": "ch_1", "capture_method": "automatic", "amount_captured": 1999,
    "amount_refunded": 0, "created_at": "2026-12-01T12:00:00.123456Z",
    "updated_at": "2026-12-01T12:00:01Z",
}  # fmt: skip
REFUND = {
    "id": "re_0123456789abcdef01234567", "object": "refund", "payment": PAYMENT["id"],
    "amount": 500, "currency": "EUR", "status": "pending", "reason": None, "failure_code": None,
    "acquirer_reference": None, "created_at": "2026-12-01T12:00:00Z",
    "updated_at": "2026-12-01T12:00:00Z",
}  # fmt: skip


def problem(status: int, code: str, **extra) -> httpx.Response:
    headers = {"Content-Type": "application/problem+json", "Request-Id": f"req-{status}"}
    headers.update(extra.pop("headers", {}))
    body = {"type": f"/problems/{code}", "title": "t", "status": status, "detail": "d"}
    return httpx.Response(status, headers=headers, json={**body, "code": code, **extra})


def ok(status: int = 201, document: dict | None = None, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, json=document or PAYMENT)


class Script:
    """Answers (responses, or exceptions to raise) in order; records every request."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    @property
    def keys(self) -> list[str | None]:
        return [r.headers.get("Idempotency-Key") for r in self.requests]


def client_for(script: Callable, clock: ManualClock, **kwargs) -> MerchantClient:
    return MerchantClient(
        "http://api.test",
        "sk_test_secret",
        clock=clock,
        sleep=clock.sleep,
        random=lambda: HALF,
        transport=httpx.MockTransport(script),
        **kwargs,
    )


def create(client: MerchantClient, **kwargs):
    kwargs.setdefault("idempotency_key", "order-1")
    return client.create_payment(1999, "EUR", "tok_visa", reference="order-1", **kwargs)


def test_a_lost_answer_is_re_sent_with_the_same_key_and_the_replay_returned():
    clock = ManualClock()
    script = Script(
        httpx.ReadError("reset"), ok(201, **{"Idempotent-Replayed": "true", "Request-Id": "r2"})
    )
    payment = create(client_for(script, clock))

    assert isinstance(payment, Payment) and payment.status == "succeeded"
    assert (payment.replayed, payment.request_id, payment.attempts) == (True, "r2", 2)
    assert script.keys == ["order-1", "order-1"]
    assert clock.sleeps == [0.25]
    body = json.loads(script.requests[0].content)
    assert body == {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa",
                    "reference": "order-1"}  # fmt: skip
    assert script.requests[0].headers["Authorization"] == "Bearer sk_test_secret"


def test_503_after_retry_after_until_the_attempts_run_out():
    clock = ManualClock()
    unavailable = [problem(503, "acquirer_unavailable", headers=ra("10")) for _ in range(3)]
    script = Script(*unavailable)
    with pytest.raises(ServiceUnavailable) as raised:
        create(client_for(script, clock))

    error = raised.value
    assert (error.attempts, error.retry_after, error.status_code) == (3, 10.0, 503)
    assert clock.sleeps == [10.25, 10.5]
    assert error.not_before == datetime.fromtimestamp(clock.time() + 10, tz=UTC)
    assert error.code == "acquirer_unavailable" and error.problem["status"] == 503
    assert error.request_id == "req-503" and error.idempotency_key == "order-1"


def test_a_wait_beyond_the_deadline_returns_at_once_with_the_time_to_come_back():
    clock = ManualClock()
    script = Script(*[problem(503, "acquirer_unavailable", headers=ra("10")) for _ in range(9)])
    client = client_for(script, clock, policy=DEFAULT_POLICY.replace(max_attempts=10))
    with pytest.raises(ServiceUnavailable) as raised:
        create(client)

    assert raised.value.attempts == 3  # at 0, 10.25 and 20.75 s: a 4th would start after 30 s
    assert clock.sleeps == [10.25, 10.5]
    assert raised.value.retry_after == 10.0


def test_409_in_use_waits_retry_after_and_returns_the_replay():
    clock = ManualClock()
    script = Script(
        problem(409, "idempotency_key_in_use", headers=ra("1")),
        ok(201, **{"Idempotent-Replayed": "true"}),
    )
    payment = create(client_for(script, clock))

    assert payment.replayed is True
    assert clock.sleeps == [1.25]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (problem(400, "validation_error", errors=[{"field": "amount"}]), ValidationError),
        (problem(400, "card_data_not_accepted"), CardDataNotAccepted),
        (problem(401, "authentication_failed"), Unauthorized),
        (problem(404, "not_found"), NotFound),
        (problem(409, "invalid_payment_state"), InvalidPaymentState),
        (problem(422, "idempotency_key_reused"), IdempotencyKeyReused),
        (problem(502, "acquirer_error", payment_id="pay_1"), AcquirerError),
    ],
)
def test_never_retried_answers_raise_their_class_with_the_problem(answer, error):
    clock = ManualClock()
    script = Script(answer)
    with pytest.raises(error) as raised:
        create(client_for(script, clock))

    assert len(script.requests) == 1 and clock.sleeps == []
    assert raised.value.problem == answer.json()
    assert raised.value.code == answer.json()["code"]
    assert "sk_test_secret" not in str(raised.value)


def test_an_unknown_code_falls_back_on_the_class_of_its_status():
    clock = ManualClock()
    script = Script(problem(429, "slow_down", headers=ra("1")), problem(400, "new_rule"))
    with pytest.raises(InvalidRequest) as raised:
        create(client_for(script, clock))

    assert type(raised.value) is InvalidRequest and clock.sleeps == [1.25]


def test_5xx_is_re_sent_with_the_same_key_then_gives_up():
    clock = ManualClock()
    script = Script(problem(500, "internal_error"), httpx.Response(502), problem(500, "x"))
    with pytest.raises(ServerError) as raised:
        create(client_for(script, clock))

    assert script.keys == ["order-1"] * 3 and clock.sleeps == [0.25, 0.5]
    assert raised.value.attempts == 3


def test_429_after_retry_after_then_the_result():
    clock = ManualClock()
    script = Script(problem(429, "rate_limited", headers=ra("2")), ok(201))
    assert isinstance(create(client_for(script, clock)), Payment)
    assert clock.sleeps == [2.25]


def test_429_twice_raises_rate_limited_with_the_wait():
    clock = ManualClock()
    script = Script(*[problem(429, "rate_limited", headers=ra("2")) for _ in range(3)])
    with pytest.raises(RateLimited) as raised:
        create(client_for(script, clock))
    assert raised.value.retry_after == 2.0 and raised.value.attempts == 3


def test_connection_refused_after_a_lost_answer_is_still_an_unknown_outcome():
    """Once an attempt may have been applied, a later "not sent" does not undo that."""
    clock = ManualClock()
    refused = httpx.ConnectError("refused")
    script = Script(httpx.RemoteProtocolError("closed"), refused, refused)
    with pytest.raises(OutcomeUnknown) as raised:
        create(client_for(script, clock))
    assert raised.value.attempts == 3 and isinstance(raised.value.__cause__, httpx.ConnectError)


def test_connection_refused_every_time_is_connection_failed():
    clock = ManualClock()
    refused = httpx.ConnectError("refused")
    with pytest.raises(ConnectionFailed):
        create(client_for(Script(refused, refused, refused), clock))


def test_a_garbled_2xx_is_re_sent_like_a_lost_answer():
    clock = ManualClock()
    script = Script(httpx.Response(201, content=b"{not json"), ok(201))
    assert isinstance(create(client_for(script, clock)), Payment)
    assert script.keys == ["order-1", "order-1"]


def test_the_generated_key_is_persisted_before_the_first_send_and_kept():
    clock = ManualClock()
    events: list[str] = []
    script = Script(httpx.ReadTimeout("slow"), ok(201))

    def handler(request: httpx.Request) -> httpx.Response:
        events.append(f"send {request.headers['Idempotency-Key']}")
        return script(request)

    client = client_for(handler, clock, new_key=lambda: "generated-1")
    create(client, idempotency_key=None, persist_key=lambda key: events.append(f"persist {key}"))

    assert events == ["persist generated-1", "send generated-1", "send generated-1"]


def test_a_failing_persist_key_sends_nothing():
    clock = ManualClock()
    script = Script()

    def persist(key: str) -> None:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        create(client_for(script, clock), idempotency_key=None, persist_key=persist)
    assert script.requests == []


@pytest.mark.parametrize("key", ["", "a b", "x" * 256, "é"])
def test_a_key_outside_the_contract_is_refused_before_sending(key):
    with pytest.raises(ValueError, match="idempotency_key"):
        create(client_for(Script(), ManualClock()), idempotency_key=key)


def test_a_mutating_call_needs_a_key_or_a_place_to_persist_one():
    with pytest.raises(TypeError, match="persist_key"):
        create(client_for(Script(), ManualClock()), idempotency_key=None)


def test_202_is_pending_and_wait_until_final_polls_with_retry_after_and_backoff():
    clock = ManualClock()
    processing = {**PAYMENT, "status": "processing", "acquirer_reference": None}
    script = Script(
        ok(202, processing, **ra("5")),
        ok(200, processing),
        ok(200, PAYMENT, **{"Request-Id": "r-final"}),
    )
    client = client_for(script, clock)
    pending = create(client)

    assert isinstance(pending, Pending) and pending.retry_after == 5.0
    assert pending.object.status == "processing" and pending.id == PAYMENT["id"]
    final = client.wait_until_final(pending, timeout=60)

    assert isinstance(final, Payment) and final.status == "succeeded"
    assert final.request_id == "r-final"
    assert clock.sleeps == [5.5, 6.0]  # Retry-After 5 + uniform(0, 1), then + uniform(0, 2)
    assert [r.url.path for r in script.requests[1:]] == [f"/payments/{PAYMENT['id']}"] * 2


def test_wait_until_final_returns_pending_when_the_timeout_comes_first():
    clock = ManualClock()
    pending_refund = {**REFUND}
    script = Script(*[ok(200, pending_refund) for _ in range(3)])
    client = client_for(script, clock)
    result = client.wait_until_final(REFUND["id"], timeout=2.0)

    assert isinstance(result, Pending) and isinstance(result.object, Refund)
    assert [r.url.path for r in script.requests] == [f"/refunds/{REFUND['id']}"] * 3
    assert clock.sleeps == [0.5, 1.0]  # the next wait (2 s) would end after the timeout


def test_operations_send_their_routes_and_bodies():
    clock = ManualClock()
    succeeded = {**REFUND, "status": "succeeded"}
    payments = {"object": "list", "data": [PAYMENT], "has_more": False}
    refunds = {"object": "list", "data": [REFUND], "has_more": True}
    script = Script(ok(200), ok(200), ok(201, succeeded), ok(200, payments), ok(200, refunds))
    client = client_for(script, clock)
    client.capture("pay_1", amount=800, idempotency_key="c-1")
    client.void("pay_1", idempotency_key="v-1")
    refund = client.refund("pay_1", amount=500, reason="duplicate", idempotency_key="r-1")
    page = client.list_payments(status="succeeded", limit=10)
    refund_page = client.list_refunds("pay_1", starting_after="re_x")

    sent = [(r.method, r.url.path, r.url.query.decode(), r.content) for r in script.requests]
    assert sent == [
        ("POST", "/payments/pay_1/capture", "", b'{"amount":800}'),
        ("POST", "/payments/pay_1/void", "", b"{}"),
        ("POST", "/payments/pay_1/refunds", "", b'{"amount":500,"reason":"duplicate"}'),
        ("GET", "/payments", "status=succeeded&limit=10", b""),
        ("GET", "/payments/pay_1/refunds", "starting_after=re_x", b""),
    ]
    assert isinstance(refund, Pending) is False and refund.status == "succeeded"
    assert page.data[0].id == PAYMENT["id"] and page.has_more is False
    assert refund_page.has_more is True and refund_page.data[0].amount == 500


def test_an_id_cannot_change_the_route():
    clock = ManualClock()
    script = Script(problem(404, "not_found"))
    with pytest.raises(NotFound):
        client_for(script, clock).get_payment("../refunds/x")
    assert script.requests[0].url.raw_path == b"/payments/..%2Frefunds%2Fx"


def test_a_request_httpx_cannot_express_is_not_retried():
    clock = ManualClock()
    script = Script(httpx.LocalProtocolError("bad header"))
    with pytest.raises(ConnectionFailed) as raised:
        create(client_for(script, clock))
    assert len(script.requests) == 1 and clock.sleeps == []
    assert isinstance(raised.value.__cause__, httpx.LocalProtocolError)


def test_wait_until_final_with_no_time_left_looks_once():
    clock = ManualClock()
    script = Script(ok(200, {**PAYMENT, "status": "processing"}))
    result = client_for(script, clock).wait_until_final(PAYMENT["id"], timeout=0)

    assert isinstance(result, Pending) and result.retry_after is None
    assert len(script.requests) == 1 and clock.sleeps == []


def test_the_disputed_amount_is_read_and_absent_from_an_older_server():
    assert decode_payment(PAYMENT).amount_disputed is None  # a server older than disputes
    assert decode_payment({**PAYMENT, "amount_disputed": 1500}).amount_disputed == 1500
    for wrong in ("1500", True, 1.5):
        with pytest.raises(DecodeError, match="amount_disputed"):
            decode_payment({**PAYMENT, "amount_disputed": wrong})
