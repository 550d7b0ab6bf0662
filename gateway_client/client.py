"""
The acquirer client: each call is a short series of classified attempts that never makes an
outage worse.

For every call (the writes `authorize`, `capture`, `void`, `refund`, each with the caller's
idempotency key; the look-ups `lookup`, `lookup_refunds`), under a RetryPolicy (policy.py):

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
   `authorize` for POST /charges, `capture` and `void` for POST /charges/{id}/capture and
   /void, `refund` for POST /refunds, `lookup` for GET /charges and GET /refunds) admits it
   or refuses it:
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

Where the rest lives: one exchange (send, read within the deadline, map failures to
GatewayError) in _exchange.py; the running state of a call and the errors the client ends it
with in _call.py; the one log event per attempt (`gateway_client` logger, `gateway_*` extras)
in _attempt_log.py; what an attempt means to the breaker and the limiter in classify.py.
"""

from __future__ import annotations

import dataclasses
import random as _random
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

import httpx

from . import aimd as _aimd
from . import deadline as _deadline
from ._attempt_log import AttemptLog
from ._call import (
    Answer,
    Attempt,
    CallLabel,
    Progress,
    Stop,
    budget_error,
    circuit_error,
    concurrency_error,
    final_error,
    gate_error,
    set_wait,
)
from ._exchange import Exchange
from .aimd import AimdConfig, AimdLimiter, Slot
from .backoff import full_jitter
from .breaker import BreakerSet
from .breaker_types import DEFAULT_GROUPS, BreakerConfig, BreakerSnapshot
from .budget import RetryBudget
from .classify import breaker_outcome, limiter_outcome
from .clock import Clock, SystemClock
from .errors import (
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    CircuitOpenError,
    GatewayError,
    MalformedResponseError,
    PermanentError,
    RateLimitedError,
)
from .gate import RateGate, scope_for
from .metrics import CounterMetrics, Metrics
from .policy import RetryPolicy
from .quota import QUOTA_HEADER, RETRY_AFTER, ServerWait
from .store import MemoryStore, StateStore
from .types import (
    AcquirerConfig,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    Refund,
    RefundRequest,
    VoidRequest,
)
from .wire import (
    MalformedBody,
    decode_charge,
    decode_charge_list,
    decode_refund,
    decode_refund_list,
    encode_authorization,
    encode_capture,
    encode_refund,
    encode_void,
)

__all__ = ["AcquirerClient", "Admits"]

T = TypeVar("T")
V = TypeVar("V")

USER_AGENT = "payment-service-gateway-client/0.2"

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


class Admits(NamedTuple):
    """`AcquirerClient.admits`' answer: `allowed`, else `retry_after` seconds until probes."""

    allowed: bool
    retry_after: float


class AcquirerClient:
    """
    Client for the upstream card acquirer: `authorize` (`POST /charges`), `capture`
    (`POST /charges/{id}/capture`), `void` (`POST /charges/{id}/void`), `refund`
    (`POST /refunds`), `lookup` (`GET /charges?reference=`) and `lookup_refunds`
    (`GET /refunds?reference=`).

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
            a group mapped to None has no breaker); None: `authorize`, `capture`, `void`,
            `refund` and `lookup` with the production default `BreakerConfig()`, in `store`.
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
        self._charges_url = config.base_url.rstrip("/") + "/charges"
        self._refunds_url = config.base_url.rstrip("/") + "/refunds"
        deadline_sockets = False
        if transport is None:
            # Handed its config: no proxies, certificates or .netrc from the environment.
            transport = httpx.HTTPTransport(trust_env=False)
            deadline_sockets = _deadline.install(transport)
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
        self._exchange = Exchange(
            self._http,
            config,
            clock=self._clock,
            metrics=self.metrics,
            deadline_sockets=deadline_sockets,
        )
        self._log = AttemptLog(config.name, self.scope, self._clock)

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

    def admits(self, group: str) -> Admits:
        """
        Would the breaker of `group` ("authorize", "capture", "void", "refund", "lookup")
        admit a call now? Returns
        `Admits(True, 0.0)` or `Admits(False, retry_after)`: seconds until probes are
        admitted (a NamedTuple: `allowed, retry_after = client.admits(group)`). Takes no
        permit and writes nothing: the API's pre-check before it stores anything. A group
        without a breaker always admits.
        """
        breaker = self.breakers.get(group)
        if breaker is None:
            return Admits(True, 0.0)
        return Admits(*breaker.admits())

    def breaker_state(self, group: str) -> BreakerSnapshot:
        """The snapshot of the breaker of `group` (KeyError if it has none)."""
        return self.breakers[group].snapshot()

    def _build_breakers(
        self, breakers: BreakerSet | Mapping[str, BreakerConfig | None] | None
    ) -> BreakerSet:
        if isinstance(breakers, BreakerSet):
            return breakers
        configs: dict[str, BreakerConfig | None] = dict.fromkeys(DEFAULT_GROUPS, BreakerConfig())
        if breakers is not None:
            if not isinstance(breakers, Mapping):
                raise TypeError("breakers must be a BreakerSet, a mapping or None")
            for group, config in breakers.items():
                if config is not None and not isinstance(config, BreakerConfig):
                    raise TypeError("breakers maps each group to a BreakerConfig or None")
                configs[group] = config
        chosen = {group: config for group, config in configs.items() if config is not None}
        return BreakerSet(self.store, chosen, name=self._config.name, metrics=self.metrics)

    # -- public operations -------------------------------------------------------------------

    def authorize(
        self, request: AuthorizationRequest, *, policy: RetryPolicy | None = None
    ) -> Authorization:
        """
        Ask the acquirer to authorise `request` (`POST /charges`; captured at once, or held
        for a capture or a void when `request.capture` is False), retrying under `policy`
        (default: the client's) with the request's idempotency key on every attempt.
        Breaker group `authorize`.

        Returns the Authorization, approved or declined (a decline is a result); for a manual
        request with its capture state (uncaptured). Raises a GatewayError subclass:
        RetryableError (not applied; `retry_after`/`not_before` when a wait is known;
        RetryBudgetExhaustedError when the budget refused a retry), AmbiguousOutcomeError
        (maybe applied: reconcile) or PermanentError (refused).
        """
        if not isinstance(request, AuthorizationRequest):
            raise TypeError("request must be an AuthorizationRequest")

        def decode(answer: Answer) -> Authorization:
            authorization = decode_charge(answer.body or b"", replayed=_replayed(answer))
            for name in ("amount", "currency", "payment_reference"):
                if getattr(authorization, name) != getattr(request, name):
                    raise MalformedBody(f"the charge does not match the request ({name})")
            if authorization.captured is not None and authorization.captured != (
                authorization.approved and request.capture
            ):
                raise MalformedBody("the charge's capture state does not match the request")
            return authorization

        progress = self._start(
            "authorize", request.payment_reference, request.idempotency_key, policy
        )
        body = encode_authorization(request)
        return self._post(progress, self._charges_url, body, decode, _authorization_outcome)

    def capture(
        self, request: CaptureRequest, *, policy: RetryPolicy | None = None
    ) -> Authorization:
        """
        Capture an authorised, uncaptured charge (`POST /charges/{id}/capture`, body `{}` or
        `{"amount": N}`), with the same guarantees as `authorize`: the request's idempotency
        key on every attempt, the same classification and retries. Breaker group `capture`.

        Returns the charge with its capture state (`captured` True, `amount_captured` the
        amount asked for, or the whole amount). A replay answers the charge as it was at the
        capture (`replayed` True). Raises the GatewayErrors of `authorize`; the acquirer's
        rule refusals are InvalidRequestErrors with `acquirer_code` "charge_not_found" (404),
        "charge_already_captured", "charge_already_voided", "charge_declined" or
        "amount_exceeds_capturable" (422), never retried.
        """
        if not isinstance(request, CaptureRequest):
            raise TypeError("request must be a CaptureRequest")

        def decode(answer: Answer) -> Authorization:
            charge = self._decode_operated(answer, request.acquirer_reference)
            expected = charge.amount if request.amount is None else request.amount
            if not charge.captured or charge.amount_captured != expected:
                raise MalformedBody("the charge is not captured for the amount asked")
            return charge

        progress = self._start(
            "capture", request.acquirer_reference, request.idempotency_key, policy
        )
        url = self._charge_url(request.acquirer_reference, "capture")
        return self._post(progress, url, encode_capture(request), decode, lambda _: "captured")

    def void(self, request: VoidRequest, *, policy: RetryPolicy | None = None) -> Authorization:
        """
        Release an authorised, uncaptured charge (`POST /charges/{id}/void`, body `{}`), with
        the same guarantees as `authorize`. Breaker group `void`.

        Returns the charge with its capture state (`voided` True). Raises the GatewayErrors
        of `authorize`; rule refusals are InvalidRequestErrors with `acquirer_code`
        "charge_not_found" (404), "charge_already_captured", "charge_already_voided" (another
        key) or "charge_declined" (422), never retried.
        """
        if not isinstance(request, VoidRequest):
            raise TypeError("request must be a VoidRequest")

        def decode(answer: Answer) -> Authorization:
            charge = self._decode_operated(answer, request.acquirer_reference)
            if not charge.voided:
                raise MalformedBody("the charge is not voided")
            return charge

        progress = self._start("void", request.acquirer_reference, request.idempotency_key, policy)
        url = self._charge_url(request.acquirer_reference, "void")
        return self._post(progress, url, encode_void(), decode, lambda _: "voided")

    def refund(self, request: RefundRequest, *, policy: RetryPolicy | None = None) -> Refund:
        """
        Refund (part of) a captured charge (`POST /refunds`, body `{"charge", "amount"?,
        "reference"}`), with the same guarantees as `authorize`. Breaker group `refund`.

        Returns the Refund, succeeded or failed (a failed refund is a result, like a
        decline). Raises the GatewayErrors of `authorize`; rule refusals are
        InvalidRequestErrors with `acquirer_code` "charge_not_found" (404),
        "charge_not_captured", "charge_already_voided", "charge_declined",
        "amount_exceeds_refundable" or "charge_already_refunded" (422), never retried. After
        an ambiguous outcome, `lookup_refunds(request.refund_reference)` or a re-send with the
        same key resolves it.
        """
        if not isinstance(request, RefundRequest):
            raise TypeError("request must be a RefundRequest")

        def decode(answer: Answer) -> Refund:
            refund = decode_refund(answer.body or b"", replayed=_replayed(answer))
            if refund.charge != request.acquirer_reference:
                raise MalformedBody("the refund does not match the request (charge)")
            if refund.refund_reference != request.refund_reference:
                raise MalformedBody("the refund does not match the request (refund_reference)")
            if request.amount is not None and refund.amount != request.amount:
                raise MalformedBody("the refund does not match the request (amount)")
            return refund

        progress = self._start("refund", request.refund_reference, request.idempotency_key, policy)
        body = encode_refund(request)
        return self._post(progress, self._refunds_url, body, decode, _refund_outcome)

    def lookup(
        self, payment_reference: str, *, policy: RetryPolicy | None = None
    ) -> list[Authorization]:
        """
        Return the acquirer's charges for our `payment_reference` (may be empty; sent as
        `GET /charges?reference=`), each with its capture state now when the acquirer shows
        it, retrying under `policy` (a GET: every failure but a permanent one is safe to
        repeat). Breaker group `lookup`.

        Raises the same GatewayError subclasses as `authorize`.
        """
        return self._lookup(
            "lookup",
            self._charges_url,
            payment_reference,
            "payment_reference",
            decode_charge_list,
            lambda charge: charge.payment_reference,
            policy,
        )

    def lookup_refunds(
        self, refund_reference: str, *, policy: RetryPolicy | None = None
    ) -> list[Refund]:
        """
        Return the acquirer's refunds filed under our `refund_reference` (may be empty; sent
        as `GET /refunds?reference=`), oldest first: how reconciliation learns what became
        of a refund whose answer was lost. Retried like `lookup` (a GET), in breaker group
        `lookup` (the read path reconciliation depends on; an outage of the writes leaves
        it alone). Raises the same GatewayError subclasses as `authorize`.
        """
        return self._lookup(
            "lookup_refunds",
            self._refunds_url,
            refund_reference,
            "refund_reference",
            decode_refund_list,
            lambda refund: refund.refund_reference,
            policy,
        )

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

    # -- one request shape per HTTP method ---------------------------------------------------

    def _post(
        self,
        progress: Progress,
        url: str,
        body: bytes,
        decode: Callable[[Answer], T],
        outcome: Callable[[T], str],
    ) -> T:
        """A write: `body` as JSON to `url` with the call's idempotency key on every attempt."""
        key = progress.idempotency_key
        assert key is not None  # every write carries one

        def build(timeout: httpx.Timeout) -> httpx.Request:
            return self._http.build_request(
                "POST",
                url,
                content=body,
                headers={"Content-Type": "application/json", "Idempotency-Key": key},
                timeout=timeout,
            )

        return self._call(progress, build, decode, outcome)

    def _lookup(
        self,
        operation: str,
        url: str,
        reference: str,
        reference_name: str,
        decode_list: Callable[[bytes], list[V]],
        echoed: Callable[[V], str],
        policy: RetryPolicy | None,
    ) -> list[V]:
        """A look-up: `GET url?reference=` (safe to repeat), in breaker group `lookup`; every
        listed item must carry `reference` back (`echoed`). An empty `reference` raises
        ValueError naming it `reference_name` (the public method's argument)."""
        if not isinstance(reference, str) or not reference:
            raise ValueError(f"{reference_name} must be a non-empty string")

        def build(timeout: httpx.Timeout) -> httpx.Request:
            return self._http.build_request(
                "GET", url, params={"reference": reference}, timeout=timeout
            )

        def decode(answer: Answer) -> list[V]:
            items = decode_list(answer.body or b"")
            if any(echoed(item) != reference for item in items):
                raise MalformedBody("a listed item has another reference")
            return items

        progress = self._start(operation, reference, None, policy, group="lookup")
        return self._call(progress, build, decode, lambda _: "ok")

    def _charge_url(self, acquirer_reference: str, action: str) -> str:
        return f"{self._charges_url}/{quote(acquirer_reference, safe='')}/{action}"

    @staticmethod
    def _decode_operated(answer: Answer, acquirer_reference: str) -> Authorization:
        """The charge a capture or void answered: that charge, with its capture state."""
        charge = decode_charge(answer.body or b"", replayed=_replayed(answer))
        if charge.acquirer_reference != acquirer_reference:
            raise MalformedBody("the charge does not match the request (acquirer_reference)")
        if charge.captured is None:
            raise MalformedBody("the charge carries no capture state")
        return charge

    # -- the retry loop ----------------------------------------------------------------------

    def _start(
        self,
        operation: str,
        reference: str,
        key: str | None,
        policy: RetryPolicy | None,
        *,
        group: str | None = None,
    ) -> Progress:
        """A write (`key` set) in the breaker group named like its operation, or a GET."""
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise TypeError("policy must be a RetryPolicy")
        chosen = policy or self._policy
        started = self._clock.monotonic()
        return Progress(
            operation,
            group or operation,
            key is None,
            reference,
            key,
            chosen,
            started,
            started + chosen.deadline,
        )

    def _call(
        self,
        progress: Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[Answer], T],
        outcome: Callable[[T], str],
    ) -> T:
        last: GatewayError | None = None
        try:
            while True:
                progress.log = {}
                attempt = self._guarded_attempt(progress, build, decode, last)
                if attempt.error is None:
                    self._log.attempt(progress, attempt, outcome(attempt.result), "return")
                    result = attempt.result
                    if isinstance(result, Authorization | Refund):
                        result = dataclasses.replace(result, attempts=progress.attempts)
                    return result  # type: ignore[no-any-return]
                error = last = attempt.error
                if isinstance(error, AmbiguousOutcomeError):
                    progress.ambiguous = error
                reason = self._stop_reason(progress, error)
                if reason is not None:
                    raise Stop(final_error(progress, error), reason, attempt)  # noqa: TRY301 - Stop: the loop's exit, handled below
                if attempt.breaker is not None and attempt.breaker.refusing:
                    # The breaker opened (here or elsewhere): no sleep, no retry.
                    refused = self._circuit_error(
                        progress, attempt.breaker.state, attempt.breaker.retry_after, error
                    )
                    raise Stop(final_error(progress, refused), "circuit_open", attempt)  # noqa: TRY301
                wait, source = self._next_wait(progress, attempt)
                progress.log.update(wait=wait, wait_source=source)
                allowed, progress.budget = self.budget.try_withdraw()
                if not allowed:
                    self.metrics.increment("budget_exhausted", operation=progress.operation)
                    raise Stop(budget_error(progress, error, self._config.name), "budget", attempt)  # noqa: TRY301
                self.metrics.increment(
                    "retries", operation=progress.operation, reason=type(error).__name__
                )
                self._log.attempt(progress, attempt, type(error).__name__, "retry")
                self._sleep(wait)
        except Stop as stop:
            if stop.attempt is not None:
                outcome_name = type(stop.attempt.error).__name__
                self._log.attempt(progress, stop.attempt, outcome_name, "raise", stop.reason)
            else:
                self._log.stop(progress, stop)
            raise stop.error from stop.error.__cause__

    def _guarded_attempt(
        self,
        progress: Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[Answer], Any],
        last: GatewayError | None,
    ) -> Attempt:
        """Breaker, gate, budget deposit (first attempt), concurrency slot, then one attempt."""
        breaker = self.breakers.get(progress.group)
        admission = None
        if breaker is not None:
            admission = breaker.acquire(lease=self._lease(progress))
            progress.log["breaker"] = admission.state
            if not admission.admitted:
                refused = self._circuit_error(
                    progress, admission.state, admission.retry_after, last
                )
                raise Stop(final_error(progress, refused), "circuit_open")
        settled = False
        try:
            self._wait_for_gate(progress, last=last)
            if progress.attempts == 0:
                progress.budget = self.budget.record_request()
            elif last is not None and self._elapsed(progress) >= progress.policy.deadline:
                raise Stop(final_error(progress, last), "deadline")  # a slow sleep
            slot = self._take_slot(progress, last)
            try:
                attempt = self._attempt(progress, build, decode)
            except BaseException:
                self.limiter.release(slot, _aimd.IGNORE)  # cancelled or a bug: no verdict
                raise
            self.limiter.release(slot, limiter_outcome(attempt.error))
            settled = True
            if breaker is not None and admission is not None:
                attempt.breaker = breaker.record(
                    admission,
                    breaker_outcome(attempt.error),
                    duration=self._clock.monotonic() - attempt.started,
                )
                progress.log["breaker"] = attempt.breaker.state
            return attempt
        finally:
            if not settled and breaker is not None and admission is not None:
                breaker.release(admission)  # nothing sent, or cancelled: the permit goes back

    def _lease(self, progress: Progress) -> float:
        return max(0.0, progress.deadline - self._clock.monotonic()) + _LEASE_MARGIN

    def _take_slot(self, progress: Progress, last: GatewayError | None) -> Slot:
        """A concurrency slot of the scope, waiting briefly; raises Stop if none is free."""
        policy = progress.policy
        left = progress.deadline - self._clock.monotonic() - policy.min_attempt_time
        wait = max(0.0, min(policy.concurrency_wait, left))
        slot = self.limiter.acquire(self.scope, wait=wait, lease=self._lease(progress))
        if slot is not None:
            return slot
        limit = self.limiter.snapshot(self.scope).limit
        error = concurrency_error(progress, self._config.name, self.scope, limit)
        set_wait(error, CONCURRENCY_RETRY_AFTER, CONCURRENCY, self._exchange.not_before)
        if last is not None:
            error.__cause__ = last
        self.metrics.increment("concurrency_refused_calls", operation=progress.operation)
        raise Stop(final_error(progress, error), "concurrency")

    def _circuit_error(
        self, progress: Progress, state: str, retry_after: float, cause: GatewayError | None
    ) -> CircuitOpenError:
        error = circuit_error(progress, self._config.name, state, retry_after)
        set_wait(error, retry_after, BREAKER, self._exchange.not_before)
        if cause is not None:
            error.__cause__ = cause
        self.metrics.increment("circuit_open", operation=progress.operation)
        return error

    def _attempt(
        self,
        progress: Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[Answer], Any],
    ) -> Attempt:
        progress.attempts += 1
        call = CallLabel(
            progress.operation,
            progress.reference,
            progress.idempotency_key,
            progress.attempts,
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
            answer = self._exchange.send(call, build(timeout), progress.deadline)
            status_code = answer.status_code
            server_wait = self._exchange.server_wait(answer)
            if not 200 <= status_code <= 299:
                error = self._exchange.status_error(call, answer, server_wait)
                if (
                    isinstance(error, RateLimitedError | AcquirerUnavailableError)
                    and server_wait is not None
                    and server_wait.seconds is not None
                ):
                    self.gate.close(self.scope, server_wait.seconds)  # for every process
                raise error
            try:
                result = decode(answer)
            except MalformedBody as exc:
                raise self._exchange.error(
                    MalformedResponseError,
                    call,
                    f"HTTP {status_code} with a body that is not the documented JSON: {exc}",
                    status_code=status_code,
                ) from None
        except GatewayError as error:
            self.metrics.increment(
                "attempts", operation=progress.operation, outcome=type(error).__name__
            )
            return Attempt(error, error.status_code, started, server_wait)
        self.metrics.increment("attempts", operation=progress.operation, outcome="ok")
        if server_wait is not None and server_wait.source == QUOTA_HEADER and server_wait.seconds:
            # The answer spent the last of the quota: close the gate before anyone gets a 429.
            self.gate.close(self.scope, server_wait.seconds)
        return Attempt(None, status_code, started, server_wait, result)

    def _stop_reason(self, progress: Progress, error: GatewayError) -> str | None:
        """Why the call ends after this error, or None to try again."""
        if isinstance(error, PermanentError):
            return "permanent"
        if isinstance(error, AmbiguousOutcomeError) and not self._may_resend_ambiguous(progress):
            return "ambiguous"
        if progress.attempts >= progress.policy.max_attempts:
            return "max_attempts"
        return None

    def _may_resend_ambiguous(self, progress: Progress) -> bool:
        if progress.safe:
            return True  # a GET is safe to repeat
        return (
            progress.policy.retry_ambiguous
            and progress.idempotency_key is not None
            and self._config.honours_idempotency_keys
        )

    def _next_wait(self, progress: Progress, attempt: Attempt) -> tuple[float, str]:
        """The sleep before the next attempt, and its source; raises Stop if none fits."""
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
            set_wait(error, floor, source, self._exchange.not_before)
            self.metrics.increment("server_wait_too_long", operation=progress.operation)
            raise Stop(final_error(progress, error), "server_wait_too_long", attempt)
        jitter = full_jitter(
            progress.attempts - 1, policy.backoff_base, policy.backoff_cap, self._random
        )
        wait = floor + jitter
        if elapsed + wait + policy.min_attempt_time > policy.deadline:
            if source != BACKOFF:
                set_wait(error, floor, source, self._exchange.not_before)
            self.metrics.increment("deadline_stops", operation=progress.operation)
            raise Stop(final_error(progress, error), "deadline", attempt)
        return wait, source

    def _wait_for_gate(self, progress: Progress, last: GatewayError | None) -> None:
        """Before sending: wait for the scope's gate, or raise Stop if it does not fit."""
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
                error = last if last is not None else gate_error(progress, self._config.name)
                set_wait(error, remaining, GATE, self._exchange.not_before)
                progress.log["gate"] = remaining
                raise Stop(final_error(progress, error), "gate")
            self.metrics.increment("gate_waits", operation=progress.operation)
            waits += 1
            progress.gate_waited += remaining + jitter
            self._sleep(remaining + jitter)

    def _elapsed(self, progress: Progress) -> float:
        return self._clock.monotonic() - progress.started


def _authorization_outcome(authorization: Authorization) -> str:
    return "approved" if authorization.approved else "declined"


def _refund_outcome(refund: Refund) -> str:
    return refund.status


def _replayed(answer: Answer) -> bool:
    value: str = answer.headers.get("idempotent-replayed", "")
    return value.strip().lower() == "true"
