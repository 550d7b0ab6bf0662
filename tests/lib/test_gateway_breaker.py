"""
The circuit breaker beyond docs/reference/circuit-breaker.md: what counts as failure, permits given
back, the retry loop stopping when the breaker opens, generations and late results, leases,
the time window, slow calls, the operator's overrides, transitions logged once, the snapshot
and the client's options. In-memory store, ManualClock, httpx.MockTransport: no sockets, no
real time.
"""

from __future__ import annotations

import json
import logging
import pickle
import re
from collections.abc import Callable
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
    GatewayError,
    ManualClock,
    MemoryStore,
    RateLimitedError,
    RetryPolicy,
    UpstreamServerError,
)
from resilience.breaker import FAILURE, IGNORED, SUCCESS, BreakerSet, CircuitBreaker
from resilience.gate import RateGate, scope_for
from resilience.metrics import CounterMetrics
from tests.lib.test_gateway_breaker_vectors import CONFIG_C

Answer = Callable[[httpx.Request], httpx.Response]
API_KEY = "sk_breaker_test"
ONE_ATTEMPT = RetryPolicy(max_attempts=1)


def approve(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.read())
    return httpx.Response(
        201,
        json={
            "id": "ch_1",
            "status": "approved",
            "decline_code": None,
            "amount": body["amount"],
            "currency": body["currency"],
            "reference": body["reference"],
            "created_at": "2019-06-03T11:00:00Z",
        },
    )


def status(http_status: int, code: str = "x") -> Answer:
    return lambda request: httpx.Response(http_status, json={"code": code})


def raising(exc: BaseException) -> Answer:
    def answer(request: httpx.Request) -> httpx.Response:
        raise exc

    return answer


class Acquirer(httpx.MockTransport):
    """Answers with the queued answers in order (the last one repeats); counts requests."""

    def __init__(self, clock: ManualClock, takes: float = 0.0) -> None:
        self.answers: list[Answer] = [approve]
        self.sent = 0
        self.clock = clock
        self.takes = takes
        self.during: Callable[[], None] | None = None

        def handle(request: httpx.Request) -> httpx.Response:
            self.sent += 1
            self.clock.advance(self.takes)
            if self.during is not None:
                self.during()
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
            return answer(request)

        super().__init__(handle)

    def queue(self, *answers: Answer) -> None:
        self.answers = [*answers, approve]


class Rig:
    """A client (config C unless told otherwise) on an in-memory store and a ManualClock."""

    def __init__(
        self,
        config: BreakerConfig = CONFIG_C,
        policy: RetryPolicy = ONE_ATTEMPT,
        store: MemoryStore | None = None,
        clock: ManualClock | None = None,
        takes: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.clock = clock or ManualClock(start=1000.0)
        self.store = store or MemoryStore(self.clock.monotonic)
        self.acquirer = Acquirer(self.clock, takes)
        self.metrics = CounterMetrics()
        kwargs.setdefault("breakers", {"authorize": config, "lookup": config})
        self.client = AcquirerClient(
            AcquirerConfig(base_url="https://acquirer.test", api_key=API_KEY, name="acq"),
            transport=self.acquirer,
            policy=policy,
            clock=self.clock,
            sleep=self.clock.sleep,
            random=lambda: 0.5,
            store=self.store,
            metrics=self.metrics,
            **kwargs,
        )
        self.calls = 0

    def call(self, *answers: Answer, policy: RetryPolicy | None = None) -> Any:
        if answers:
            self.acquirer.queue(*answers)
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
            return self.client.authorize(request, policy=policy)
        except GatewayError as error:
            return error

    def fail(self, times: int) -> None:
        """`times` calls of one attempt each, answered 503."""
        for _ in range(times):
            self.call(status(503), policy=ONE_ATTEMPT)

    @property
    def breaker(self) -> CircuitBreaker:
        return self.client.breakers["authorize"]

    def snapshot(self):
        return self.client.breaker_state("authorize")


# -- configuration ---------------------------------------------------------------------------


def test_config_defaults_are_the_documented_production_defaults() -> None:
    """BreakerConfig(): count window 50, minimum 20, 50 %, open 30 s, 5 permits, no slow rule."""
    config = BreakerConfig()
    assert (config.window_type, config.window_size, config.minimum_calls) == ("count", 50, 20)
    assert (config.failure_rate_threshold, config.open_duration) == (50.0, 30.0)
    assert (config.half_open_permits, config.slow_call_duration) == (5, None)
    assert (config.max_half_open_duration, config.permit_lease) == (None, 30.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"window_type": "sliding"}, 'window_type must be "count" or "time"'),
        ({"window_size": 0}, "window_size must be an integer >= 1"),
        ({"minimum_calls": 1.5}, "minimum_calls must be an integer >= 1"),
        ({"failure_rate_threshold": 0}, "failure_rate_threshold must be a positive, finite number"),
        (
            {"failure_rate_threshold": 101},
            "failure_rate_threshold is a percentage: 0 < value <= 100",
        ),
        ({"open_duration": float("inf")}, "open_duration must be a finite number of seconds"),
        ({"half_open_permits": 0}, "half_open_permits must be an integer >= 1"),
        ({"slow_call_duration": -1}, "slow_call_duration must be > 0 seconds"),
        ({"max_half_open_duration": 0}, "max_half_open_duration must be > 0 seconds"),
        ({"window_type": "time", "window_size": 7200}, "a time window spans at most 3600 seconds"),
    ],
)
def test_config_rejects_bad_values(changes: dict[str, Any], message: str) -> None:
    """Impossible numbers raise ValueError."""
    with pytest.raises(ValueError, match=re.escape(message)):
        BreakerConfig(**changes)


# -- what is a failure -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        status(500),
        status(502),
        status(503),
        status(504),
        raising(httpx.ReadTimeout("slow")),
        raising(httpx.ConnectError("refused")),
        raising(httpx.ConnectTimeout("no route")),
        raising(httpx.ReadError("reset by peer")),
        raising(httpx.RemoteProtocolError("closed")),
        lambda request: httpx.Response(201, content=b"not json"),
    ],
    ids=[
        "500",
        "502",
        "503",
        "504",
        "read timeout",
        "refused",
        "connect timeout",
        "reset",
        "closed",
        "garbled 2xx",
    ],
)
def test_acquirer_failures_count_as_failures(answer: Answer) -> None:
    """Timeouts, refused/reset connections, 5xx and garbled answers enter the window as F."""
    rig = Rig()
    rig.call(answer)
    snapshot = rig.snapshot()
    assert (snapshot.buffered_calls, snapshot.failed_calls) == (1, 1)


@pytest.mark.parametrize(
    "answer",
    [
        status(400),
        status(401),
        status(403, code="permission_denied"),
        status(404),
        status(409),
        status(422),
        status(429),
        status(403, code="secondary_rate_limit"),
        raising(httpx.PoolTimeout("our pool is full")),
    ],
    ids=["400", "401", "403", "404", "409", "422", "429", "403 rate limit", "pool timeout"],
)
def test_our_own_errors_and_rate_limits_are_ignored(answer: Answer) -> None:
    """4xx, 409, 429 / confirmed 403 and our own pool timeout leave the window empty."""
    rig = Rig()
    rig.call(answer)
    assert rig.snapshot().buffered_calls == 0


def test_declines_and_approvals_are_successes() -> None:
    """2xx answers, declined or approved, enter the window as S."""
    rig = Rig()
    rig.call(approve)
    snapshot = rig.snapshot()
    assert (snapshot.buffered_calls, snapshot.failed_calls, snapshot.failure_rate) == (1, 0, 0.0)


def half_open_with_one_permit() -> Rig:
    rig = Rig(config=BreakerConfig(window_size=10, minimum_calls=5, half_open_permits=1))
    rig.fail(5)
    rig.clock.advance(30)
    return rig


def test_an_ignored_probe_gives_its_permit_back() -> None:
    """Half-open, one permit: a probe answered 400 frees the permit; the next call is a probe."""
    rig = half_open_with_one_permit()
    assert isinstance(rig.call(status(400)), GatewayError)
    assert rig.snapshot().half_open_permits_in_use == 0
    assert rig.call(approve).approved is True
    assert rig.acquirer.sent == 7
    assert rig.snapshot().state == "closed"


def test_a_cancelled_probe_gives_its_permit_back() -> None:
    """An exception that is no acquirer outcome (cancelled by the caller) frees the permit."""
    rig = half_open_with_one_permit()
    with pytest.raises(KeyboardInterrupt):
        rig.call(raising(KeyboardInterrupt()))
    assert rig.snapshot().half_open_permits_in_use == 0
    assert rig.snapshot().state == "half_open"


def test_a_call_stopped_by_the_rate_gate_gives_its_permit_back() -> None:
    """The gate refuses after the breaker admitted a probe: nothing sent, the permit freed."""
    rig = half_open_with_one_permit()
    RateGate(rig.store).close(scope_for("acq"), 120.0)
    assert isinstance(rig.call(approve), RateLimitedError)
    assert rig.snapshot().half_open_permits_in_use == 0
    assert rig.acquirer.sent == 5


# -- the retry loop ----------------------------------------------------------------------------


def test_retry_loop_stops_at_once_when_its_result_opens_the_breaker() -> None:
    """4 failures buffered; a 3-attempt call gets 503: open, no sleep, no second attempt."""
    rig = Rig(policy=RetryPolicy())
    rig.fail(4)
    error = rig.call(status(503), status(503))
    assert isinstance(error, CircuitOpenError)
    assert isinstance(error.__cause__, AcquirerUnavailableError)
    assert (error.attempts, error.retry_after) == (1, 30.0)
    assert rig.clock.sleeps == []
    assert rig.acquirer.sent == 5


def test_retry_is_refused_when_another_process_opened_the_breaker_meanwhile() -> None:
    """First attempt 503; during the backoff another client opens it; the retry is not sent."""
    rig = Rig(policy=RetryPolicy())
    other = CircuitBreaker(rig.store, "authorize", CONFIG_C, name="acq")
    rig.clock.sleep = lambda seconds: other.force_open(actor="test")  # type: ignore[method-assign]
    rig.client._sleep = rig.clock.sleep  # the client took the clock's sleep at construction
    error = rig.call(status(503))
    assert isinstance(error, CircuitOpenError)
    assert (error.attempts, error.state) == (1, "forced_open")
    assert rig.acquirer.sent == 1


def test_breaker_stop_after_an_ambiguous_attempt_raises_the_ambiguous_error() -> None:
    """A 500 (maybe applied) trips the breaker: the call raises the ambiguous 500, not 'open'."""
    rig = Rig(policy=RetryPolicy())
    rig.fail(4)
    error = rig.call(status(500))
    assert isinstance(error, UpstreamServerError)
    assert isinstance(error.__cause__, CircuitOpenError)
    assert rig.snapshot().state == "open"


def test_a_refused_call_earns_no_retry_budget() -> None:
    """Nothing sent, nothing deposited: the budget balance is unchanged by refusals."""
    rig = Rig()
    rig.fail(5)
    before = rig.client.budget.state().balance
    for _ in range(10):
        assert isinstance(rig.call(approve), CircuitOpenError)
    assert rig.client.budget.state().balance == before


def test_the_client_leases_probes_for_the_time_left_plus_a_margin() -> None:
    """A probe's permit lease is the call's remaining deadline (8 s) plus 1 s."""
    rig = Rig()
    leases: list[float | None] = []
    admit = rig.client._state.admit  # the one script taking the permit (and the slot)

    def spy(breaker: Any, *, first: bool, lease: float) -> Any:
        leases.append(lease)
        return admit(breaker, first=first, lease=lease)

    rig.client._state.admit = spy  # type: ignore[method-assign]
    rig.call(approve)
    assert leases == [9.0]


# -- generations and late results ------------------------------------------------------------


def test_a_late_failure_from_before_the_trip_changes_nothing_but_statistics() -> None:
    """A call admitted while closed reports after the breaker opened: counted as late only."""
    clock = ManualClock()
    breaker = CircuitBreaker(MemoryStore(clock.monotonic), "g", CONFIG_C)
    slow_call = breaker.acquire()
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    recorded = breaker.record(slow_call, FAILURE)
    assert (recorded.late, recorded.state) == (True, "open")
    snapshot = breaker.snapshot()
    assert (snapshot.late_results, snapshot.recorded_calls, snapshot.generation) == (1, 6, 1)


def test_a_late_success_cannot_close_a_half_open_breaker() -> None:
    """Half-open: a success from a call admitted before the trip is no probe result."""
    clock = ManualClock()
    breaker = CircuitBreaker(MemoryStore(clock.monotonic), "g", CONFIG_C)
    old = breaker.acquire()
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    clock.advance(30)
    assert breaker.acquire().probe is True
    for _ in range(3):
        breaker.record(old, SUCCESS)
    assert breaker.snapshot().state == "half_open"
    assert breaker.snapshot().buffered_calls == 0


def test_a_result_from_before_an_override_is_late() -> None:
    """Admitted, then force_open and reset: its failure does not enter the new window."""
    clock = ManualClock()
    breaker = CircuitBreaker(MemoryStore(clock.monotonic), "g", CONFIG_C)
    admitted = breaker.acquire()
    breaker.force_open()
    breaker.reset()
    assert breaker.record(admitted, FAILURE).late is True
    assert breaker.snapshot().buffered_calls == 0


# -- leases and half-open --------------------------------------------------------------------


def test_a_probe_permit_expires_with_its_lease() -> None:
    """One permit leased for 5 s and never returned: refused until 5 s later, then a probe."""
    clock = ManualClock()
    breaker = CircuitBreaker(
        MemoryStore(clock.monotonic), "g", BreakerConfig(minimum_calls=5, half_open_permits=1)
    )
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    clock.advance(30)
    lost = breaker.acquire(lease=5.0)
    assert lost.probe is True
    clock.advance(4.999)
    assert breaker.acquire().admitted is False
    clock.advance(0.001)
    replacement = breaker.acquire()
    assert replacement.probe is True
    assert breaker.record(lost, SUCCESS).late is True  # its permit was given to another
    assert breaker.record(replacement, SUCCESS).state == "closed"


def test_half_open_refusal_suggests_a_short_wait() -> None:
    """Every permit in use: refused with retry_after 1 s (the probes decide soon)."""
    rig = half_open_with_one_permit()
    assert rig.breaker.acquire().probe is True
    refused = rig.call(approve)
    assert isinstance(refused, CircuitOpenError)
    assert (refused.state, refused.retry_after) == ("half_open", 1.0)


def test_half_open_longer_than_its_maximum_opens_again() -> None:
    """max_half_open_duration 10 s: a probe result in, 10 s pass: open with a new wait."""
    config = BreakerConfig(window_size=10, minimum_calls=5, max_half_open_duration=10.0,
                           half_open_permits=3)  # fmt: skip
    rig = Rig(config=config)
    rig.fail(5)
    rig.clock.advance(30)
    rig.call(approve)
    rig.clock.advance(9.999)
    assert rig.client.admits("authorize") == (True, 0.0)
    rig.clock.advance(0.001)
    refused = rig.call(approve)
    assert isinstance(refused, CircuitOpenError)
    assert (refused.state, refused.retry_after) == ("open", 30.0)


def test_an_ignored_result_gives_back_only_its_own_permit() -> None:
    """Two probes out; one ignored: one permit in use remains."""
    clock = ManualClock()
    breaker = CircuitBreaker(MemoryStore(clock.monotonic), "g", CONFIG_C)
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    clock.advance(30)
    first, second = breaker.acquire(), breaker.acquire()
    breaker.record(first, IGNORED)
    assert breaker.snapshot().half_open_permits_in_use == 1
    assert second.probe is True


# -- time window and slow calls --------------------------------------------------------------


def test_time_window_forgets_results_older_than_its_span() -> None:
    """Time window 10 s, minimum 5: 4 F, 10 s later 4 F (the first 4 expired): closed; F: open."""
    rig = Rig(config=BreakerConfig(window_type="time", window_size=10, minimum_calls=5))
    rig.fail(4)
    rig.clock.advance(10)
    rig.fail(4)
    assert (rig.snapshot().state, rig.snapshot().buffered_calls) == ("closed", 4)
    rig.fail(1)
    assert rig.snapshot().state == "open"


def test_time_window_rate_counts_successes_within_the_span() -> None:
    """Time window 10 s: S x 6 then F x 5 within 3 s: 5/11 < 50 %, closed; one more F: open."""
    rig = Rig(config=BreakerConfig(window_type="time", window_size=10, minimum_calls=5))
    for _ in range(6):
        rig.call(approve)
    rig.clock.advance(3)
    rig.fail(5)
    assert rig.snapshot().state == "closed"
    rig.fail(1)
    assert rig.snapshot().state == "open"


def test_slow_calls_open_the_breaker_when_configured() -> None:
    """Slow threshold 2 s at 50 %: five approvals taking 3 s each open the breaker."""
    config = BreakerConfig(window_size=10, minimum_calls=5, slow_call_duration=2.0,
                           slow_call_rate_threshold=50.0)  # fmt: skip
    rig = Rig(config=config, takes=3.0)
    for _ in range(4):
        assert rig.call(approve).approved is True
    assert rig.snapshot().slow_call_rate == 100.0
    rig.call(approve)
    assert rig.snapshot().state == "open"


def test_slow_calls_are_not_judged_without_a_threshold() -> None:
    """Default config (no slow rule): slow approvals are plain successes."""
    rig = Rig(config=BreakerConfig(window_size=10, minimum_calls=5), takes=3.0)
    for _ in range(6):
        rig.call(approve)
    assert (rig.snapshot().state, rig.snapshot().slow_calls) == ("closed", 0)


# -- the operator's overrides ----------------------------------------------------------------


def test_forced_open_refuses_every_call_with_the_open_duration_as_hint() -> None:
    """force_open: refused (state forced_open, retry_after 30 s), nothing sent, until reset."""
    rig = Rig()
    rig.client.breakers.force_open("authorize", actor="alice", reason="incident 42")
    assert rig.client.admits("authorize") == (False, 30.0)
    refused = rig.call(approve)
    assert isinstance(refused, CircuitOpenError)
    assert (refused.state, refused.retry_after) == ("forced_open", 30.0)
    assert rig.snapshot().override == "forced_open"
    rig.client.breakers.reset("authorize", actor="alice")
    assert rig.call(approve).approved is True
    assert rig.acquirer.sent == 1


def test_disabled_admits_every_call_and_records_nothing() -> None:
    """disable: 10 failures are all sent, nothing buffered, never opens."""
    rig = Rig()
    rig.client.breakers.disable("authorize", actor="bob")
    rig.fail(10)
    snapshot = rig.snapshot()
    assert (snapshot.state, snapshot.buffered_calls, rig.acquirer.sent) == ("disabled", 0, 10)


def test_metrics_only_measures_but_never_opens() -> None:
    """metrics_only: 10 failures all sent, the rate is 100 %, the state stays metrics_only."""
    rig = Rig()
    rig.client.breakers.metrics_only("authorize", actor="bob")
    rig.fail(10)
    snapshot = rig.snapshot()
    assert (snapshot.state, snapshot.failure_rate, rig.acquirer.sent) == ("metrics_only", 100, 10)


def test_reset_closes_an_open_breaker_with_an_empty_window() -> None:
    """reset: closed at once, generation moved on, window empty."""
    rig = Rig()
    rig.fail(5)
    snapshot = rig.client.breakers.reset("authorize", actor="carol", reason="acquirer fixed")
    assert (snapshot.state, snapshot.buffered_calls, snapshot.generation) == ("closed", 0, 2)
    assert rig.call(approve).approved is True


def test_operator_actions_are_logged_with_actor_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each override is one WARNING naming the action, the actor, the reason and the states."""
    rig = Rig()
    caplog.set_level(logging.INFO, logger="gateway_client.breaker")
    rig.client.breakers.force_open("authorize", actor="alice", reason="incident 42")
    [record] = [r for r in caplog.records if r.name == "gateway_client.breaker"]
    assert record.levelno == logging.WARNING
    assert "force_open by alice (incident 42): closed -> forced_open" in record.getMessage()
    assert record.gateway_breaker_actor == "alice"  # type: ignore[attr-defined]
    assert rig.metrics.get("breaker_operator_actions", action="force_open") == 1


# -- transitions: logged once, counted -------------------------------------------------------


def test_each_transition_is_logged_once_across_clients(caplog: pytest.LogCaptureFixture) -> None:
    """Two clients on one store trip the breaker together: one 'closed -> open' line, one count."""
    first = Rig()
    second = Rig(store=first.store, clock=first.clock)
    caplog.set_level(logging.INFO, logger="gateway_client.breaker")
    for _ in range(3):
        first.fail(1)
        second.fail(1)
    opened = [r for r in caplog.records if "closed -> open" in r.getMessage()]
    assert len(opened) == 1
    counts = [
        rig.metrics.get("breaker_transitions", from_state="closed", to_state="open")
        for rig in (first, second)
    ]
    assert sorted(counts) == [0, 1]


def test_a_full_cycle_counts_every_transition() -> None:
    """closed -> open -> half_open -> closed: three transitions counted, generation 3."""
    rig = Rig()
    rig.fail(5)
    rig.clock.advance(30)
    for _ in range(3):
        rig.call(approve)
    get = rig.metrics.get
    assert get("breaker_transitions", from_state="closed", to_state="open") == 1
    assert get("breaker_transitions", from_state="open", to_state="half_open") == 1
    assert get("breaker_transitions", from_state="half_open", to_state="closed") == 1
    assert rig.snapshot().generation == 3


def test_the_opening_log_line_gives_the_rate_and_the_wait(caplog: pytest.LogCaptureFixture) -> None:
    """'closed -> open (failures 5 of 5, 100.0 %) ... probes in 30.000 s', with extras."""
    rig = Rig()
    caplog.set_level(logging.WARNING, logger="gateway_client.breaker")
    rig.fail(5)
    [record] = [r for r in caplog.records if r.name == "gateway_client.breaker"]
    assert "closed -> open (failures 5 of 5, 100.0 %)" in record.getMessage()
    assert "probes in 30.000 s" in record.getMessage()
    assert record.gateway_breaker_group == "authorize"  # type: ignore[attr-defined]
    assert record.gateway_breaker_failure_rate == 100.0  # type: ignore[attr-defined]


# -- snapshot and pre-check ------------------------------------------------------------------


def test_snapshot_reports_state_rate_counts_and_wait() -> None:
    """Open 12 s ago after 5 F, 2 calls refused: every field says so."""
    rig = Rig()
    rig.fail(5)
    rig.clock.advance(12)
    rig.call(approve)
    rig.call(approve)
    snapshot = rig.snapshot()
    assert snapshot.as_dict() == {
        "name": "acq",
        "group": "authorize",
        "state": "open",
        "generation": 1,
        "failure_rate": None,
        "slow_call_rate": None,
        "buffered_calls": 0,
        "failed_calls": 0,
        "slow_calls": 0,
        "minimum_calls": 5,
        "refused_calls": 2,
        "seconds_until_half_open": pytest.approx(18.0),
        "seconds_in_state": pytest.approx(12.0),
        "half_open_permits_in_use": 0,
        "override": None,
        "store": "memory",
        "recorded_calls": 5,
        "recorded_failures": 5,
        "late_results": 0,
    }


def test_breaker_set_snapshot_has_every_group() -> None:
    """One snapshot per group; the other groups are unaffected by authorisation failures."""
    rig = Rig()
    rig.fail(5)
    snapshots = rig.client.breakers.snapshot()
    assert {group: s.state for group, s in snapshots.items()} == {
        "authorize": "open",
        "capture": "closed",
        "void": "closed",
        "refund": "closed",
        "lookup": "closed",
    }


def test_admits_takes_no_permit() -> None:
    """Half-open with one permit: admits() says yes any number of times; a call takes it."""
    rig = half_open_with_one_permit()
    for _ in range(5):
        assert rig.client.admits("authorize") == (True, 0.0)
    assert rig.breaker.acquire().probe is True
    assert rig.client.admits("authorize") == (False, 1.0)


def test_admits_reuses_only_a_recent_yes_and_the_call_is_still_refused() -> None:
    """fresh_within: a True read at most that long ago is answered again without the store,
    so a breaker that opened meanwhile still reads as admitting for that long (the routing
    pre-check's window); a call sent then is refused unsent by the attempt's own admission.
    A False is never reused, and without fresh_within every pre-check reads the store."""
    rig = Rig()
    assert rig.client.admits("authorize", fresh_within=0.25) == (True, 0.0)
    rig.fail(5)  # opens the breaker in the store
    assert rig.snapshot().state == "open"
    assert rig.client.admits("authorize", fresh_within=0.25) == (True, 0.0)  # reused
    assert isinstance(rig.call(status(201)), CircuitOpenError)  # refused unsent
    assert rig.acquirer.sent == 5  # only the five failures reached the acquirer
    rig.clock.advance(0.3)
    assert rig.client.admits("authorize", fresh_within=0.25)[0] is False  # too old: read
    assert rig.client.admits("authorize", fresh_within=0.25)[0] is False  # a no: read again

    plain = Rig()
    assert plain.client.admits("authorize") == (True, 0.0)
    plain.fail(5)
    assert plain.client.admits("authorize")[0] is False  # no fresh_within: always read


def test_admits_counts_no_refusal() -> None:
    """A pre-check on an open breaker does not add to refused_calls."""
    rig = Rig()
    rig.fail(5)
    rig.client.admits("authorize")
    assert rig.snapshot().refused_calls == 0


# -- the client's options ----------------------------------------------------------------------


def test_default_client_has_production_breakers_for_every_group() -> None:
    """AcquirerClient(config): authorize, capture, void, refund and lookup with BreakerConfig()."""
    client = AcquirerClient(AcquirerConfig(base_url="https://acquirer.test", api_key=API_KEY))
    assert {group: b.config for group, b in client.breakers.items()} == {
        "authorize": BreakerConfig(),
        "capture": BreakerConfig(),
        "void": BreakerConfig(),
        "refund": BreakerConfig(),
        "lookup": BreakerConfig(),
    }
    assert all(client.admits(group) == (True, 0.0) for group in client.breakers)


def test_a_mapping_replaces_only_the_named_groups() -> None:
    """breakers={"authorize": C}: lookup keeps the default; a group mapped to None has none."""
    client = AcquirerClient(
        AcquirerConfig(base_url="https://acquirer.test", api_key=API_KEY),
        breakers={"authorize": CONFIG_C, "lookup": None},
    )
    assert client.breakers["authorize"].config == CONFIG_C
    assert "lookup" not in client.breakers
    assert client.admits("lookup") == (True, 0.0)
    with pytest.raises(KeyError):
        client.breaker_state("lookup")


def test_a_breaker_set_is_used_as_given() -> None:
    """A BreakerSet (its own store and metrics) is the client's, unchanged."""
    breakers = BreakerSet(MemoryStore(), {"authorize": CONFIG_C}, name="acq")
    client = AcquirerClient(
        AcquirerConfig(base_url="https://acquirer.test", api_key=API_KEY), breakers=breakers
    )
    assert client.breakers is breakers


def test_circuit_open_error_survives_pickling() -> None:
    """CircuitOpenError keeps its group, state and wait through pickle (task queues)."""
    rig = Rig()
    rig.fail(5)
    error = rig.call(approve)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.group, copy.state, copy.retry_after) == (
        CircuitOpenError,
        "authorize",
        "open",
        30.0,
    )


def test_a_refused_call_is_logged_as_circuit_open(caplog: pytest.LogCaptureFixture) -> None:
    """The refused call's log event says decision=raise, stop reason circuit_open."""
    rig = Rig()
    rig.fail(5)
    caplog.set_level(logging.INFO, logger="gateway_client")
    caplog.clear()
    rig.call(approve)
    [record] = [r for r in caplog.records if r.name == "gateway_client"]
    assert record.gateway_stop_reason == "circuit_open"  # type: ignore[attr-defined]
    assert record.gateway_breaker_state == "open"  # type: ignore[attr-defined]


def test_open_duration_boundary_holds_at_a_time_with_sub_microsecond_digits() -> None:
    """Tripped at t = 1000.1234567891 s (jittered sleeps make such times): admitted at t + 30."""
    clock = ManualClock(start=1000.1234567891)
    breaker = CircuitBreaker(MemoryStore(clock.monotonic), "g", CONFIG_C)
    for _ in range(5):
        breaker.record(breaker.acquire(), FAILURE)
    clock.advance(29.9999)
    assert breaker.acquire().admitted is False
    clock.advance(0.0001)
    assert breaker.acquire().probe is True
