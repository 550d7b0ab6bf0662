"""
The retry loop of AcquirerClient (docs/reference/retries.md): classification, full jitter, the
deadline, Retry-After and quota headers, the rate gate, the retry budget and the attempt log.

No sockets and no real time: httpx.MockTransport answers, a ManualClock is the clock and its
`sleep` the sleep, and the jitter's random source is a constant `u`, so every wait is exact.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AcquirerUnavailableError,
    AuthenticationError,
    AuthorizationRequest,
    GatewayError,
    InvalidRequestError,
    ManualClock,
    MemoryStore,
    RateLimitedError,
    ResponseTimeoutError,
    RetryBudgetExhaustedError,
    RetryPolicy,
    UpstreamServerError,
)
from resilience.budget import RetryBudget
from resilience.gate import RateGate, scope_for
from resilience.metrics import CounterMetrics

API_KEY = "sk_test_retry_Qm29xV"
TOKEN = "tok_visa_4242"
KEY = "authorize-pay_0123456789abcdef01234567"
REFERENCE = "pay_0123456789abcdef01234567"
WALL = datetime(2019, 6, 3, 11, 0, 0, tzinfo=UTC)

Step = Callable[[httpx.Request], httpx.Response]


def charge(**overrides: Any) -> dict[str, Any]:
    body = {
        "id": "ch_1",
        "status": "approved",
        "decline_code": None,
        "amount": 1999,
        "currency": "EUR",
        "reference": REFERENCE,
        "created_at": "2019-06-03T11:00:00Z",
    }
    body.update(overrides)
    return body


def request(**overrides: Any) -> AuthorizationRequest:
    fields: dict[str, Any] = {
        "amount": 1999,
        "currency": "EUR",
        "payment_method": TOKEN,
        "payment_reference": REFERENCE,
        "idempotency_key": KEY,
    }
    fields.update(overrides)
    return AuthorizationRequest(**fields)


def status(code: int, headers: dict[str, str] | None = None, body: Any = None) -> Step:
    def step(_: httpx.Request) -> httpx.Response:
        if code in (200, 201) and body is None:
            return httpx.Response(code, json=charge(), headers=headers)
        if isinstance(body, bytes):
            return httpx.Response(code, content=body, headers=headers)
        return httpx.Response(code, json=body, headers=headers)

    return step


def raising(exc: Exception) -> Step:
    def step(_: httpx.Request) -> httpx.Response:
        raise exc

    return step


class Acquirer(httpx.MockTransport):
    """
    Answers with `steps` in order (the last one repeats) and records every request; each
    request takes `takes` simulated seconds (a list: per request, the last one repeating).
    """

    def __init__(self, clock: ManualClock, *steps: Step, takes: float | list[float] = 0.0) -> None:
        self.clock = clock
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []
        self.arrivals: list[float] = []

        def handle(sent: httpx.Request) -> httpx.Response:
            sent.read()
            self.requests.append(sent)
            self.arrivals.append(clock.monotonic())
            durations = takes if isinstance(takes, list) else [takes]
            clock.advance(durations[min(len(self.requests), len(durations)) - 1])
            step = self.steps[min(len(self.requests), len(self.steps)) - 1]
            return step(sent)

        super().__init__(handle)


def build(
    *steps: Step,
    policy: RetryPolicy | None = None,
    u: float = 0.5,
    clock: ManualClock | None = None,
    store: MemoryStore | None = None,
    budget: RetryBudget | None = None,
    metrics: CounterMetrics | None = None,
    takes: float | list[float] = 0.0,
    **config: Any,
) -> tuple[AcquirerClient, Acquirer, ManualClock]:
    clock = clock or ManualClock()
    transport = Acquirer(clock, *steps, takes=takes)
    client = AcquirerClient(
        AcquirerConfig(base_url="https://acquirer.test", api_key=API_KEY, **config),
        transport=transport,
        policy=policy,
        clock=clock,
        sleep=clock.sleep,
        random=lambda: u,
        store=store,
        budget=budget,
        metrics=metrics,
    )
    return client, transport, clock


def raised(client: AcquirerClient, **kwargs: Any) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        client.authorize(request(), **kwargs)
    return info.value


# -- defaults ----------------------------------------------------------------------------------


def test_policy_defaults_are_the_synchronous_api_path() -> None:
    """RetryPolicy(): 3 attempts, base 0.2 s, cap 2 s, 1 s/3 s timeouts, 8 s deadline, 30 s wait."""
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.backoff_base, policy.backoff_cap) == (3, 0.2, 2.0)
    assert (policy.connect_timeout, policy.read_timeout, policy.deadline) == (1.0, 3.0, 8.0)
    assert (policy.max_server_wait, policy.retry_ambiguous) == (30.0, True)
    assert policy.min_attempt_time == 0.5


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be an integer >= 1"),
        ({"max_attempts": 1.5}, "max_attempts must be an integer >= 1"),
        ({"max_attempts": True}, "max_attempts must be an integer >= 1"),
        ({"deadline": 0}, "deadline must be > 0 seconds"),
        ({"deadline": float("inf")}, "deadline must be a finite number of seconds"),
        ({"backoff_base": -0.1}, "backoff_base must be >= 0 seconds"),
        ({"read_timeout": float("nan")}, "read_timeout must be a finite number of seconds"),
        ({"retry_ambiguous": "yes"}, "retry_ambiguous must be a bool"),
    ],
)
def test_policy_rejects_bad_values(changes: dict[str, Any], message: str) -> None:
    """A RetryPolicy with a non-positive, infinite or mistyped value raises ValueError."""
    with pytest.raises(ValueError, match=re.escape(message)):
        RetryPolicy(**changes)


def test_policy_is_frozen() -> None:
    """RetryPolicy cannot be changed in place; replace() returns a validated copy."""
    policy = RetryPolicy()
    with pytest.raises(AttributeError):
        policy.deadline = 1.0  # type: ignore[misc]
    assert policy.replace(deadline=30.0).deadline == 30.0


def test_default_policy_takes_the_config_timeouts() -> None:
    """Without a policy, the client uses RetryPolicy() with the config's two timeouts."""
    client, _, _ = build(status(201), connect_timeout=0.5, read_timeout=2.5)
    assert client.policy == RetryPolicy(connect_timeout=0.5, read_timeout=2.5)


# -- what is retried ------------------------------------------------------------------------


def test_503_twice_then_approved_sends_three_attempts_with_one_key() -> None:
    """503, 503, 201: three requests, all with the same idempotency key, and the approval."""
    client, acquirer, _ = build(status(503), status(503), status(201))
    authorization = client.authorize(request())
    assert (authorization.approved, authorization.attempts) == (True, 3)
    assert [r.headers["Idempotency-Key"] for r in acquirer.requests] == [KEY, KEY, KEY]
    assert [r.content for r in acquirer.requests] == [acquirer.requests[0].content] * 3


@pytest.mark.parametrize(
    "step",
    [
        raising(httpx.ConnectError("[Errno 111] Connection refused")),
        raising(httpx.ConnectError("[Errno -2] Name or service not known")),
        raising(httpx.ConnectTimeout("timed out")),
        status(429),
        status(503),
    ],
    ids=["refused", "dns", "connect-timeout", "429", "503"],
)
def test_certainly_not_applied_is_retried(step: Step) -> None:
    """Refused, DNS, connect timeout, 429, 503: retried even when keys are not honoured."""
    client, acquirer, _ = build(step, status(201), honours_idempotency_keys=False)
    assert client.authorize(request()).approved is True
    assert len(acquirer.requests) == 2


AMBIGUOUS = [
    status(500),
    status(502),
    status(504),
    raising(httpx.ReadTimeout("timed out")),
    raising(httpx.ReadError("[Errno 104] Connection reset by peer")),
    raising(httpx.RemoteProtocolError("Server disconnected without sending a response.")),
    status(201, body=b"<html>garbled</html>"),
]
AMBIGUOUS_IDS = ["500", "502", "504", "read-timeout", "reset", "closed", "garbled"]


@pytest.mark.parametrize("step", AMBIGUOUS, ids=AMBIGUOUS_IDS)
def test_ambiguous_is_retried_when_the_acquirer_honours_keys(step: Step) -> None:
    """An ambiguous outcome is re-sent with the same key when the acquirer honours keys."""
    client, acquirer, _ = build(step, status(201), honours_idempotency_keys=True)
    assert client.authorize(request()).approved is True
    assert [r.headers["Idempotency-Key"] for r in acquirer.requests] == [KEY, KEY]


@pytest.mark.parametrize("step", AMBIGUOUS, ids=AMBIGUOUS_IDS)
def test_ambiguous_is_not_retried_when_keys_are_not_honoured(step: Step) -> None:
    """Without key honouring, an ambiguous outcome is raised after one attempt."""
    client, acquirer, _ = build(step, status(201), honours_idempotency_keys=False)
    error = raised(client)
    assert error.attempts == 1
    assert len(acquirer.requests) == 1


def test_ambiguous_is_not_retried_when_the_policy_forbids_it() -> None:
    """retry_ambiguous=False raises the first ambiguous outcome even with keys honoured."""
    client, acquirer, _ = build(status(500), status(201))
    error = raised(client, policy=RetryPolicy(retry_ambiguous=False))
    assert type(error) is UpstreamServerError
    assert len(acquirer.requests) == 1


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        (400, InvalidRequestError),
        (401, AuthenticationError),
        (403, AuthenticationError),
        (404, InvalidRequestError),
        (422, InvalidRequestError),
    ],
)
def test_permanent_errors_are_never_retried(code: int, error_class: type[GatewayError]) -> None:
    """400, 401, 403 (not a rate limit), 404, 422: one request, the permanent error."""
    client, acquirer, clock = build(status(code, body={"code": "refused"}), status(201))
    error = raised(client)
    assert type(error) is error_class
    assert (error.attempts, len(acquirer.requests), clock.sleeps) == (1, 1, [])


def test_decline_is_a_result_and_not_retried() -> None:
    """A 201 decline is returned at once: one request."""
    client, acquirer, _ = build(status(201, body=charge(status="declined", decline_code="x")))
    assert client.authorize(request()).approved is False
    assert len(acquirer.requests) == 1


def test_409_in_flight_is_retried_after_its_retry_after() -> None:
    """A 409 (same key in flight) is re-sent with the same key no sooner than Retry-After."""
    client, acquirer, clock = build(status(409, {"Retry-After": "1"}), status(201), u=0.0)
    assert client.authorize(request()).approved is True
    assert clock.sleeps == [1.0]
    assert acquirer.arrivals[1] - acquirer.arrivals[0] >= 1.0


def test_lookup_retries_ambiguous_outcomes_without_key_honouring() -> None:
    """A look-up is a GET: a 500 is retried even when the acquirer ignores keys."""
    client, acquirer, _ = build(
        status(500), status(200, body={"data": []}), honours_idempotency_keys=False
    )
    assert client.lookup(REFERENCE) == []
    assert len(acquirer.requests) == 2


def test_max_attempts_exhausted_raises_the_last_error_with_attempts() -> None:
    """Three 503s: AcquirerUnavailableError with attempts == 3."""
    client, acquirer, _ = build(status(503))
    error = raised(client)
    assert type(error) is AcquirerUnavailableError
    assert error.attempts == 3
    assert len(acquirer.requests) == 3


def test_per_call_policy_overrides_the_client_policy() -> None:
    """authorize(policy=RetryPolicy(max_attempts=1)) sends one request despite the default 3."""
    client, acquirer, _ = build(status(503))
    raised(client, policy=RetryPolicy(max_attempts=1))
    assert len(acquirer.requests) == 1


def test_lookup_takes_a_per_call_policy() -> None:
    """lookup(reference, policy=...) retries under the given policy."""
    client, acquirer, _ = build(status(503))
    with pytest.raises(AcquirerUnavailableError):
        client.lookup(REFERENCE, policy=RetryPolicy(max_attempts=5, deadline=60))
    assert len(acquirer.requests) == 5


def test_ambiguous_then_not_applied_is_still_ambiguous() -> None:
    """500 then 503: the call raises the ambiguous error (attempt 1 may have been applied)."""
    client, _, _ = build(status(500), status(503))
    error = raised(client, policy=RetryPolicy(max_attempts=2))
    assert type(error) is UpstreamServerError
    assert error.attempts == 2
    assert type(error.__cause__) is AcquirerUnavailableError


def test_ambiguous_then_refused_is_still_ambiguous() -> None:
    """500 then 400: the call raises the ambiguous error, never a definitive refusal."""
    client, _, _ = build(status(500), status(400))
    error = raised(client)
    assert type(error) is UpstreamServerError
    assert error.attempts == 2


# -- backoff and the deadline -----------------------------------------------------------------


def test_sleeps_are_full_jitter_from_n_zero() -> None:
    """base 0.5, cap 30, u = 0.5: the sleeps before retries 0 and 1 are 0.25 s and 0.5 s."""
    client, _, clock = build(status(503), u=0.5)
    raised(client, policy=RetryPolicy(backoff_base=0.5, backoff_cap=30, deadline=60))
    assert clock.sleeps == [0.25, 0.5]


def test_jitter_is_drawn_inside_the_capped_bound() -> None:
    """u close to 1 gives a sleep just under min(cap, base * 2**n), never the cap for all."""
    client, _, clock = build(status(503), u=0.999)
    raised(client, policy=RetryPolicy(max_attempts=4, backoff_base=1, backoff_cap=1.5, deadline=60))
    assert clock.sleeps == pytest.approx([0.999, 0.999 * 1.5, 0.999 * 1.5])


def test_sleep_crossing_the_deadline_stops_with_the_last_error() -> None:
    """Deadline 10 s, elapsed 8.5 s, sampled sleep 2 s: no sleep, the last error raised."""
    client, acquirer, clock = build(status(503), u=0.5, takes=8.5)
    policy = RetryPolicy(deadline=10, backoff_base=4, backoff_cap=4, read_timeout=5)
    error = raised(client, policy=policy)
    assert type(error) is AcquirerUnavailableError
    assert (error.attempts, len(acquirer.requests), clock.sleeps) == (1, 1, [])


def test_sleep_within_the_deadline_cuts_the_next_attempt_timeout() -> None:
    """Elapsed 8.5 s, sleep 0.5 s, per-attempt 5 s: the next attempt gets min(5, 10 - 9.0) s."""
    client, acquirer, clock = build(status(503), status(201), u=0.125, takes=[8.5, 0.0])
    policy = RetryPolicy(
        deadline=10, backoff_base=4, backoff_cap=4, read_timeout=5, connect_timeout=5
    )
    client.authorize(request(), policy=policy)
    assert clock.sleeps == [0.5]
    assert acquirer.requests[1].extensions["timeout"] == {
        "connect": 1.0,
        "read": 1.0,
        "write": 1.0,
        "pool": 1.0,
    }


def test_retry_leaving_less_than_min_attempt_time_is_not_taken() -> None:
    """Elapsed 8.5 s + sleep 1.2 s leaves 0.3 s < 0.5 s: no retry (a cut-off POST is ambiguous)."""
    policy = RetryPolicy(deadline=10, backoff_base=4, backoff_cap=4)
    client, acquirer, clock = build(status(503), status(201), u=0.3, takes=[8.5, 0.0])
    assert type(raised(client, policy=policy)) is AcquirerUnavailableError
    assert (len(acquirer.requests), clock.sleeps) == (1, [])
    client, acquirer, clock = build(status(503), status(201), u=0.3, takes=[8.5, 0.0])
    assert client.authorize(request(), policy=policy.replace(min_attempt_time=0)).approved
    assert len(acquirer.requests) == 2


def test_first_attempt_timeouts_are_cut_to_the_deadline() -> None:
    """A 2 s deadline with 3 s read timeout: the first attempt's read timeout is 2 s."""
    client, acquirer, _ = build(status(201))
    client.authorize(request(), policy=RetryPolicy(deadline=2.0))
    assert acquirer.requests[0].extensions["timeout"]["read"] == 2.0
    assert acquirer.requests[0].extensions["timeout"]["connect"] == 1.0


def test_total_time_never_crosses_the_deadline() -> None:
    """Whatever the draws, attempts plus sleeps end within the 8 s deadline."""
    for u in (0.0, 0.3, 0.6, 0.99):
        client, acquirer, clock = build(status(503), u=u, takes=2.9)
        raised(client, policy=RetryPolicy(max_attempts=10))
        assert clock.monotonic() <= 8.0 + 2.9
        assert acquirer.arrivals[-1] < 8.0


class TricklingBody(httpx.SyncByteStream):
    """A 201 body that delivers one byte per (simulated) second."""

    def __init__(self, clock: ManualClock, body: bytes) -> None:
        self.clock, self.body = clock, body

    def __iter__(self) -> Iterator[bytes]:
        for byte in self.body:
            self.clock.advance(1.0)
            yield bytes([byte])


def test_trickling_answer_is_cut_off_by_the_deadline() -> None:
    """A body at 1 byte/s never trips the read timeout, but the 3.5 s deadline cuts it off."""
    clock = ManualClock()
    body = json.dumps(charge()).encode()

    def trickle(_: httpx.Request) -> httpx.Response:
        return httpx.Response(201, stream=TricklingBody(clock, body))

    client, acquirer, _ = build(trickle, clock=clock)
    error = raised(client, policy=RetryPolicy(deadline=3.5))
    assert type(error) is ResponseTimeoutError
    assert error.status_code == 201
    assert clock.monotonic() <= 4.0
    assert len(acquirer.requests) == 1


# -- Retry-After and quota headers -------------------------------------------------------------


def test_retry_after_is_a_floor_with_jitter_after_it() -> None:
    """Retry-After: 2 with 8 s left: sleep 2 s plus jitter (never less), then one more attempt."""
    client, acquirer, clock = build(status(429, {"Retry-After": "2"}), status(201), u=0.5)
    assert client.authorize(request()).approved is True
    assert clock.sleeps == [2.0 + 0.5 * 0.2]
    assert acquirer.arrivals[1] - acquirer.arrivals[0] >= 2.0


def test_retry_after_beyond_the_deadline_fails_at_once_with_the_full_wait() -> None:
    """Retry-After: 30 with 10 s left: no sleep, one request, RateLimitedError(30 s, now + 30 s)."""
    client, acquirer, clock = build(status(429, {"Retry-After": "30"}), status(201))
    error = raised(client, policy=RetryPolicy(deadline=10))
    assert type(error) is RateLimitedError
    assert error.retry_after == 30.0
    assert error.not_before == WALL + timedelta(seconds=30)
    assert error.wait_source == "retry-after"
    assert (error.attempts, len(acquirer.requests), clock.sleeps) == (1, 1, [])


def test_retry_after_beyond_the_maximum_fails_at_once() -> None:
    """Retry-After: 60 with 120 s left but a 30 s maximum: no sleep, the full 60 s carried."""
    client, acquirer, clock = build(status(503, {"Retry-After": "60"}), status(201))
    error = raised(client, policy=RetryPolicy(deadline=120, max_server_wait=30))
    assert type(error) is AcquirerUnavailableError
    assert error.retry_after == 60.0
    assert error.not_before == WALL + timedelta(seconds=60)
    assert (len(acquirer.requests), clock.sleeps) == (1, [])


def test_retry_after_zero_retries_now_subject_to_the_budget() -> None:
    """Retry-After: 0 is valid: retried with the jitter only, and not counted as invalid."""
    metrics = CounterMetrics()
    client, _, clock = build(status(503, {"Retry-After": "0"}), status(201), u=0.5, metrics=metrics)
    client.authorize(request())
    assert clock.sleeps == [0.1]
    assert metrics.get("invalid_header") == 0
    assert metrics.get("retries") == 1


def test_retry_after_zero_is_refused_by_an_empty_budget() -> None:
    """Retry-After: 0 with an empty budget: RetryBudgetExhaustedError, one request."""
    clock = ManualClock()
    store = MemoryStore(clock.monotonic)
    budget = RetryBudget(store, "acquirer", min_retries_per_second=0, percent_can_retry=0.1)
    client, acquirer, _ = build(
        status(503, {"Retry-After": "0"}), status(201), clock=clock, store=store, budget=budget
    )
    error = raised(client)
    assert type(error) is RetryBudgetExhaustedError
    assert len(acquirer.requests) == 1


@pytest.mark.parametrize("value", ["-1", "+1", "1.0", "1.5", "1e3", "0x10", "1m0s", ""])
def test_invalid_retry_after_falls_back_to_backoff_and_is_counted(value: str) -> None:
    """An invalid Retry-After is ignored (backoff), counted in the metric, never raised."""
    metrics = CounterMetrics()
    client, _, clock = build(
        status(503, {"Retry-After": value}), status(201), u=0.5, metrics=metrics
    )
    assert client.authorize(request()).approved is True
    assert clock.sleeps == [0.1]
    assert metrics.get("invalid_header", header="retry-after") == 1


def test_retry_after_http_date_is_read_against_the_wall_clock() -> None:
    """Retry-After as an HTTP-date 1812 s ahead of the clock: RateLimitedError(1812 s)."""
    client, _, _ = build(status(429, {"Retry-After": "Mon, 03 Jun 2019 11:30:12 GMT"}))
    error = raised(client)
    assert error.retry_after == 1812.0
    assert error.not_before == datetime(2019, 6, 3, 11, 30, 12, tzinfo=UTC)


def test_ietf_ratelimit_t_is_the_floor_without_retry_after() -> None:
    """429 with RateLimit r=0;t=3 and no Retry-After: sleep 3 s plus jitter."""
    client, _, clock = build(status(429, {"RateLimit": '"default";r=0;t=3'}), status(201), u=0.0)
    client.authorize(request())
    assert clock.sleeps == [3.0]


@pytest.mark.parametrize(
    "value",
    ["default;r=0;t=30", '"default";r=0;t=-30', '"default";r="0";t=30', '"default";r=0;t=30,'],
    ids=["token-member", "negative-t", "string-r", "trailing-comma"],
)
def test_ratelimit_breaking_its_specification_is_ignored_and_counted(value: str) -> None:
    """A 429 whose RateLimit breaks its syntax or member rules: the header is not acted on (the
    backoff's jitter, not 30 s), and invalid_header{header=ratelimit} counts it."""
    metrics = CounterMetrics()
    client, _, clock = build(status(429, {"RateLimit": value}), status(201), u=0.5, metrics=metrics)
    assert client.authorize(request()).approved is True
    assert clock.sleeps == [0.1]
    assert metrics.get("invalid_header", header="ratelimit") == 1


def test_403_with_an_invalid_ratelimit_is_not_a_rate_limit() -> None:
    """A 403 whose RateLimit says r=0 in a field that breaks its rules stays an authentication
    error: one request, no wait, the header counted."""
    metrics = CounterMetrics()
    client, acquirer, clock = build(
        status(403, {"RateLimit": "default;r=0;t=1"}), status(201), metrics=metrics
    )
    assert type(raised(client)) is AuthenticationError
    assert (len(acquirer.requests), clock.sleeps) == (1, [])
    assert metrics.get("invalid_header", header="ratelimit") == 1


def test_retry_after_takes_precedence_over_ratelimit() -> None:
    """RateLimit r=0;t=30 and Retry-After: 2: the wait is 2 s."""
    headers = {"RateLimit": '"default";r=0;t=30', "Retry-After": "2"}
    client, _, clock = build(status(429, headers), status(201), u=0.0)
    client.authorize(request())
    assert clock.sleeps == [2.0]


def test_github_reset_minus_now_is_the_wait() -> None:
    """x-ratelimit-remaining 0, reset = now + 4 (epoch): sleep 4 s, not the raw epoch."""
    reset = str(int(WALL.timestamp()) + 4)
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
    client, _, clock = build(status(429, headers), status(201), u=0.0, quota_profile="github")
    client.authorize(request())
    assert clock.sleeps == [4.0]


def test_403_confirmed_by_quota_headers_is_rate_limited_and_retried() -> None:
    """A 403 with x-ratelimit-remaining 0 is a rate limit: waited for, then retried."""
    reset = str(int(WALL.timestamp()) + 1)
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
    client, acquirer, clock = build(status(403, headers), status(201), u=0.0)
    assert client.authorize(request()).approved is True
    assert (len(acquirer.requests), clock.sleeps) == (2, [1.0])


def test_403_confirmed_by_error_code_is_rate_limited() -> None:
    """A 403 whose error code names a rate limit is a RateLimitedError."""
    client, _, _ = build(status(403, body={"code": "secondary_rate_limit"}))
    error = raised(client, policy=RetryPolicy(max_attempts=1))
    assert type(error) is RateLimitedError


def test_403_without_confirmation_is_permanent() -> None:
    """A plain 403 is an AuthenticationError after one request."""
    client, acquirer, _ = build(status(403, body={"code": "forbidden"}))
    assert type(raised(client)) is AuthenticationError
    assert len(acquirer.requests) == 1


# -- the rate gate ------------------------------------------------------------------------------


def shared(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock.monotonic)


def test_gate_closed_by_one_client_refuses_another_without_sending() -> None:
    """After A's Retry-After: 30, B (same store and scope) fails at once, sending nothing."""
    clock = ManualClock()
    store = shared(clock)
    a, _, _ = build(status(429, {"Retry-After": "30"}), clock=clock, store=store)
    raised(a)
    clock.advance(5)
    b, b_acquirer, _ = build(status(201), clock=clock, store=store)
    error = raised(b)
    assert type(error) is RateLimitedError
    assert error.retry_after == pytest.approx(25.0)
    assert error.not_before == WALL + timedelta(seconds=30)
    assert error.wait_source == "gate"
    assert (error.attempts, len(b_acquirer.requests)) == (0, 0)


def test_gate_within_the_deadline_is_waited_for() -> None:
    """A gate closed for 3 s: B sleeps 3 s plus jitter, then sends once."""
    clock = ManualClock()
    store = shared(clock)
    a, _, _ = build(status(429, {"Retry-After": "3"}), clock=clock, store=store)
    raised(a, policy=RetryPolicy(max_attempts=1))
    b, b_acquirer, _ = build(status(201), clock=clock, store=store, u=0.5)
    assert b.authorize(request()).approved is True
    assert clock.sleeps[-1] == 3.0 + 0.1
    assert b_acquirer.arrivals[0] >= 3.0


def test_gate_waits_are_bounded_when_sleep_does_not_move_the_clock() -> None:
    """A sleep that does not advance time cannot loop forever on a closed gate."""
    clock = ManualClock()
    store = shared(clock)
    RateGate(store).close(scope_for("acquirer"), 2.0)
    client, acquirer, _ = build(status(201), clock=clock, store=store)
    client._sleep = lambda seconds: None  # a broken sleep
    error = raised(client)
    assert type(error) is RateLimitedError
    assert len(acquirer.requests) == 0


def test_gate_is_per_scope() -> None:
    """Another configured quota scope (another account) is not held by the first's gate."""
    clock = ManualClock()
    store = shared(clock)
    a, _, _ = build(status(429, {"Retry-After": "30"}), clock=clock, store=store)
    raised(a)
    b, b_acquirer, _ = build(status(201), clock=clock, store=store, rate_scope="other-account")
    assert b.authorize(request()).approved is True
    assert len(b_acquirer.requests) == 1


def test_exhausted_quota_on_a_success_closes_the_gate() -> None:
    """A 201 with RateLimit r=0;t=20 closes the gate: the next call is refused unsent."""
    client, acquirer, _ = build(status(201, {"RateLimit": '"default";r=0;t=20'}))
    client.authorize(request())
    error = raised(client)
    assert type(error) is RateLimitedError
    assert error.retry_after == 20.0
    assert len(acquirer.requests) == 1


def test_scope_never_contains_the_api_key() -> None:
    """The quota scope is the acquirer's name (no configured scope), nothing of the key."""
    client, _, _ = build(status(201), name="acme")
    assert client.scope == "acme"
    assert API_KEY not in client.scope


# -- the retry budget ---------------------------------------------------------------------------


def empty_budget(clock: ManualClock) -> tuple[MemoryStore, RetryBudget]:
    store = MemoryStore(clock.monotonic)
    return store, RetryBudget(store, "acquirer", min_retries_per_second=0, percent_can_retry=0.1)


def test_empty_budget_fails_fast_without_sleeping() -> None:
    """No budget: RetryBudgetExhaustedError after one request, no sleep, the 503 as cause."""
    clock = ManualClock()
    store, budget = empty_budget(clock)
    client, acquirer, _ = build(status(503), status(201), clock=clock, store=store, budget=budget)
    error = raised(client)
    assert type(error) is RetryBudgetExhaustedError
    assert (error.attempts, len(acquirer.requests), clock.sleeps) == (1, 1, [])
    assert type(error.__cause__) is AcquirerUnavailableError
    assert error.last_error == "AcquirerUnavailableError"


def test_empty_budget_after_an_ambiguous_attempt_raises_the_ambiguous_error() -> None:
    """A 500 with no budget left raises UpstreamServerError, never a 'not applied' error."""
    clock = ManualClock()
    store, budget = empty_budget(clock)
    client, _, _ = build(status(500), status(201), clock=clock, store=store, budget=budget)
    assert type(raised(client)) is UpstreamServerError


def test_ten_first_attempts_earn_one_retry() -> None:
    """Without a reserve, ten first attempts (10 % each) pay for exactly one retry."""
    clock = ManualClock()
    store, budget = empty_budget(clock)
    client, acquirer, _ = build(status(201), clock=clock, store=store, budget=budget)
    for _ in range(9):
        client.authorize(request())
    acquirer.steps = [status(503), status(201)]
    acquirer.requests.clear()
    assert client.authorize(request()).approved is True
    acquirer.steps = [status(503), status(201)]
    acquirer.requests.clear()
    assert type(raised(client)) is RetryBudgetExhaustedError


# -- the attempt log -------------------------------------------------------------------------


def gateway_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "gateway_client"]


def test_one_log_event_per_attempt_with_wait_and_source(caplog: pytest.LogCaptureFixture) -> None:
    """503 (Retry-After 1), 503, 201: three events; retries carry the wait and its source."""
    caplog.set_level(logging.DEBUG, logger="gateway_client")
    client, _, _ = build(status(503, {"Retry-After": "1"}), status(503), status(201), u=0.5)
    client.authorize(request())
    first, second, third = gateway_records(caplog)
    assert [r.gateway_attempt for r in (first, second, third)] == [1, 2, 3]
    assert [r.gateway_decision for r in (first, second, third)] == ["retry", "retry", "return"]
    assert (first.gateway_wait, first.gateway_wait_source) == (1.1, "retry-after")
    assert (second.gateway_wait, second.gateway_wait_source) == (0.2, "backoff")
    assert first.gateway_status == 503 and first.gateway_outcome == "AcquirerUnavailableError"
    assert first.gateway_server_wait == 1.0
    assert first.gateway_rate_headers == {"retry-after": "1"}
    assert first.gateway_budget_retries == 99
    assert first.gateway_gate_remaining == pytest.approx(1.0)
    assert third.gateway_outcome == "approved" and third.levelno == logging.INFO
    assert first.gateway_scope == client.scope
    assert first.gateway_elapsed >= 0 and third.gateway_call_elapsed == pytest.approx(1.3)


def test_final_event_names_the_stop_reason(caplog: pytest.LogCaptureFixture) -> None:
    """The last event of a failed call says decision=raise and why (here: server_wait_too_long)."""
    caplog.set_level(logging.INFO, logger="gateway_client")
    client, _, _ = build(status(429, {"Retry-After": "30"}))
    raised(client)
    (record,) = gateway_records(caplog)
    assert (record.gateway_decision, record.gateway_stop_reason) == (
        "raise",
        "server_wait_too_long",
    )
    assert record.levelno == logging.WARNING
    assert "reason=server_wait_too_long" in record.getMessage()


def test_gate_refusal_is_logged_without_an_attempt(caplog: pytest.LogCaptureFixture) -> None:
    """A call refused by the gate logs one event with attempt 0 and reason gate."""
    clock = ManualClock()
    store = shared(clock)
    a, _, _ = build(status(429, {"Retry-After": "30"}), clock=clock, store=store)
    raised(a)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="gateway_client")
    b, _, _ = build(status(201), clock=clock, store=store)
    raised(b)
    (record,) = gateway_records(caplog)
    assert (record.gateway_attempt, record.gateway_stop_reason) == (0, "gate")


def test_no_secret_in_any_record_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    """Across retries, no record holds the API key, the Bearer header or the card token."""
    caplog.set_level(logging.DEBUG)
    echo = {"code": "x", "message": f"Bearer {API_KEY} {TOKEN}"}
    client, _, _ = build(status(503, body=echo), status(500, body=echo), status(201))
    client.authorize(request())
    assert len(gateway_records(caplog)) == 3
    for record in caplog.records:
        text = record.getMessage() + repr(vars(record))
        assert API_KEY not in text
        assert "Bearer" not in text
        assert TOKEN not in text


def test_attempt_event_carries_the_gateway_fields_as_extras(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The attempt event's gateway_* extras are what a JSON formatter renders (no key)."""
    caplog.set_level(logging.INFO, logger="gateway_client")
    client, _, _ = build(status(503), status(201), u=0.5)
    client.authorize(request())
    record = gateway_records(caplog)[0]
    first = {
        name.removeprefix("gateway_"): value
        for name, value in vars(record).items()
        if name.startswith("gateway_")
    }
    assert first["operation"] == "authorize"
    assert (first["attempt"], first["status"], first["decision"]) == (1, 503, "retry")
    assert (first["wait"], first["wait_source"]) == (0.1, "backoff")
    assert record.levelname == "WARNING"
    assert API_KEY not in json.dumps(first, default=str)


# -- the attempt record of a call --------------------------------------------------------------


def test_a_call_records_each_attempt_with_its_wait_budget_and_breaker() -> None:
    """A read timeout then an approval: two records, in order, each with its start, status,
    outcome and error class; the first with the chosen wait, its source and the budget."""
    client, _, _ = build(raising(httpx.ReadTimeout("slow")), status(201), takes=[3.0, 0.25], u=0.5)
    result = client.authorize(request())
    first, second = result.attempt_log
    assert (first.attempt, first.sent, first.status_code) == (1, True, None)
    assert (first.outcome, first.error, first.decision) == (
        "ResponseTimeoutError", "ResponseTimeoutError", "retry",
    )  # fmt: skip
    assert first.started_at == WALL.timestamp() and first.elapsed == 3.0
    assert (first.wait, first.wait_source) == (0.1, "backoff")
    assert first.budget_retries is not None and first.breaker_state == "closed"
    assert (second.attempt, second.status_code, second.outcome) == (2, 201, "approved")
    assert (second.decision, second.error, second.elapsed) == ("return", None, 0.25)
    assert second.started_at == WALL.timestamp() + 3.1
    assert second.as_dict()["outcome"] == "approved" and "error" not in second.as_dict()


def test_an_error_carries_the_attempts_and_the_budget_refusal() -> None:
    """503 with an empty retry budget: one record, raised for the budget."""
    clock = ManualClock()
    store = MemoryStore(clock.monotonic)
    budget = RetryBudget(store, "acquirer", min_retries_per_second=0, percent_can_retry=0.1)
    client, _, _ = build(status(503), status(201), clock=clock, store=store, budget=budget)
    error = raised(client)
    (only,) = error.attempt_log
    assert (only.status_code, only.outcome, only.decision, only.stop_reason) == (
        503, "AcquirerUnavailableError", "raise", "budget",
    )  # fmt: skip
    assert only.budget_retries == 0


def test_a_call_the_breaker_refuses_records_a_step_not_sent() -> None:
    """A forced-open breaker: nothing sent, one record saying why."""
    client, transport, _ = build(status(201))
    client.breakers.get("authorize").force_open()
    error = raised(client)
    (only,) = error.attempt_log
    assert transport.requests == [] and only.sent is False and only.started_at is None
    assert (only.outcome, only.stop_reason) == ("CircuitOpenError", "circuit_open")
