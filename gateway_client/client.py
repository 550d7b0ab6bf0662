"""
The acquirer client: each call is a short series of classified attempts that never makes an
outage worse.

For every call (the writes `authorize`, `capture`, `void`, `refund`, `action_details`, each
with the caller's idempotency key; the look-ups `lookup`, `lookup_refunds`), under a
RetryPolicy (policy.py):

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

Order before each attempt: breaker, rate gate, concurrency slot, budget (a first attempt
deposits, a retry withdraws), send; all four in one store script, all or nothing, and the
outcome in one more (_attempt_state.py, docs/adr/0025).

Where the rest lives: the retry loop that applies these rules in _retry_loop.py (`RetryLoop`,
which `AcquirerClient` extends with its operations); one exchange (send, read within the
deadline, map failures to GatewayError) in _exchange.py; each attempt's httpx request in
_request_build.py; the running state of a call and the
errors the client ends it with in _call.py; the one log event per attempt (`gateway_client`
logger, `gateway_*` extras) in _attempt_log.py; what an attempt means to the breaker and the
limiter in classify.py.
"""

from __future__ import annotations

import math
import random as _random
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import NamedTuple, TypeVar

import httpx

from resilience import (
    AimdConfig,
    AimdLimiter,
    BreakerConfig,
    BreakerSet,
    BreakerSnapshot,
    Clock,
    CounterMetrics,
    MemoryStore,
    Metrics,
    RateGate,
    RetryBudget,
    StateStore,
    SystemClock,
    scope_for,
)

from ._attempt_log import AttemptLog, authorization_outcome, received_or, refund_outcome
from ._attempt_state import AttemptState, aimd_limiter, breaker_set
from ._call import Answer
from ._exchange import Exchange
from ._lookup_pages import lookup_pages
from ._request_build import check_reference, request_builder
from ._retry_loop import RetryLoop
from ._transport import ShardedTransport
from .dialect import Dialect, LookupUnsupported, Operation, WireRequest
from .policy import RetryPolicy
from .sandbox_dialect import SandboxDialect
from .types import (
    AcquirerConfig,
    ActionDetailsRequest,
    ActionRequired,
    Authorization,
    AuthorizationRequest,
    CaptureRequest,
    Received,
    Refund,
    RefundRequest,
    VoidRequest,
)

__all__ = ["AcquirerClient", "Admits"]

T = TypeVar("T")
V = TypeVar("V")
W = TypeVar(
    "W", AuthorizationRequest, CaptureRequest, VoidRequest, RefundRequest, ActionDetailsRequest
)

USER_AGENT = "payment-service-gateway-client/0.2"


class Admits(NamedTuple):
    """`AcquirerClient.admits`' answer: `allowed`, else `retry_after` seconds until probes."""

    allowed: bool
    retry_after: float


class AcquirerClient(RetryLoop):
    """
    Client for the upstream card acquirer: `authorize` (`POST /charges`), `capture`
    (`POST /charges/{id}/capture`), `void` (`POST /charges/{id}/void`), `refund`
    (`POST /refunds`), `lookup` (`GET /charges?reference=`) and `lookup_refunds`
    (`GET /refunds?reference=`).

    Arguments (all but `config` keyword-only):
        config: the AcquirerConfig (URL, key, timeouts, key honouring, quota profile).
        transport: replaces the network (e.g. `httpx.MockTransport` in tests); None uses a
            `ShardedTransport`: httpx's pools, one per group of threads, whose sockets honour
            each call's deadline.
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
        dialect: the provider's wire format (dialect.py): how each request is built, each
            answer decoded and each error answer classified; None: `SandboxDialect()`, our
            sandbox acquirer's. The retry loop, deadline, budget, breakers, gate, limiter and
            attempt records are the same whatever the dialect.

    Thread-safe: one transport (its connection pools) is shared by concurrent calls; each
    attempt is sent on it directly (ADR 0033).
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
        dialect: Dialect | None = None,
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
        # When each group's breaker last admitted a pre-check (`admits`, monotonic seconds).
        self._admitted_at: dict[str, float] = {}
        self._sleep = sleep if sleep is not None else time.sleep
        self._random = random if random is not None else _random.Random().random  # noqa: S311
        self.metrics: Metrics = metrics if metrics is not None else CounterMetrics()
        self.store: StateStore = (
            store if store is not None else MemoryStore(clock=self._clock.monotonic)
        )
        self.budget = budget if budget is not None else RetryBudget(self.store, config.name)
        self.gate = RateGate(self.store)
        self.scope = scope_for(config.name, config.rate_scope)
        self.breakers = breaker_set(self.store, breakers, name=config.name, metrics=self.metrics)
        self.limiter = aimd_limiter(
            self.store, limiter, metrics=self.metrics, sleep=self._sleep, clock=self._clock
        )
        self._state = AttemptState(
            self.store, gate=self.gate, budget=self.budget, limiter=self.limiter, scope=self.scope
        )
        self._dialect: Dialect = dialect if dialect is not None else SandboxDialect()
        self._base_url = config.base_url.rstrip("/")
        deadline_sockets = False
        if transport is None:  # pools sharded by thread, a connection per call in flight kept
            transport = ShardedTransport()
            deadline_sockets = transport.deadline_sockets
        # Requests go straight to the transport (httpx's public `BaseTransport.handle_request`,
        # in Exchange), not through an `httpx.Client`: a client adds what an acquirer call never
        # uses (a cookie jar read on every answer, auth and redirect flows, event hooks), a
        # quarter of the client's CPU per call (ADR 0033). The headers are those an
        # `httpx.Client` would send.
        self._headers: dict[str, str] = {
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
            "User-Agent": USER_AGENT,
        } | self._dialect.auth_headers(config.api_key)
        self._exchange = Exchange(
            transport,
            config,
            self._dialect,
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
    def dialect(self) -> Dialect:
        """The provider's wire format this client speaks (dialect.py)."""
        return self._dialect

    @property
    def policy(self) -> RetryPolicy:
        """The default RetryPolicy of this client's calls."""
        return self._policy

    def __repr__(self) -> str:
        return f"AcquirerClient(name={self._config.name!r}, base_url={self._config.base_url!r})"

    # -- the circuit breakers ----------------------------------------------------------------

    def admits(self, group: str, *, fresh_within: float = 0.0) -> Admits:
        """
        Would the breaker of `group` ("authorize", "capture", "void", "refund", "lookup")
        admit a call now? Returns
        `Admits(True, 0.0)` or `Admits(False, retry_after)`: seconds until probes are
        admitted (a NamedTuple: `allowed, retry_after = client.admits(group)`). Takes no
        permit and writes nothing: the API's pre-check before it stores anything. A group
        without a breaker always admits.

        `fresh_within` (seconds, on this client's monotonic clock): a `True` this client read
        from the store at most that long ago is answered again without reading the store (a
        shared store's round trip). Only a positive answer is reused: a call is still admitted
        or refused by the store itself when it is sent (the attempt's own admission), so a
        reused answer can only route a call to a breaker that opened meanwhile, which then
        refuses it unsent (`CircuitOpenError`). 0: always read.
        """
        breaker = self.breakers.get(group)
        if breaker is None:
            return Admits(True, 0.0)
        now = self._clock.monotonic()
        if fresh_within > 0 and now - self._admitted_at.get(group, -math.inf) <= fresh_within:
            return Admits(True, 0.0)
        answer = Admits(*breaker.admits())
        if answer.allowed:
            self._admitted_at[group] = now
        else:
            self._admitted_at.pop(group, None)
        return answer

    def breaker_state(self, group: str) -> BreakerSnapshot:
        """The snapshot of the breaker of `group` (KeyError if it has none)."""
        return self.breakers[group].snapshot()

    # -- public operations -------------------------------------------------------------------

    def authorize(
        self,
        request: AuthorizationRequest,
        *,
        policy: RetryPolicy | None = None,
        request_id: str | None = None,
    ) -> Authorization | ActionRequired:
        """
        Ask the acquirer to authorise `request` (the dialect's authorization request; the
        sandbox's `POST /charges`; captured at once, or held for a capture or a void when
        `request.capture` is False), retrying under `policy` (default: the client's) with the
        request's idempotency key on every attempt. Breaker group `authorize`.

        `request_id` (every operation takes it): the caller's id of the request behind the
        call, sent as `X-Request-Id` on every attempt and logged (`gateway_request_id`);
        None sends none. 1-200 visible ASCII characters, else ValueError before anything.

        Returns the Authorization, approved or declined (a decline is a result; manual: with
        its capture state), or ActionRequired (held for the shopper). Raises:
        RetryableError (not applied; `retry_after`/`not_before` when a wait is known;
        RetryBudgetExhaustedError when the budget refused a retry), AmbiguousOutcomeError
        (maybe applied: reconcile) or PermanentError (refused). ValueError before sending
        for an idempotency key longer than the dialect's provider keeps.
        """
        if not isinstance(request, AuthorizationRequest):
            raise TypeError("request must be an AuthorizationRequest")
        dialect = self._dialect
        return self._write(
            "authorize",
            request.payment_reference,
            request,
            dialect.authorize_request(request),
            dialect.decode_authorization,
            authorization_outcome,
            policy,
            request_id,
        )

    def capture(
        self,
        request: CaptureRequest,
        *,
        policy: RetryPolicy | None = None,
        request_id: str | None = None,
    ) -> Authorization | Received:
        """
        Capture an authorised, uncaptured charge (the sandbox's `POST /charges/{id}/capture`,
        body `{}` or `{"amount": N}`), with the same guarantees as `authorize`: the request's
        idempotency key on every attempt, the same classification and retries. Breaker group
        `capture`.

        Returns the charge with its capture state (`captured` True, `amount_captured` the
        amount asked for, or the whole amount), or `Received` from a provider that answers
        before the outcome (Adyen's `received`: pending, never done). A replay answers the
        charge as it was at the capture (`replayed` True). Raises the GatewayErrors of
        `authorize`; the acquirer's rule refusals are InvalidRequestErrors with
        `acquirer_code` "charge_not_found" (404), "charge_already_captured",
        "charge_already_voided", "charge_declined" or "amount_exceeds_capturable" (422; the
        sandbox's codes, docs/connectors.md has each provider's), never retried.
        """
        if not isinstance(request, CaptureRequest):
            raise TypeError("request must be a CaptureRequest")
        dialect = self._dialect
        return self._write(
            "capture",
            request.acquirer_reference,
            request,
            dialect.capture_request(request),
            dialect.decode_capture,
            lambda answer: received_or(answer, "captured"),
            policy,
            request_id,
        )

    def void(
        self,
        request: VoidRequest,
        *,
        policy: RetryPolicy | None = None,
        request_id: str | None = None,
    ) -> Authorization | Received:
        """
        Release an authorised, uncaptured charge (the sandbox's `POST /charges/{id}/void`,
        body `{}`), with the same guarantees as `authorize`. Breaker group `void`.

        Returns the charge with its capture state (`voided` True), or `Received` (pending,
        Adyen). Raises the GatewayErrors
        of `authorize`; rule refusals are InvalidRequestErrors with `acquirer_code`
        "charge_not_found" (404), "charge_already_captured", "charge_already_voided" (another
        key) or "charge_declined" (422), never retried.
        """
        if not isinstance(request, VoidRequest):
            raise TypeError("request must be a VoidRequest")
        dialect = self._dialect
        return self._write(
            "void",
            request.acquirer_reference,
            request,
            dialect.void_request(request),
            dialect.decode_void,
            lambda answer: received_or(answer, "voided"),
            policy,
            request_id,
        )

    def refund(
        self,
        request: RefundRequest,
        *,
        policy: RetryPolicy | None = None,
        request_id: str | None = None,
    ) -> Refund | Received:
        """
        Refund (part of) a captured charge (the sandbox's `POST /refunds`, body `{"charge",
        "amount"?, "reference"}`), with the same guarantees as `authorize`. Breaker group
        `refund`.

        Returns the Refund, succeeded or failed (a failed refund is a result, like a
        decline), or `Received` (pending, Adyen). Raises the GatewayErrors of `authorize`;
        rule refusals are InvalidRequestErrors with `acquirer_code` "charge_not_found" (404),
        "charge_not_captured", "charge_already_voided", "charge_declined",
        "amount_exceeds_refundable" or "charge_already_refunded" (422), never retried. After
        an ambiguous outcome, `lookup_refunds(request.refund_reference)` or a re-send with the
        same key resolves it.
        """
        if not isinstance(request, RefundRequest):
            raise TypeError("request must be a RefundRequest")
        dialect = self._dialect
        return self._write(
            "refund",
            request.refund_reference,
            request,
            dialect.refund_request(request),
            dialect.decode_refund,
            refund_outcome,
            policy,
            request_id,
        )

    def action_details(
        self,
        request: ActionDetailsRequest,
        *,
        policy: RetryPolicy | None = None,
        request_id: str | None = None,
    ) -> Authorization:
        """
        Finish a customer action with the result the shopper's browser brought back, at a
        provider that decides the outcome on it (`dialect.supports_action_details`: Adyen's
        `POST /payments/details`; docs/adr/0049): a write with the request's idempotency key
        on every attempt, retried under `policy` like `authorize`, in breaker group
        `authorize` (the same payments endpoint family at the provider).

        Returns the provider's outcome, approved or declined. Raises the same GatewayError
        subclasses as `authorize` (a result the provider refuses, e.g. one already used, is a
        PermanentError: no new outcome); ValueError before sending for a dialect without it
        or a key longer than the provider keeps.
        """
        if not isinstance(request, ActionDetailsRequest):
            raise TypeError("request must be an ActionDetailsRequest")
        dialect = self._dialect
        if not dialect.supports_action_details:
            raise ValueError(f"{dialect.kind} finishes no customer action on a redirect result")
        return self._write(
            "action_details",
            request.payment_reference,
            request,
            dialect.action_details_request(request),
            dialect.decode_action_details,
            authorization_outcome,
            policy,
            request_id,
            group="authorize",
        )

    def lookup(
        self,
        payment_reference: str,
        *,
        policy: RetryPolicy | None = None,
        request_id: str | None = None,
    ) -> list[Authorization | ActionRequired]:
        """
        Return the acquirer's charges for our `payment_reference` (may be empty; the
        sandbox's `GET /charges?reference=`), each with its capture state now when the
        acquirer shows it, retrying under `policy` (a GET: every failure but a permanent one
        is safe to repeat). Breaker group `lookup`.

        A paged listing (Stripe's) is read page after page while a page holds none of ours and
        says more follow, at most 20 pages (`_lookup_pages.py`), each its own call (retries,
        breaker); "none" is only ever said of a complete listing.

        Raises the same GatewayError subclasses as `authorize`; LookupUnsupported before
        sending when the provider has no look-up (`dialect.supports_lookup` False: Adyen).
        """
        check_reference("payment_reference", payment_reference)
        dialect = self._lookup_dialect()
        return lookup_pages(
            dialect,
            payment_reference,
            lambda request, decode: self._read(
                "lookup", payment_reference, request, decode, policy, request_id
            ),
        )

    def lookup_refunds(
        self,
        refund_reference: str,
        *,
        acquirer_reference: str | None = None,
        policy: RetryPolicy | None = None,
        request_id: str | None = None,
    ) -> list[Refund]:
        """
        Return the acquirer's refunds filed under our `refund_reference` (may be empty; the
        sandbox's `GET /refunds?reference=`), oldest first: how reconciliation learns what
        became of a refund whose answer was lost. `acquirer_reference`: the refunded charge's
        id at the provider, which a dialect listing refunds per payment needs (Stripe); the
        sandbox ignores it. Retried like `lookup` (a GET), in breaker group `lookup` (the
        read path reconciliation depends on; an outage of the writes leaves it alone).
        Raises the same GatewayError subclasses as `authorize`, and LookupUnsupported as
        `lookup` does.
        """
        check_reference("refund_reference", refund_reference)
        dialect = self._lookup_dialect()
        return self._read(
            "lookup_refunds",
            refund_reference,
            dialect.lookup_refunds_request(refund_reference, acquirer_reference),
            lambda answer: dialect.decode_lookup_refunds(answer, refund_reference),
            policy,
            request_id,
        )

    def _lookup_dialect(self) -> Dialect:
        if not self._dialect.supports_lookup:
            raise LookupUnsupported(f"{self._dialect.kind} has no look-up by our reference")
        return self._dialect

    def close(self) -> None:
        """Close the connection pool (the transport's, also one passed in). A call after it
        raises `RuntimeError` and sends nothing."""
        self._exchange.close()

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

    def _write(
        self,
        operation: Operation,
        reference: str,
        request: W,
        wire: WireRequest,
        decode: Callable[[Answer, W], T],
        outcome: Callable[[T], str],
        policy: RetryPolicy | None,
        request_id: str | None,
        group: str | None = None,
    ) -> T:
        """A write: the dialect's request with the call's idempotency key on every attempt
        (checked first against the dialect's limit: ValueError before sending), in breaker
        `group` (None: the operation's own)."""
        key = request.idempotency_key
        limit = self._dialect.max_idempotency_key_length
        if len(key) > limit:
            raise ValueError(
                f"idempotency_key is longer than the {limit} characters {self._dialect.kind} keeps"
            )
        progress = self._start(
            operation, reference, key, policy, group=group, request_id=request_id
        )
        headers = self._headers | {self._dialect.idempotency_header: key}
        dialect = self._dialect
        return self._call(
            progress,
            request_builder(self._base_url, wire, headers, progress),
            lambda answer: decode(answer, request),
            outcome,
            lambda answer: dialect.refusal_result(operation, answer, request),
        )

    def _read(
        self,
        operation: Operation,
        reference: str,
        wire: WireRequest,
        decode: Callable[[Answer], list[V]],
        policy: RetryPolicy | None,
        request_id: str | None,
    ) -> list[V]:
        """A look-up: the dialect's GET (safe to repeat), in breaker group `lookup`."""
        progress = self._start(
            operation, reference, None, policy, group="lookup", request_id=request_id
        )
        build = request_builder(self._base_url, wire, self._headers, progress)
        return self._call(progress, build, decode, lambda _: "ok")
