"""
The retrying client against the sandbox acquirer over real HTTP: failure tokens, rate limits,
a trickling answer, resets and an acquirer-wide outage, counted by the sandbox's own stats.

Real time: lower bounds only on waits (the sandbox's arrivals or our own timestamps).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AuthorizationRequest,
    ConnectionLostError,
    GatewayError,
    InvalidRequestError,
    RateLimitedError,
    ResponseTimeoutError,
    RetryBudgetExhaustedError,
    RetryPolicy,
)
from tests.support.sandbox import SandboxProcess


@pytest.fixture(scope="module")
def sandbox_process() -> Iterator[SandboxProcess]:
    with SandboxProcess.start() as process:
        yield process


@pytest.fixture
def sandbox(sandbox_process: SandboxProcess) -> SandboxProcess:
    sandbox_process.reset()
    return sandbox_process


def make_client(sandbox: SandboxProcess, **kwargs: object) -> AcquirerClient:
    """A fresh client (its own in-memory gate and budget) with the default policy."""
    config = AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, name="sandbox")
    return AcquirerClient(config, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def client(sandbox: SandboxProcess) -> Iterator[AcquirerClient]:
    with make_client(sandbox) as value:
        yield value


def authorization_request(token: str) -> AuthorizationRequest:
    reference = f"pay_{uuid.uuid4().hex[:24]}"
    return AuthorizationRequest(
        amount=1050,
        currency="EUR",
        payment_method=token,
        payment_reference=reference,
        idempotency_key=f"authorize-{reference}",
    )


def requests_for(sandbox: SandboxProcess, request: AuthorizationRequest) -> int:
    return sandbox.stats()["requests_by_idempotency_key"].get(request.idempotency_key, 0)


def arrival_buckets(sandbox: SandboxProcess) -> list[int]:
    """Arrival times (epoch ms of each 100 ms bucket), one entry per request."""
    buckets = sandbox.stats()["arrivals_per_100ms"]
    return sorted(int(start) for start, count in buckets.items() for _ in range(count))


def test_fail_503_twice_is_approved_on_the_third_request_with_one_key(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_fail_503_2: three requests with the same key, then approved; one charge."""
    request = authorization_request("tok_fail_503_2")
    assert client.authorize(request).approved is True
    stats = sandbox.stats()
    assert stats["requests_by_idempotency_key"] == {request.idempotency_key: 3}
    assert stats["requests_by_status"].get("503") == 2
    assert stats["charges_total"] == 1


def test_ratelimit_1_sends_the_second_request_at_least_1_s_later(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_ratelimit_1: the second request arrives no earlier than 1 s after the first."""
    request = authorization_request("tok_ratelimit_1")
    started = time.monotonic()
    assert client.authorize(request).approved is True
    assert time.monotonic() - started >= 1.0
    assert requests_for(sandbox, request) == 2
    first, second = arrival_buckets(sandbox)
    assert second - first >= 900  # 100 ms buckets: a 1 s gap spans at least 900 ms of starts


def test_ratelimit_date_is_read_as_an_http_date(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_ratelimit_date_2: the IMF-fixdate Retry-After is waited for, then approved."""
    request = authorization_request("tok_ratelimit_date_2")
    started = time.monotonic()
    assert client.authorize(request).approved is True
    assert time.monotonic() - started >= 1.0  # the date has whole-second resolution
    assert requests_for(sandbox, request) == 2
    assert client.metrics.get("invalid_header") == 0


def test_ratelimit_30_beyond_the_deadline_fails_at_once(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_ratelimit_30, 8 s deadline: one request, RateLimitedError with retry_after >= 30."""
    request = authorization_request("tok_ratelimit_30")
    started = time.monotonic()
    with pytest.raises(RateLimitedError) as info:
        client.authorize(request)
    assert time.monotonic() - started < 2.0
    assert info.value.retry_after >= 30
    assert info.value.not_before >= datetime.now(UTC) + timedelta(seconds=28)
    assert info.value.attempts == 1
    assert requests_for(sandbox, request) == 1


def test_fail_400_once_is_refused_after_one_request(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_fail_400_1: one request, InvalidRequestError (processed and refused: never retried)."""
    request = authorization_request("tok_fail_400_1")
    with pytest.raises(InvalidRequestError) as info:
        client.authorize(request)
    assert info.value.status_code == 400
    assert requests_for(sandbox, request) == 1


def test_fail_500_once_is_resent_with_the_same_key(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_fail_500_1 (ambiguous): the sandbox honours keys, so it is re-sent and approved."""
    request = authorization_request("tok_fail_500_1")
    assert client.authorize(request).approved is True
    assert requests_for(sandbox, request) == 2
    assert sandbox.stats()["charges_total"] == 1


def test_trickle_is_cut_off_by_the_deadline(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_trickle (1 byte/s): cut off at the 1.5 s deadline, ambiguous; the charge exists."""
    request = authorization_request("tok_trickle")
    started = time.monotonic()
    with pytest.raises(ResponseTimeoutError) as info:
        client.authorize(request, policy=RetryPolicy(deadline=1.5))
    elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 2.5
    assert info.value.status_code == 201
    assert requests_for(sandbox, request) == 1
    assert sandbox.stats()["charges_total"] == 1


def test_reset_after_commit_is_resolved_by_the_replay(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_reset_after_commit: the reset is ambiguous, the re-send replays the one charge."""
    request = authorization_request("tok_reset_after_commit")
    authorization = client.authorize(request)
    assert authorization.approved is True
    assert authorization.replayed is True
    assert requests_for(sandbox, request) == 2
    assert sandbox.stats()["charges_total"] == 1


def test_reset_before_commit_ends_ambiguous_after_three_attempts(
    client: AcquirerClient, sandbox: SandboxProcess
) -> None:
    """tok_reset_before_commit: every attempt reset; ConnectionLostError, 3 requests, no charge."""
    request = authorization_request("tok_reset_before_commit")
    with pytest.raises(ConnectionLostError) as info:
        client.authorize(request)
    assert info.value.attempts == 3
    assert requests_for(sandbox, request) == 3
    assert sandbox.stats()["charges_total"] == 0


def test_outage_load_stays_within_the_retry_budget(sandbox: SandboxProcess) -> None:
    """A 503 outage and 200 payments: acquirer requests <= 1.1 x 200 + the 100-retry reserve."""
    sandbox.set_condition("outage", duration_seconds=60, failure=503)
    refused = 0
    # The budget alone (the breaker would stop the load sooner: test_gateway_breaker_sandbox).
    no_breaker = {"authorize": None}
    with make_client(sandbox, sleep=lambda seconds: None, breakers=no_breaker) as client:
        for _ in range(200):
            try:
                client.authorize(authorization_request("tok_visa"))
            except RetryBudgetExhaustedError:
                refused += 1
            except GatewayError:  # the other failures are 503s: counted below
                pass
    total = sandbox.stats()["requests_total"]
    assert 200 < total <= 1.1 * 200 + 100
    assert refused > 0


def test_exhausted_quota_closes_the_gate_before_a_429(sandbox: SandboxProcess) -> None:
    """Rate limit 2 per window: after the answer with r=0, the third call is not even sent."""
    sandbox.set_condition("rate_limit", limit=2, window_seconds=86400)
    with make_client(sandbox) as client:
        assert client.authorize(authorization_request("tok_visa")).approved is True
        assert client.authorize(authorization_request("tok_visa")).approved is True
        with pytest.raises(RateLimitedError) as info:
            client.authorize(authorization_request("tok_visa"))
    assert info.value.attempts == 0
    assert info.value.wait_source == "gate"
    assert sandbox.stats()["requests_total"] == 2
