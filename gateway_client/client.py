"""
The acquirer client: each call is a short series of classified attempts that never makes an
outage worse.

For every call (`authorize`, `lookup`), under a RetryPolicy (policy.py):

1. Before each request, the quota scope's rate gate is read (gate.py). Closed ("not before
   T", set by any process sharing the store): wait for T plus jitter if that fits in the
   deadline and in `max_server_wait`; otherwise fail at once with `RateLimitedError`
   carrying the full wait and `not_before`, without sending.
2. The request is sent with per-attempt timeouts cut to the time left before the deadline;
   the whole answer must arrive before the deadline (deadline.py cuts a trickling answer).
3. The outcome is classified (classify.py). A result is returned. Permanent errors are raised.
   Ambiguous outcomes (500, 502, 504, read timeout, reset, garbled answer, 409) are retried
   only when the call carries an idempotency key, the acquirer honours keys
   (`AcquirerConfig.honours_idempotency_keys`) and the policy allows it (`retry_ambiguous`);
   a look-up (GET) is always safe to repeat. The same idempotency key goes on every attempt.
4. The wait before the next attempt: the server's wait (Retry-After, then the quota headers,
   see quota.py; or the gate) is a floor, and full jitter uniform(0, min(cap, base * 2**n))
   is added after it (n = 0 for the first retry). A server wait also closes the scope's gate
   for every process. If the server's wait exceeds `max_server_wait` or the time left, no
   sleep and no retry: the error is raised with the full wait (`retry_after`) and
   `not_before`. If elapsed + wait would leave less than `min_attempt_time` before the
   deadline (tenacity's stop_before_delay, with a margin), the last error is raised.
5. Every retry takes a token from the acquirer's retry budget (budget.py); an empty budget
   fails at once with `RetryBudgetExhaustedError` and never blocks.
6. Once an attempt was ambiguous, the call's error is ambiguous whatever later attempts say.
7. Before each attempt, the circuit breaker of the operation's endpoint group (breaker.py;
   `authorize` for POST /charges, `lookup` for GET /charges) admits it or refuses it:
   refused, nothing is sent and the call raises `CircuitOpenError` with `retry_after` = time
   until probes are admitted. Every attempt's outcome is recorded (failures: connection
   failures, timeouts, resets, 5xx, garbled answers; successes: 2xx, declines included;
   ignored: 4xx, rate limits, a pool timeout, a cancelled call). When a result leaves the
   breaker open, the retry loop stops at once (no sleep) with `CircuitOpenError` (or the
   ambiguous error of an earlier attempt). `admits(group)` is a cheap pre-check that takes no
   permit; `breaker_state(group)` and `breakers.snapshot()` read the state; the operator's
   `breakers.force_open/disable/metrics_only/reset(group, actor=..., reason=...)`.
8. Before each attempt, a concurrency slot of the quota scope is taken from the AIMD limiter
   (aimd.py), waiting at most `policy.concurrency_wait`; none free: `ConcurrencyLimitedError`,
   nothing sent. A rate-limit answer lowers the scope's limit, a success at high concurrency
   raises it.

Order before each attempt: breaker, rate gate, (first attempt: budget deposit), concurrency
slot, send.

Logging: one event per attempt on the `gateway_client` logger (INFO for a result, WARNING for
an error), with `extra` fields named `gateway_*`: operation, acquirer, scope, reference,
attempt, status, outcome, elapsed (this attempt) and call_elapsed, decision (return, retry,
raise) and stop reason, the chosen wait and its source (retry-after, quota-header, gate,
backoff), the server's wait and the rate headers seen, the retry budget and the gate state.
Never the API key, the Authorization header, the card token or a body. `log.JsonFormatter`
renders these as one JSON object per line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random as _random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx

from . import aimd as _aimd
from . import breaker as _breaker
from . import deadline as _deadline
from .aimd import AimdConfig, AimdLimiter, Slot
from .backoff import full_jitter
from .breaker import BreakerConfig, BreakerSet, BreakerSnapshot, Recorded
from .budget import BudgetState, RetryBudget
from .classify import classify_exception, classify_status, error_code
from .clock import Clock, SystemClock
from .errors import (
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    AuthenticationError,
    CircuitOpenError,
    ConcurrencyLimitedError,
    ConnectionFailedError,
    GatewayError,
    IdempotencyConflictError,
    MalformedResponseError,
    PermanentError,
    RateLimitedError,
    ResponseTimeoutError,
    RetryableError,
    RetryBudgetExhaustedError,
)
from .gate import RateGate, scope_for
from .metrics import CounterMetrics, Metrics
from .policy import RetryPolicy
from .quota import QUOTA_HEADER, RETRY_AFTER, ServerWait, quota_profile
from .retry_after import MAX_DELAY_SECONDS
from .store import MemoryStore, StateStore
from .types import AcquirerConfig, Authorization, AuthorizationRequest
from .wire import MalformedBody, decode_charge, decode_charge_list, encode_authorization

__all__ = ["AcquirerClient"]

logger = logging.getLogger("gateway_client")

T = TypeVar("T")

USER_AGENT = "payment-service-gateway-client/0.2"

# An answer larger than this is not a charge (or a list of them): it is read no further.
MAX_BODY_BYTES = 1024 * 1024

_DESCRIPTIONS: dict[str, str] = {
    "ConnectionFailedError": "could not connect",
    "ResponseTimeoutError": "timed out waiting for the answer",
    "ConnectionLostError": "connection lost before a complete answer",
    "MalformedResponseError": "the answer could not be decoded",
    "InvalidRequestError": "the request could not be sent as valid HTTP",
}

#: Wait sources, as logged in `gateway_wait_source`.
BACKOFF = "backoff"
GATE = "gate"

# Waits for the gate before one attempt, at most (each is a floor another process may extend;
# a bound keeps a clock that does not move with `sleep` from looping forever).
_MAX_GATE_WAITS = 3

# Two waits closer than this (seconds) are the same wait read twice (the answer's and the gate
# it just closed), not a longer gate set by another process.
_SAME_WAIT = 0.001

# A breaker permit or a concurrency slot is leased for the call's time left plus this margin
# (seconds): a caller killed mid-call frees it soon after its deadline.
_LEASE_MARGIN = 1.0

#: The wait suggested when no concurrency slot was free (seconds).
CONCURRENCY_RETRY_AFTER = 1.0

#: Wait sources of the breaker and the concurrency limiter.
BREAKER = "breaker"
CONCURRENCY = "concurrency"


@dataclass(frozen=True, slots=True)
class _Call:
    """What one attempt is about: enough to label its errors and its log lines."""

    operation: str
    reference: str
    idempotency_key: str | None
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class _Answer:
    status_code: int
    headers: httpx.Headers
    body: bytes | None  # None: the body could not be read (the status still counts)


@dataclass(slots=True)
class _Attempt:
    """The outcome of one attempt, as the retry loop needs it."""

    error: GatewayError | None
    status_code: int | None
    started: float
    server_wait: ServerWait | None = None
    result: Any = None
    breaker: Recorded | None = None


@dataclass(slots=True)
class _Progress:
    """The running state of one call."""

    operation: str
    reference: str
    idempotency_key: str | None
    policy: RetryPolicy
    started: float
    deadline: float
    attempts: int = 0
    ambiguous: GatewayError | None = None
    budget: BudgetState | None = None
    gate_waited: float = 0.0
    log: dict[str, Any] = field(default_factory=dict)


class _BodyTooLarge(Exception):
    pass


class _DeadlineReached(Exception):
    pass


class _Stop(Exception):
    """Internal: end the call by raising `error`; `reason` and `attempt` go to the log."""

    def __init__(self, error: GatewayError, reason: str, attempt: _Attempt | None = None) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason
        self.attempt = attempt


class AcquirerClient:
    """
    Client for the upstream card acquirer (`POST /charges`, `GET /charges?reference=`).

    Arguments (all but `config` keyword-only):
        config: the AcquirerConfig (URL, key, timeouts, key honouring, quota profile).
        transport: replaces the network (e.g. `httpx.MockTransport` in tests); None uses a
            real HTTP transport whose sockets honour each call's deadline.
        policy: the default RetryPolicy of every call; None: `RetryPolicy()` with the
            config's connect and read timeouts.
        store: where the rate gate and the retry budget live (store.py); None: an in-memory
            store on this client's clock (one process). Use a RedisStore to share them.
        budget: the retry budget; None: `RetryBudget(store, config.name)` with its defaults.
        clock: monotonic and wall-clock readings (clock.py); None: the system clocks.
        sleep: called with seconds to wait; None: `time.sleep`.
        random: returns a float in [0, 1) for the jitter; None: a private `random.Random`.
        metrics: counter hook (metrics.py); None: in-memory counters in `client.metrics`.
        breakers: the circuit breakers by endpoint group (breaker.py): a BreakerSet, or a
            mapping group -> BreakerConfig (groups not named keep the production default;
            a group mapped to None has no breaker); None: `authorize` and `lookup` with the
            production default `BreakerConfig()`, in `store`.
        limiter: the AIMD concurrency limiter of the quota scope (aimd.py): an AimdLimiter,
            or an AimdConfig for one in `store`; None: `AimdConfig()` in `store`.

    Thread-safe: one `httpx.Client` (with its connection pool) is shared by concurrent calls.
    Use as a context manager, or call `close()`.
    """

    def __init__(
        self,
        config: AcquirerConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        policy: RetryPolicy | None = None,
        store: StateStore | None = None,
        budget: RetryBudget | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
        random: Callable[[], float] | None = None,
        metrics: Metrics | None = None,
        breakers: BreakerSet | Mapping[str, BreakerConfig | None] | None = None,
        limiter: AimdLimiter | AimdConfig | None = None,
    ) -> None:
        if not isinstance(config, AcquirerConfig):
            raise TypeError("config must be an AcquirerConfig")
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise TypeError("policy must be a RetryPolicy")
        self._config = config
        self._policy = policy or RetryPolicy(
            connect_timeout=config.connect_timeout, read_timeout=config.read_timeout
        )
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._sleep = sleep if sleep is not None else time.sleep
        self._random = random if random is not None else _random.Random().random  # noqa: S311
        self.metrics: Metrics = metrics if metrics is not None else CounterMetrics()
        self.store: StateStore = (
            store if store is not None else MemoryStore(clock=self._clock.monotonic)
        )
        self.budget = budget if budget is not None else RetryBudget(self.store, config.name)
        self.gate = RateGate(self.store)
        self.scope = scope_for(config.name, config.api_key, config.rate_scope)
        self.breakers = self._build_breakers(breakers)
        if isinstance(limiter, AimdLimiter):
            self.limiter = limiter
        elif limiter is None or isinstance(limiter, AimdConfig):
            self.limiter = AimdLimiter(
                self.store,
                limiter,
                metrics=self.metrics,
                sleep=self._sleep,
                monotonic=self._clock.monotonic,
            )
        else:
            raise TypeError("limiter must be an AimdLimiter, an AimdConfig or None")
        self._profile = quota_profile(config.quota_profile)
        self._charges_url = config.base_url.rstrip("/") + "/charges"
        self._deadline_sockets = False
        if transport is None:
            # Handed its config: no proxies, certificates or .netrc from the environment.
            transport = httpx.HTTPTransport(trust_env=False)
            self._deadline_sockets = _deadline.install(transport)
        self._http = httpx.Client(
            transport=transport,
            timeout=httpx.Timeout(
                connect=self._policy.connect_timeout,
                read=self._policy.read_timeout,
                write=self._policy.read_timeout,
                pool=self._policy.connect_timeout,
            ),
            headers={
                "Authorization": f"Bearer {config.api_key}",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            },
            follow_redirects=False,
            trust_env=False,
        )

    @property
    def config(self) -> AcquirerConfig:
        """The configuration this client was built with."""
        return self._config

    @property
    def policy(self) -> RetryPolicy:
        """The default RetryPolicy of this client's calls."""
        return self._policy

    def __repr__(self) -> str:
        return f"AcquirerClient(name={self._config.name!r}, base_url={self._config.base_url!r})"

    # -- the circuit breakers ----------------------------------------------------------------

    def admits(self, group: str) -> tuple[bool, float]:
        """
        Would the breaker of `group` ("authorize", "lookup") admit a call now? Returns
        `(True, 0.0)` or `(False, retry_after)`: seconds until probes are admitted. Takes no
        permit and writes nothing: the API's pre-check before it stores anything. A group
        without a breaker always admits.
        """
        breaker = self.breakers.get(group)
        if breaker is None:
            return True, 0.0
        return breaker.admits()

    def breaker_state(self, group: str) -> BreakerSnapshot:
        """The snapshot of the breaker of `group` (KeyError if it has none)."""
        return self.breakers[group].snapshot()

    def _build_breakers(
        self, breakers: BreakerSet | Mapping[str, BreakerConfig | None] | None
    ) -> BreakerSet:
        if isinstance(breakers, BreakerSet):
            return breakers
        configs: dict[str, BreakerConfig | None] = dict.fromkeys(
            _breaker.DEFAULT_GROUPS, BreakerConfig()
        )
        if breakers is not None:
            if not isinstance(breakers, Mapping):
                raise TypeError("breakers must be a BreakerSet, a mapping or None")
            configs.update(breakers)
        chosen = {group: config for group, config in configs.items() if config is not None}
        return BreakerSet(self.store, chosen, name=self._config.name, metrics=self.metrics)

    # -- public operations -------------------------------------------------------------------

    def authorize(
        self, request: AuthorizationRequest, *, policy: RetryPolicy | None = None
    ) -> Authorization:
        """
        Ask the acquirer to authorise `request`, retrying under `policy` (default: the
        client's) with the request's idempotency key on every attempt.

        Returns the Authorization, approved or declined (a decline is a result). Raises a
        GatewayError subclass: RetryableError (not applied; `retry_after`/`not_before` when a
        wait is known; RetryBudgetExhaustedError when the budget refused a retry),
        AmbiguousOutcomeError (maybe applied: reconcile) or PermanentError (refused).
        """
        if not isinstance(request, AuthorizationRequest):
            raise TypeError("request must be an AuthorizationRequest")
        body = encode_authorization(request)

        def build(timeout: httpx.Timeout) -> httpx.Request:
            return self._http.build_request(
                "POST",
                self._charges_url,
                content=body,
                headers={
                    "Content-Type": "application/json",
                    "Idempotency-Key": request.idempotency_key,
                },
                timeout=timeout,
            )

        def decode(answer: _Answer) -> Authorization:
            replayed = answer.headers.get("idempotent-replayed", "").strip().lower() == "true"
            authorization = decode_charge(answer.body or b"", replayed=replayed)
            for name in ("amount", "currency", "reference"):
                if getattr(authorization, name) != getattr(request, name):
                    raise MalformedBody(f"the charge does not match the request ({name})")
            return authorization

        progress = self._start("authorize", request.reference, request.idempotency_key, policy)
        return self._call(progress, build, decode, _authorization_outcome)

    def lookup(self, reference: str, *, policy: RetryPolicy | None = None) -> list[Authorization]:
        """
        Return the acquirer's charges for our `reference` (may be empty), retrying under
        `policy` (a GET: every failure but a permanent one is safe to repeat).

        Raises the same GatewayError subclasses as `authorize`.
        """
        if not isinstance(reference, str) or not reference:
            raise ValueError("reference must be a non-empty string")

        def build(timeout: httpx.Timeout) -> httpx.Request:
            return self._http.build_request(
                "GET", self._charges_url, params={"reference": reference}, timeout=timeout
            )

        def decode(answer: _Answer) -> list[Authorization]:
            authorizations = decode_charge_list(answer.body or b"")
            if any(item.reference != reference for item in authorizations):
                raise MalformedBody("a listed charge has another reference")
            return authorizations

        progress = self._start("lookup", reference, None, policy)
        return self._call(progress, build, decode, lambda _: "ok")

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

    # -- the retry loop ----------------------------------------------------------------------

    def _start(
        self, operation: str, reference: str, key: str | None, policy: RetryPolicy | None
    ) -> _Progress:
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise TypeError("policy must be a RetryPolicy")
        chosen = policy or self._policy
        started = self._clock.monotonic()
        return _Progress(operation, reference, key, chosen, started, started + chosen.deadline)

    def _call(
        self,
        progress: _Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[_Answer], T],
        outcome: Callable[[T], str],
    ) -> T:
        last: GatewayError | None = None
        try:
            while True:
                progress.log = {}
                attempt = self._guarded_attempt(progress, build, decode, last)
                if attempt.error is None:
                    self._log_attempt(progress, attempt, outcome(attempt.result), "return")
                    result = attempt.result
                    if isinstance(result, Authorization):
                        result = dataclasses.replace(result, attempts=progress.attempts)
                    return result  # type: ignore[no-any-return]
                error = last = attempt.error
                if isinstance(error, AmbiguousOutcomeError):
                    progress.ambiguous = error
                reason = self._stop_reason(progress, error)
                if reason is not None:
                    raise _Stop(self._final(progress, error), reason, attempt)
                if attempt.breaker is not None and attempt.breaker.refusing:
                    # The breaker opened (here or elsewhere): no sleep, no retry.
                    refused = self._circuit_error(
                        progress, attempt.breaker.state, attempt.breaker.retry_after, error
                    )
                    raise _Stop(self._final(progress, refused), "circuit_open", attempt)
                wait, source = self._next_wait(progress, attempt)
                progress.log.update(wait=wait, wait_source=source)
                allowed, progress.budget = self.budget.try_withdraw()
                if not allowed:
                    self.metrics.increment("budget_exhausted", operation=progress.operation)
                    raise _Stop(self._budget_error(progress, error), "budget", attempt)
                self.metrics.increment(
                    "retries", operation=progress.operation, reason=type(error).__name__
                )
                self._log_attempt(progress, attempt, type(error).__name__, "retry")
                self._sleep(wait)
        except _Stop as stop:
            if stop.attempt is not None:
                outcome_name = type(stop.attempt.error).__name__
                self._log_attempt(progress, stop.attempt, outcome_name, "raise", stop.reason)
            else:
                self._log_stop(progress, stop)
            raise stop.error from stop.error.__cause__

    def _guarded_attempt(
        self,
        progress: _Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[_Answer], Any],
        last: GatewayError | None,
    ) -> _Attempt:
        """Breaker, gate, budget deposit (first attempt), concurrency slot, then one attempt."""
        breaker = self.breakers.get(progress.operation)
        admission = None
        if breaker is not None:
            admission = breaker.acquire(lease=self._lease(progress))
            progress.log["breaker"] = admission.state
            if not admission.admitted:
                refused = self._circuit_error(
                    progress, admission.state, admission.retry_after, last
                )
                raise _Stop(self._final(progress, refused), "circuit_open")
        settled = False
        try:
            self._wait_for_gate(progress, last=last)
            if progress.attempts == 0:
                progress.budget = self.budget.record_request()
            elif last is not None and self._elapsed(progress) >= progress.policy.deadline:
                raise _Stop(self._final(progress, last), "deadline")  # a slow sleep
            slot = self._take_slot(progress, last)
            try:
                attempt = self._attempt(progress, build, decode)
            except BaseException:
                self.limiter.release(slot, _aimd.IGNORE)  # cancelled or a bug: no verdict
                raise
            self.limiter.release(slot, _limiter_outcome(attempt.error))
            settled = True
            if breaker is not None and admission is not None:
                attempt.breaker = breaker.record(
                    admission,
                    _breaker_outcome(attempt.error),
                    duration=self._clock.monotonic() - attempt.started,
                )
                progress.log["breaker"] = attempt.breaker.state
            return attempt
        finally:
            if not settled and breaker is not None and admission is not None:
                breaker.release(admission)  # nothing sent, or cancelled: the permit goes back

    def _lease(self, progress: _Progress) -> float:
        return max(0.0, progress.deadline - self._clock.monotonic()) + _LEASE_MARGIN

    def _take_slot(self, progress: _Progress, last: GatewayError | None) -> Slot:
        """A concurrency slot of the scope, waiting briefly; raises _Stop if none is free."""
        policy = progress.policy
        left = progress.deadline - self._clock.monotonic() - policy.min_attempt_time
        wait = max(0.0, min(policy.concurrency_wait, left))
        slot = self.limiter.acquire(self.scope, wait=wait, lease=self._lease(progress))
        if slot is not None:
            return slot
        limit = self.limiter.snapshot(self.scope).limit
        error = ConcurrencyLimitedError(
            f"{progress.operation} at acquirer {self._config.name!r}: not sent, no concurrency "
            f"slot of its quota scope was free (limit {limit}) [ConcurrencyLimitedError]",
            operation=progress.operation,
            attempts=progress.attempts,
            idempotency_key=progress.idempotency_key,
            acquirer=self._config.name,
            scope=self.scope,
            limit=limit,
        )
        self._set_wait(error, CONCURRENCY_RETRY_AFTER, CONCURRENCY)
        if last is not None:
            error.__cause__ = last
        self.metrics.increment("concurrency_refused_calls", operation=progress.operation)
        raise _Stop(self._final(progress, error), "concurrency")

    def _circuit_error(
        self, progress: _Progress, state: str, retry_after: float, cause: GatewayError | None
    ) -> CircuitOpenError:
        error = CircuitOpenError(
            f"{progress.operation} at acquirer {self._config.name!r}: not sent, the circuit "
            f"breaker of group {progress.operation!r} is {state}; probes in "
            f"{retry_after:.3f} s [CircuitOpenError]",
            operation=progress.operation,
            attempts=progress.attempts,
            idempotency_key=progress.idempotency_key,
            acquirer=self._config.name,
            group=progress.operation,
            state=state,
        )
        self._set_wait(error, retry_after, BREAKER)
        if cause is not None:
            error.__cause__ = cause
        self.metrics.increment("circuit_open", operation=progress.operation)
        return error

    def _attempt(
        self,
        progress: _Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[_Answer], Any],
    ) -> _Attempt:
        progress.attempts += 1
        call = _Call(
            progress.operation, progress.reference, progress.idempotency_key, progress.attempts
        )
        started = self._clock.monotonic()
        left = max(0.0, progress.deadline - started)
        policy = progress.policy
        timeout = httpx.Timeout(
            connect=min(policy.connect_timeout, left),
            read=min(policy.read_timeout, left),
            write=min(policy.read_timeout, left),
            pool=min(policy.connect_timeout, left),
        )
        status_code: int | None = None
        server_wait: ServerWait | None = None
        try:
            context = (
                _deadline.attempt_deadline(left)
                if self._deadline_sockets
                else contextlib.nullcontext()
            )
            with context:
                answer = self._exchange(call, build(timeout), progress.deadline)
            status_code = answer.status_code
            server_wait = self._read_server_wait(answer)
            if not 200 <= status_code <= 299:
                raise self._status_error(call, answer, server_wait)
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
            self.metrics.increment(
                "attempts", operation=progress.operation, outcome=type(error).__name__
            )
            return _Attempt(error, error.status_code, started, server_wait)
        self.metrics.increment("attempts", operation=progress.operation, outcome="ok")
        if server_wait is not None and server_wait.source == QUOTA_HEADER and server_wait.seconds:
            # The answer spent the last of the quota: close the gate before anyone gets a 429.
            self.gate.close(self.scope, server_wait.seconds)
        return _Attempt(None, status_code, started, server_wait, result)

    def _stop_reason(self, progress: _Progress, error: GatewayError) -> str | None:
        """Why the call ends after this error, or None to try again."""
        if isinstance(error, PermanentError):
            return "permanent"
        if isinstance(error, AmbiguousOutcomeError) and not self._may_resend_ambiguous(progress):
            return "ambiguous"
        if progress.attempts >= progress.policy.max_attempts:
            return "max_attempts"
        return None

    def _may_resend_ambiguous(self, progress: _Progress) -> bool:
        if progress.operation == "lookup":
            return True  # a GET is safe to repeat
        return (
            progress.policy.retry_ambiguous
            and progress.idempotency_key is not None
            and self._config.honours_idempotency_keys
        )

    def _next_wait(self, progress: _Progress, attempt: _Attempt) -> tuple[float, str]:
        """The sleep before the next attempt, and its source; raises _Stop if none fits."""
        error = attempt.error
        assert error is not None
        floor, source = 0.0, BACKOFF
        server = attempt.server_wait
        if server is not None and server.seconds is not None:
            floor, source = server.seconds, server.source or RETRY_AFTER
        gate = self.gate.remaining(self.scope)
        progress.log["gate"] = gate
        if gate > floor + _SAME_WAIT:
            floor, source = gate, GATE
        elapsed = self._elapsed(progress)
        policy = progress.policy
        if source != BACKOFF and (
            floor > policy.max_server_wait
            or elapsed + floor + policy.min_attempt_time > policy.deadline
        ):
            self._set_wait(error, floor, source)
            self.metrics.increment("server_wait_too_long", operation=progress.operation)
            raise _Stop(self._final(progress, error), "server_wait_too_long", attempt)
        jitter = full_jitter(
            progress.attempts - 1, policy.backoff_base, policy.backoff_cap, self._random
        )
        wait = floor + jitter
        if elapsed + wait + policy.min_attempt_time > policy.deadline:
            if source != BACKOFF:
                self._set_wait(error, floor, source)
            self.metrics.increment("deadline_stops", operation=progress.operation)
            raise _Stop(self._final(progress, error), "deadline", attempt)
        return wait, source

    def _wait_for_gate(self, progress: _Progress, last: GatewayError | None) -> None:
        """Before sending: wait for the scope's gate, or raise _Stop if it does not fit."""
        policy = progress.policy
        waits = 0
        while (remaining := self.gate.remaining(self.scope)) > 0:
            # The gate's instant is a floor; jitter after it spreads the processes waking at T.
            jitter = full_jitter(0, policy.backoff_base, policy.backoff_cap, self._random)
            if (
                remaining > policy.max_server_wait
                or self._elapsed(progress) + remaining + jitter + policy.min_attempt_time
                > policy.deadline
                or waits == _MAX_GATE_WAITS
            ):
                self.metrics.increment("gate_refused", operation=progress.operation)
                error = last if last is not None else self._gate_error(progress)
                self._set_wait(error, remaining, GATE)
                progress.log["gate"] = remaining
                raise _Stop(self._final(progress, error), "gate")
            self.metrics.increment("gate_waits", operation=progress.operation)
            waits += 1
            progress.gate_waited += remaining + jitter
            self._sleep(remaining + jitter)

    def _elapsed(self, progress: _Progress) -> float:
        return self._clock.monotonic() - progress.started

    # -- the error a call ends with -----------------------------------------------------------

    def _set_wait(self, error: GatewayError, seconds: float, source: str) -> None:
        if isinstance(error, RetryableError):
            seconds = min(seconds, float(MAX_DELAY_SECONDS))
            error.retry_after = seconds
            error.not_before = self._not_before(seconds)
            error.wait_source = source

    def _not_before(self, seconds: float) -> datetime:
        return datetime.fromtimestamp(self._clock.time() + seconds, tz=UTC)

    def _final(self, progress: _Progress, error: GatewayError) -> GatewayError:
        """The error the call raises: the last one, unless an earlier attempt was ambiguous."""
        error.attempts = progress.attempts
        ambiguous = progress.ambiguous
        if ambiguous is None or isinstance(error, AmbiguousOutcomeError):
            return error
        final = type(ambiguous)(
            f"{ambiguous}; a later attempt ended with {type(error).__name__}, but an earlier "
            "one may have been applied",
            operation=ambiguous.operation,
            attempts=progress.attempts,
            idempotency_key=ambiguous.idempotency_key,
            status_code=ambiguous.status_code,
            code=ambiguous.code,
            acquirer=ambiguous.acquirer,
        )
        final.__cause__ = error
        return final

    def _budget_error(self, progress: _Progress, error: GatewayError) -> GatewayError:
        if progress.ambiguous is not None:
            return self._final(progress, error)
        exhausted = RetryBudgetExhaustedError(
            f"{progress.operation} at acquirer {self._config.name!r}: retry budget exhausted "
            f"after {progress.attempts} attempt(s); last: {type(error).__name__}"
            " [RetryBudgetExhaustedError]",
            operation=progress.operation,
            attempts=progress.attempts,
            idempotency_key=progress.idempotency_key,
            status_code=error.status_code,
            code=error.code,
            acquirer=self._config.name,
            last_error=type(error).__name__,
        )
        if isinstance(error, RetryableError):
            exhausted.retry_after = error.retry_after
            exhausted.not_before = error.not_before
            exhausted.wait_source = error.wait_source
        exhausted.__cause__ = error
        return exhausted

    def _gate_error(self, progress: _Progress) -> RateLimitedError:
        return RateLimitedError(
            f"{progress.operation} at acquirer {self._config.name!r}: not sent, the rate "
            "gate of its quota scope is closed [RateLimitedError]",
            operation=progress.operation,
            attempts=progress.attempts,
            idempotency_key=progress.idempotency_key,
            acquirer=self._config.name,
        )

    # -- one exchange ------------------------------------------------------------------------

    def _exchange(self, call: _Call, request: httpx.Request, deadline: float) -> _Answer:
        try:
            response = self._http.send(request, stream=True)
        except Exception as exc:
            if classify_exception(exc) is None:
                raise  # not a transport failure: a bug, let it through unchanged
            raise self._transport_error(call, exc, status_code=None) from exc
        try:
            status_code = response.status_code
            try:
                body: bytes | None = self._read_body(response, deadline)
            except _BodyTooLarge:
                if 200 <= status_code <= 299:
                    raise self._error(
                        MalformedResponseError,
                        call,
                        f"HTTP {status_code} with a body larger than {MAX_BODY_BYTES} bytes",
                        status_code=status_code,
                    ) from None
                body = None
            except _DeadlineReached:
                if 200 <= status_code <= 299:
                    raise self._error(
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
                    raise self._transport_error(call, exc, status_code=status_code) from exc
                body = None  # the status line already says what happened
            return _Answer(status_code, response.headers, body)
        finally:
            with contextlib.suppress(httpx.HTTPError):
                response.close()

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

    def _read_server_wait(self, answer: _Answer) -> ServerWait | None:
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
                self.metrics.increment("invalid_header", header=header)
            if 200 <= status <= 299 and wait.source != QUOTA_HEADER:
                return ServerWait(None, invalid=wait.invalid, seen=wait.seen)
            return wait
        return None

    # -- building errors ---------------------------------------------------------------------

    def _status_error(
        self, call: _Call, answer: _Answer, server_wait: ServerWait | None
    ) -> GatewayError:
        code = self._sanitised_code(answer.body)
        error_class = classify_status(answer.status_code, headers=answer.headers, code=code)
        assert error_class is not None  # 2xx never gets here
        if answer.status_code == 403 and error_class is RateLimitedError:
            confirmed = self._profile.confirms_rate_limit(answer.headers, now=self._clock.time())
            if not confirmed and not _code_names_rate_limit(code):
                error_class = AuthenticationError
        detail = f"HTTP {answer.status_code}" + (f", code {code!r}" if code else "")
        extra: dict[str, Any] = {}
        if issubclass(error_class, RateLimitedError | AcquirerUnavailableError):
            extra["retry_after_header"] = answer.headers.get("retry-after")
            wait = server_wait.seconds if server_wait is not None else None
            extra["retry_after"] = wait
            if wait is not None:
                assert server_wait is not None
                extra["not_before"] = self._not_before(wait)
                extra["wait_source"] = server_wait.source
                self.gate.close(self.scope, wait)
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

    def _log_attempt(
        self,
        progress: _Progress,
        attempt: _Attempt,
        outcome: str,
        decision: str,
        reason: str | None = None,
    ) -> None:
        now = self._clock.monotonic()
        server = attempt.server_wait
        fields = {
            "attempt": progress.attempts,
            "status": attempt.status_code,
            "outcome": outcome,
            "elapsed": now - attempt.started,
            "server_wait": server.seconds if server is not None else None,
            "rate_headers": dict(server.seen) if server is not None else {},
        }
        self._emit(progress, fields, decision, reason)

    def _log_stop(self, progress: _Progress, stop: _Stop) -> None:
        error = stop.error
        fields = {
            "attempt": progress.attempts,
            "status": error.status_code,
            "outcome": type(error).__name__,
            "elapsed": None,
            "server_wait": getattr(error, "retry_after", None),
            "rate_headers": {},
        }
        self._emit(progress, fields, "raise", stop.reason)

    def _emit(
        self, progress: _Progress, fields: dict[str, Any], decision: str, reason: str | None
    ) -> None:
        call_elapsed = self._elapsed(progress)
        wait = progress.log.get("wait")
        budget = progress.budget.retries_available if progress.budget is not None else None
        gate = progress.log.get("gate")
        status = fields["status"]
        elapsed = fields["elapsed"]
        level = logging.INFO if decision == "return" else logging.WARNING
        logger.log(
            level,
            "acquirer attempt operation=%s acquirer=%s reference=%s attempt=%d status=%s "
            "outcome=%s elapsed=%s decision=%s%s wait=%s source=%s budget=%s gate=%s",
            progress.operation,
            self._config.name,
            progress.reference,
            fields["attempt"],
            status if status is not None else "-",
            fields["outcome"],
            f"{elapsed:.3f}s" if elapsed is not None else "-",
            decision,
            f" reason={reason}" if reason else "",
            f"{wait:.3f}s" if wait is not None else "-",
            progress.log.get("wait_source") or "-",
            budget if budget is not None else "-",
            f"{gate:.3f}s" if gate is not None else "-",
            extra={
                "gateway_operation": progress.operation,
                "gateway_acquirer": self._config.name,
                "gateway_scope": self.scope,
                "gateway_reference": progress.reference,
                "gateway_attempt": fields["attempt"],
                "gateway_status": status,
                "gateway_outcome": fields["outcome"],
                "gateway_elapsed": elapsed,
                "gateway_call_elapsed": call_elapsed,
                "gateway_decision": decision,
                "gateway_stop_reason": reason,
                "gateway_wait": wait,
                "gateway_wait_source": progress.log.get("wait_source"),
                "gateway_server_wait": fields["server_wait"],
                "gateway_rate_headers": fields["rate_headers"],
                "gateway_gate_waited": progress.gate_waited,
                "gateway_gate_remaining": gate,
                "gateway_budget_retries": budget,
                "gateway_max_attempts": progress.policy.max_attempts,
                "gateway_breaker_state": progress.log.get("breaker"),
            },
        )


def _code_names_rate_limit(code: str | None) -> bool:
    if code is None:
        return False
    lowered = code.lower().replace("-", "_").replace(".", "_")
    return "rate_limit" in lowered or "ratelimit" in lowered or "too_many_requests" in lowered


def _breaker_outcome(error: GatewayError | None) -> str:
    """What one attempt means to the circuit breaker (see breaker.py)."""
    if error is None:
        return _breaker.SUCCESS  # 2xx, approved or declined
    if isinstance(error, RateLimitedError | IdempotencyConflictError | PermanentError):
        return _breaker.IGNORED  # the rate gate's, our duplicate in flight, our own 4xx
    if isinstance(error, ConnectionFailedError) and isinstance(error.__cause__, httpx.PoolTimeout):
        return _breaker.IGNORED  # our own connection pool is exhausted, not the acquirer
    if isinstance(error, ConnectionFailedError | AcquirerUnavailableError | AmbiguousOutcomeError):
        return _breaker.FAILURE  # refused/DNS/connect timeout, 503, 5xx, timeouts, resets
    return _breaker.IGNORED


def _limiter_outcome(error: GatewayError | None) -> str:
    """What one attempt means to the AIMD limiter: a rate limit drops, a result succeeds."""
    if error is None:
        return _aimd.SUCCESS
    if isinstance(error, RateLimitedError):
        return _aimd.DROP
    return _aimd.IGNORE


def _authorization_outcome(authorization: Authorization) -> str:
    return "approved" if authorization.approved else "declined"
