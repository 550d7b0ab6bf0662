"""The acquirer client's spans (gateway_client/_tracing.py; ADR 0044): a call's span, an
attempt's span per request sent or per stop, each saying what its attempt log line says; the
same no-socket, manual-clock acquirer as tests/lib/test_gateway_retry.py."""

from __future__ import annotations

import json

import pytest

from gateway_client import CircuitOpenError, RetryPolicy
from tests.lib.test_gateway_retry import API_KEY, REFERENCE, TOKEN, build, request, status
from tests.support.tracing import by_name, traced


@pytest.fixture
def spans():
    with traced() as exporter:
        yield exporter


def test_each_attempt_is_a_span_under_the_call_with_its_wait_and_decisions(spans):
    """A 429 with Retry-After: 2, then a 201: two attempt spans under `acquirer authorize`,
    the first with its wait (2.1 s, from retry-after), budget and breaker, the second the
    result; the request id on the call; no key, token or body anywhere."""
    client, _, _ = build(status(429, {"Retry-After": "2"}), status(201), u=0.5)
    client.authorize(request(), request_id="req_abc")
    finished = spans.get_finished_spans()
    call = by_name(finished, "acquirer authorize")[0]
    first, second = by_name(finished, "acquirer authorize attempt")
    assert first.parent.span_id == call.context.span_id == second.parent.span_id
    assert call.attributes["payments.request_id"] == "req_abc"
    assert call.attributes["payments.acquirer.reference"] == REFERENCE
    assert dict(first.attributes) == {
        "payments.acquirer.name": "acquirer",
        "payments.attempt.number": 1,
        "payments.attempt.sent": True,
        "payments.attempt.outcome": "RateLimitedError",
        "payments.attempt.decision": "retry",
        "payments.attempt.wait_seconds": 2.1,
        "payments.attempt.wait_source": "retry-after",
        "payments.attempt.server_wait_seconds": 2.0,
        "payments.retry_budget.retries_available": first.attributes[
            "payments.retry_budget.retries_available"
        ],
        "payments.rate_gate.remaining_seconds": first.attributes[
            "payments.rate_gate.remaining_seconds"
        ],
        "payments.rate_gate.waited_seconds": 0.0,
        "payments.breaker.state": "closed",
        "http.response.status_code": 429,
        "error.type": "RateLimitedError",
    }
    assert second.attributes["payments.attempt.decision"] == "return"
    assert second.attributes["payments.attempt.outcome"] == "approved"
    assert second.attributes["http.request.resend_count"] == 1
    assert "error.type" not in second.attributes
    text = "".join(span.to_json() for span in finished)
    assert API_KEY not in text and TOKEN not in text


def test_a_call_the_breaker_refuses_is_one_attempt_span_not_sent(spans):
    """The breaker open before the first attempt: an attempt span with `sent` false, the stop
    reason and an error status; the call's span records the error."""
    client, _, _ = build(status(503), status(503), status(503), status(503))
    policy = RetryPolicy(max_attempts=1)
    for _ in range(40):
        try:
            client.authorize(request(), policy=policy)
        except CircuitOpenError:
            break
        except Exception:  # noqa: BLE001 - failures until the breaker opens
            continue
    else:
        pytest.fail("the breaker never opened")
    refused = by_name(spans.get_finished_spans(), "acquirer authorize attempt")[-1]
    assert refused.attributes["payments.attempt.sent"] is False
    assert refused.attributes["payments.attempt.stop_reason"] == "circuit_open"
    assert refused.attributes["payments.breaker.state"] == "open"
    assert refused.status.status_code.name == "ERROR"
    call = by_name(spans.get_finished_spans(), "acquirer authorize")[-1]
    assert call.status.status_code.name == "ERROR"
    assert json.loads(call.to_json())["events"][0]["name"] == "exception"
