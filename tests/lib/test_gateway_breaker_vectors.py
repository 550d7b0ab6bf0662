"""
The vectors of docs/reference/circuit-breaker.md, through AcquirerClient, config C (window 10,
minimum 5 calls, threshold 50 %, open 30 s, 3 half-open permits).

Here on the in-memory store; tests/integration/test_gateway_breaker_redis.py imports the same
tests and runs them on a real Redis by overriding the `make_store` fixture. The clock is a
ManualClock handed to the store and the client (no real time); the acquirer is an
httpx.MockTransport that answers each request from a script: S approved, D declined,
F 503 (a failure), H waits for an event, then approved.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AcquirerUnavailableError,
    AuthorizationRequest,
    BreakerConfig,
    CircuitOpenError,
    ManualClock,
    MemoryStore,
    RetryableError,
    RetryPolicy,
    StateStore,
)
from resilience.metrics import CounterMetrics

#: Config C of docs/reference/circuit-breaker.md.
CONFIG_C = BreakerConfig(
    window_size=10,
    minimum_calls=5,
    failure_rate_threshold=50.0,
    open_duration=30.0,
    half_open_permits=3,
)
START = 1000.0
ONE_ATTEMPT = RetryPolicy(max_attempts=1)

StoreFactory = Callable[[ManualClock], StateStore]


@pytest.fixture
def make_store() -> StoreFactory:
    """The backend under test: here the in-memory store on the test's clock."""
    return lambda clock: MemoryStore(clock.monotonic)


class Upstream(httpx.MockTransport):
    """A scripted acquirer: `script` holds one letter per request (S, D, F or H)."""

    def __init__(self) -> None:
        self.script: deque[str] = deque()
        self.requests: list[httpx.Request] = []
        self.release = threading.Event()
        self.arrived = threading.Condition()
        super().__init__(self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        request.read()
        with self.arrived:
            self.requests.append(request)
            letter = self.script.popleft()
            self.arrived.notify_all()
        if letter == "F":
            return httpx.Response(503, json={"code": "service_unavailable"})
        if letter == "H":
            assert self.release.wait(10), "the test never released the held request"
        if request.method == "GET":
            return httpx.Response(200, json={"data": []})
        body = json.loads(request.content)
        return httpx.Response(
            201,
            json={
                "id": f"ch_{len(self.requests)}",
                "status": "declined" if letter == "D" else "approved",
                "decline_code": "do_not_honor" if letter == "D" else None,
                "amount": body["amount"],
                "currency": body["currency"],
                "reference": body["reference"],
                "created_at": "2019-06-03T11:00:00Z",
            },
        )

    def wait_for(self, count: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=10)


class Harness:
    """A client with config C on the backend under test, its acquirer and its clock."""

    def __init__(self, make_store: StoreFactory, config: BreakerConfig = CONFIG_C) -> None:
        self.clock = ManualClock(start=START)
        self.store = make_store(self.clock)
        self.upstream = Upstream()
        self.metrics = CounterMetrics()
        self.client = AcquirerClient(
            AcquirerConfig(base_url="https://acquirer.test", api_key="sk_vectors", name="acq"),
            transport=self.upstream,
            policy=ONE_ATTEMPT,
            clock=self.clock,
            sleep=self.clock.sleep,
            random=lambda: 0.5,
            store=self.store,
            metrics=self.metrics,
            breakers={"authorize": config, "lookup": config},
        )
        self.calls = 0

    def call(self, letter: str) -> Any:
        """One authorisation answered with `letter`; returns the result or the error."""
        self.upstream.script.append(letter)
        self.calls += 1
        reference = f"pay_{self.calls:04d}"
        request = AuthorizationRequest(
            amount=1000,
            currency="EUR",
            payment_method="tok_visa",
            payment_reference=reference,
            idempotency_key=f"authorize-{reference}",
        )
        try:
            return self.client.authorize(request)
        except RetryableError as error:
            if isinstance(error, CircuitOpenError):
                self.upstream.script.pop()  # never consumed: nothing was sent
            return error

    def calls_of(self, letters: str) -> list[Any]:
        return [self.call(letter) for letter in letters]

    def state(self, group: str = "authorize") -> str:
        return self.client.breaker_state(group).state

    @property
    def sent(self) -> int:
        return len(self.upstream.requests)

    def trip(self) -> None:
        """Five failures: open at the current time."""
        self.calls_of("FFFFF")
        assert self.state() == "open"


@pytest.fixture
def harness(make_store: StoreFactory) -> Iterator[Harness]:
    value = Harness(make_store)
    yield value
    value.upstream.release.set()
    value.client.close()


def test_vector_1_four_failures_stay_closed(harness: Harness) -> None:
    """F,F,F,F: closed (4 < minimum 5), and all 4 calls reached the acquirer."""
    results = harness.calls_of("FFFF")
    assert all(isinstance(result, AcquirerUnavailableError) for result in results)
    assert harness.state() == "closed"
    assert harness.sent == 4


def test_vector_2_five_failures_open_and_the_sixth_is_refused(harness: Harness) -> None:
    """F x 5: open when the 5th result is recorded; the 6th call is refused unsent."""
    harness.calls_of("FFFF")
    assert harness.state() == "closed"
    harness.call("F")
    assert harness.state() == "open"
    sixth = harness.call("S")
    assert isinstance(sixth, CircuitOpenError)
    assert harness.sent == 5


def test_vector_3_forty_percent_stays_closed_fifty_percent_opens(harness: Harness) -> None:
    """S,S,S,F,F: closed (40 %); a 6th result F makes 3/6 = 50 % (inclusive): open."""
    harness.calls_of("SSSFF")
    assert harness.state() == "closed"
    assert harness.client.breaker_state("authorize").failure_rate == 40.0
    harness.call("F")
    assert harness.state() == "open"


def test_vector_4_as_written_opens_at_the_fifth_call_under_config_c(harness: Harness) -> None:
    """Config C: F,F,F,F,S is 4/5 = 80 % at the minimum of 5 calls, so it opens at call 5."""
    # Vector 4 (docs/reference/circuit-breaker.md): F,F,F,F,S,S,S,S,S,S cannot stay closed (min 5,
    # the rule vectors 2 and 3 need) under config C. The next test pins the sliding it describes.
    harness.calls_of("FFFF")
    harness.call("S")
    assert harness.state() == "open"


def test_vector_4_the_window_slides_over_the_last_ten(make_store: StoreFactory) -> None:
    """Minimum 10: F,F,F,F,S x 6 then F x 4 stays closed; the 15th call, F, opens it (5/10)."""
    harness = Harness(make_store, dataclasses.replace(CONFIG_C, minimum_calls=10))
    harness.calls_of("FFFFSSSSSS")
    for letter in "FFFF":
        harness.call(letter)
        assert harness.state() == "closed"
    snapshot = harness.client.breaker_state("authorize")
    assert (snapshot.buffered_calls, snapshot.failed_calls) == (10, 4)
    harness.call("F")
    assert harness.state() == "open"
    assert harness.sent == 15
    harness.client.close()


def test_vector_5_probes_are_admitted_at_exactly_the_open_duration(harness: Harness) -> None:
    """Tripped at t=0: refused at t=10 s and t=29.999 s; at t=30.000 s one probe is sent."""
    harness.trip()
    harness.clock.advance(10)
    at_10 = harness.call("S")
    assert isinstance(at_10, CircuitOpenError)
    assert at_10.retry_after == pytest.approx(20.0)
    harness.clock.advance(19.999)
    at_29_999 = harness.call("S")
    assert isinstance(at_29_999, CircuitOpenError)
    assert at_29_999.retry_after == pytest.approx(0.001)
    assert harness.sent == 5
    harness.clock.advance(0.001)
    probe = harness.call("S")
    assert probe.approved is True
    assert harness.sent == 6


def test_vector_6_half_open_admits_three_of_four_concurrent_callers(harness: Harness) -> None:
    """Half-open, 4 concurrent callers: exactly 3 are sent, the 4th is refused at once."""
    harness.trip()
    harness.clock.advance(30)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(harness.call("H"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    harness.upstream.wait_for(5 + 3)  # the three probes are inside the acquirer
    fourth = harness.call("S")
    assert isinstance(fourth, CircuitOpenError)
    assert fourth.state == "half_open"
    assert harness.client.breaker_state("authorize").half_open_permits_in_use == 3
    harness.upstream.release.set()
    for thread in threads:
        thread.join(10)
    assert [result.approved for result in results] == [True, True, True]
    assert harness.sent == 8
    assert harness.state() == "closed"


def test_vector_7_failed_probes_reopen_with_a_new_wait(harness: Harness) -> None:
    """Half-open probes F,F,S: open again, with a new 30 s wait from the last result."""
    harness.trip()
    harness.clock.advance(30)
    harness.call("F")
    harness.clock.advance(1)
    harness.call("F")
    harness.clock.advance(1)
    harness.call("S")
    assert harness.state() == "open"
    assert harness.client.breaker_state("authorize").seconds_until_half_open == 30.0
    harness.clock.advance(29.999)
    assert isinstance(harness.call("S"), CircuitOpenError)
    harness.clock.advance(0.001)
    assert harness.call("S").approved is True


def test_vector_7_passing_probes_close_with_an_empty_window(harness: Harness) -> None:
    """Half-open probes F,S,S: closed, with an empty window (4 later failures stay closed)."""
    harness.trip()
    harness.clock.advance(30)
    harness.calls_of("FSS")
    assert harness.state() == "closed"
    assert harness.client.breaker_state("authorize").buffered_calls == 0
    harness.calls_of("FFFF")
    assert harness.state() == "closed"


def test_vector_8_declines_are_successes(harness: Harness) -> None:
    """10 declines: closed, failure rate 0 %."""
    results = harness.calls_of("D" * 10)
    assert all(result.approved is False for result in results)
    snapshot = harness.client.breaker_state("authorize")
    assert (snapshot.state, snapshot.failure_rate, snapshot.buffered_calls) == ("closed", 0.0, 10)


def test_vector_9_lookups_keep_working_while_authorize_is_open(harness: Harness) -> None:
    """F x 5 on the authorisation group opens it; the look-up group stays closed and answers."""
    harness.trip()
    harness.upstream.script.append("S")
    assert harness.client.lookup("pay_0001") == []
    assert harness.state("lookup") == "closed"
    assert harness.state("authorize") == "open"


def test_vector_10_a_refused_call_sends_nothing_and_says_when(harness: Harness) -> None:
    """Refused: CircuitOpenError (retryable, 0 attempts), retry_after and not_before set."""
    harness.trip()
    harness.clock.advance(12)
    refused = harness.call("S")
    assert isinstance(refused, CircuitOpenError)
    assert isinstance(refused, RetryableError)
    assert (refused.attempts, refused.group, refused.state) == (0, "authorize", "open")
    assert refused.retry_after == pytest.approx(18.0)
    assert refused.not_before == datetime.fromtimestamp(harness.clock.time() + 18.0, tz=UTC)
    assert refused.wait_source == "breaker"
    assert harness.sent == 5
    assert harness.client.admits("authorize") == (False, pytest.approx(18.0))
