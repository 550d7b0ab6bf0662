"""
The retry loop of `AcquirerClient`: one call as a short series of classified attempts.

`RetryLoop` is the half of the client that decides, attempt by attempt, whether to send, wait
or stop (the rules are numbered in client.py's docstring): the admission (breaker permit, rate
gate, AIMD concurrency slot and retry budget in one store script, `_attempt_state.py`), the
exchange, the outcome (one more script), and the wait before the next attempt (the server's
wait as a floor, full jitter above it). `AcquirerClient` is the other
half: its constructor builds the parts this loop reads, and its public methods say what each
operation sends and how its answer is decoded.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import httpx
from opentelemetry import trace

from resilience import aimd as _aimd
from resilience.aimd import AimdLimiter
from resilience.backoff import full_jitter
from resilience.breaker import BreakerSet, CircuitBreaker
from resilience.breaker_types import IGNORED
from resilience.budget import RetryBudget
from resilience.clock import Clock
from resilience.gate import RateGate
from resilience.metrics import Metrics
from resilience.quota import QUOTA_HEADER, RETRY_AFTER, ServerWait

from ._attempt_log import AttemptLog
from ._attempt_state import Admitted, AttemptState, Verdict
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
from ._tracing import attempt_span_end, attempt_span_start, call_span
from ._validate import check_request_id
from .classify import breaker_outcome, limiter_outcome
from .dialect import Dialect
from .errors import (
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    CircuitOpenError,
    GatewayError,
    MalformedResponseError,
    PermanentError,
    RateLimitedError,
)
from .policy import RetryPolicy
from .types import (
    AcquirerConfig,
    ActionRequired,
    AttemptRecord,
    Authorization,
    Received,
    Refund,
)
from .wire import MalformedBody

__all__ = ["RetryLoop"]

logger = logging.getLogger("gateway_client")

T = TypeVar("T")

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

#: What an attempt's span says when the call ended without a record of it (a bug, cancelled).
_ABANDONED = AttemptRecord(attempt=0, sent=False, outcome="abandoned", decision="raise")

#: Wait sources of the breaker and the concurrency limiter.
BREAKER = "breaker"
CONCURRENCY = "concurrency"


class RetryLoop:
    """The retry loop; see the module docstring. The attributes are set by
    `AcquirerClient.__init__`."""

    _config: AcquirerConfig
    _policy: RetryPolicy
    _clock: Clock
    _sleep: Callable[[float], None]
    _random: Callable[[], float]
    _exchange: Exchange
    _dialect: Dialect
    _log: AttemptLog
    metrics: Metrics
    budget: RetryBudget
    gate: RateGate
    scope: str
    breakers: BreakerSet
    limiter: AimdLimiter
    _state: AttemptState

    def _start(
        self,
        operation: str,
        reference: str,
        key: str | None,
        policy: RetryPolicy | None,
        *,
        group: str | None = None,
        request_id: str | None = None,
    ) -> Progress:
        """A write (`key` set) in the breaker group named like its operation, or a GET;
        `request_id` checked (`check_request_id`)."""
        if policy is not None and not isinstance(policy, RetryPolicy):
            raise TypeError("policy must be a RetryPolicy")
        check_request_id(request_id)
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
            request_id=request_id,
        )

    def _call(
        self,
        progress: Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[Answer], T],
        outcome: Callable[[T], str],
        refusal: Callable[[Answer], object] | None = None,
    ) -> T:
        """One call: attempts until a result, a permanent or final error, or a stop.
        `decode` reads a 2xx answer; `refusal` (a write's) turns an error answer that the
        dialect counts as a result (a decline) into it, else returns None."""
        with call_span(
            progress.operation, self._config.name, progress.reference, progress.request_id
        ):
            try:
                return self._attempts(progress, build, decode, outcome, refusal)
            finally:
                attempt_span_end(progress.span, self._config.name, _ABANDONED)  # a bug, cancelled

    def _attempts(
        self,
        progress: Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[Answer], T],
        outcome: Callable[[T], str],
        refusal: Callable[[Answer], object] | None,
    ) -> T:
        """The loop of `_call`, inside the call's span; each attempt in a span of its own,
        ended by the attempt log with the attempt's record."""
        last: GatewayError | None = None
        try:
            while True:
                progress.log = {}
                progress.span = attempt_span_start(progress.operation)
                with trace.use_span(
                    progress.span, record_exception=False, set_status_on_exception=False
                ):
                    attempt = self._guarded_attempt(progress, build, decode, refusal, last)
                if attempt.error is None:
                    self._log.attempt(progress, attempt, outcome(attempt.result), "return")
                    result = attempt.result
                    if isinstance(result, Authorization | Refund | Received | ActionRequired):
                        result = dataclasses.replace(
                            result,
                            attempts=progress.attempts,
                            attempt_log=tuple(progress.trail),
                        )
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
                # The budget read with the outcome; the retry's admission withdraws it.
                allowed, state = attempt.retry_budget
                if state is not None:
                    progress.budget = state
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
            stop.error.attempt_log = tuple(progress.trail)
            raise stop.error from stop.error.__cause__

    def _guarded_attempt(
        self,
        progress: Progress,
        build: Callable[[httpx.Timeout], httpx.Request],
        decode: Callable[[Answer], Any],
        refusal: Callable[[Answer], object] | None,
        last: GatewayError | None,
    ) -> Attempt:
        """Admission (breaker, gate, slot, budget: one store round trip), one attempt, and
        its outcome (one more)."""
        breaker = self.breakers.get(progress.group)
        admitted = self._admit(progress, breaker, last)
        if last is not None and self._elapsed(progress) >= progress.policy.deadline:
            self._settle(progress, breaker, admitted, None)  # a slow sleep: give it all back
            raise Stop(final_error(progress, last), "deadline")
        try:
            attempt = self._attempt(progress, build, decode, refusal)
        except BaseException:
            self._settle(progress, breaker, admitted, None)  # cancelled or a bug: no verdict
            raise
        self._settle(progress, breaker, admitted, attempt)
        return attempt

    def _admit(
        self, progress: Progress, breaker: CircuitBreaker | None, last: GatewayError | None
    ) -> Admitted:
        """
        Admit the next attempt: the breaker's permit, the gate (waited for when it fits),
        a concurrency slot (waited for up to `policy.concurrency_wait`) and the budget's
        share, all or nothing. Raises Stop when the attempt is not to be sent.
        """
        policy = progress.policy
        gate_waits = 0
        slot_wait_until: float | None = None
        while True:
            admitted = self._state.admit(
                breaker, first=progress.attempts == 0, lease=self._lease(progress)
            )
            if admitted.admission is not None:
                progress.log["breaker"] = admitted.admission.state
            verdict = admitted.verdict
            if verdict == Verdict.ADMITTED:
                progress.budget = admitted.budget
                return admitted
            if verdict == Verdict.BREAKER:
                assert admitted.admission is not None
                refused = self._circuit_error(
                    progress, admitted.admission.state, admitted.admission.retry_after, last
                )
                raise Stop(final_error(progress, refused), "circuit_open")
            if verdict == Verdict.GATE:
                self._wait_for_gate(progress, admitted.gate, gate_waits, last)
                gate_waits += 1
            elif verdict == Verdict.CONCURRENCY:
                if slot_wait_until is None:
                    left = progress.deadline - self._clock.monotonic() - policy.min_attempt_time
                    wait = max(0.0, min(policy.concurrency_wait, left))
                    if wait > 0:
                        self.metrics.increment("concurrency_waits", scope=self.scope)
                    slot_wait_until = self.limiter.now() + wait
                if not self.limiter.wait_step(slot_wait_until):
                    self._concurrency_refused(progress, admitted.limit, last)
            else:  # Verdict.BUDGET: others took the last retry since the outcome's read
                assert last is not None
                progress.budget = admitted.budget
                self.metrics.increment("budget_exhausted", operation=progress.operation)
                raise Stop(budget_error(progress, last, self._config.name), "budget")

    def _settle(
        self,
        progress: Progress,
        breaker: CircuitBreaker | None,
        admitted: Admitted,
        attempt: Attempt | None,
    ) -> None:
        """After an attempt (None: not sent, or cancelled: everything given back as
        ignored): close the gate, release the slot, record the breaker's outcome and, when
        the call may retry, read the gate and the budget, in one store round trip."""
        if attempt is None:
            self._state.settle(
                breaker,
                admitted,
                limiter_outcome=_aimd.IGNORE,
                breaker_outcome=IGNORED,
                duration=None,
            )
            return
        error = attempt.error
        may_retry = error is not None and self._stop_reason(progress, error) is None
        settled = self._state.settle(
            breaker,
            admitted,
            limiter_outcome=limiter_outcome(error),
            breaker_outcome=breaker_outcome(error),
            duration=self._clock.monotonic() - attempt.started,
            close_gate=attempt.close_gate,
            read=may_retry,
        )
        if settled.recorded is not None:
            attempt.breaker = settled.recorded
            progress.log["breaker"] = settled.recorded.state
        attempt.gate = settled.gate
        if may_retry:
            attempt.retry_budget = settled.retry_allowed()

    def _lease(self, progress: Progress) -> float:
        return max(0.0, progress.deadline - self._clock.monotonic()) + _LEASE_MARGIN

    def _concurrency_refused(
        self, progress: Progress, limit: int, last: GatewayError | None
    ) -> NoReturn:
        """No concurrency slot was free in time: raise Stop with ConcurrencyLimitedError."""
        self.metrics.increment("concurrency_refused", scope=self.scope)
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
        refusal: Callable[[Answer], object] | None = None,
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
        timeout = _attempt_timeout(progress.policy, left)
        status_code: int | None = None
        provider_request_id: str | None = None
        server_wait: ServerWait | None = None
        close_gate: float | None = None  # closed for every process by the outcome's script
        try:
            answer = self._exchange.send(call, build(timeout), progress.deadline)
            status_code = answer.status_code
            provider_request_id = self._dialect.provider_request_id(answer.headers)
            server_wait = self._exchange.server_wait(answer)
            if not 200 <= status_code <= 299:
                refused = self._refusal_result(call, answer, refusal)
                if refused is not None:
                    self.metrics.increment("attempts", operation=progress.operation, outcome="ok")
                    return Attempt(
                        None,
                        status_code,
                        started,
                        server_wait,
                        refused,
                        provider_request_id=provider_request_id,
                    )
                error = self._exchange.status_error(call, answer, server_wait)
                error.provider_retry = self._dialect.retry_hint(answer)
                if isinstance(error, PermanentError) and self._dialect.misuse(error.code):
                    self._misuse(progress, error)
                if (
                    isinstance(error, RateLimitedError | AcquirerUnavailableError)
                    and server_wait is not None
                    and server_wait.seconds is not None
                ):
                    close_gate = server_wait.seconds  # for every process
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
            error.provider_request_id = provider_request_id
            return Attempt(
                error,
                error.status_code,
                started,
                server_wait,
                close_gate=close_gate,
                provider_request_id=provider_request_id,
            )
        self.metrics.increment("attempts", operation=progress.operation, outcome="ok")
        if server_wait is not None and server_wait.source == QUOTA_HEADER and server_wait.seconds:
            # The answer spent the last of the quota: close the gate before anyone gets a 429.
            close_gate = server_wait.seconds
        return Attempt(
            None,
            status_code,
            started,
            server_wait,
            result,
            close_gate=close_gate,
            provider_request_id=provider_request_id,
        )

    def _misuse(self, progress: Progress, error: GatewayError) -> None:
        """The provider says our request misused its API (the dialect's `misuse`): count it
        and log at ERROR, naming the operation, the acquirer and the code (an alert)."""
        self.metrics.increment("idempotency_misuse", operation=progress.operation)
        logger.error(
            "acquirer %s refused %s with %s: a bug of ours (the idempotency key was reused "
            "with other parameters); not retried",
            self._config.name,
            progress.operation,
            error.code,
            extra={"gateway_acquirer": self._config.name, "gateway_code": error.code},
        )

    def _refusal_result(
        self, call: CallLabel, answer: Answer, refusal: Callable[[Answer], object] | None
    ) -> object:
        """The result an error answer stands for (the dialect's `refusal_result`: a decline
        answered as an error), or None; a result that is not the documented one raises the
        MalformedResponseError of a garbled answer."""
        if refusal is None:
            return None
        try:
            return refusal(answer)
        except MalformedBody as exc:
            raise self._exchange.error(
                MalformedResponseError,
                call,
                f"HTTP {answer.status_code} with a body that is not the documented JSON: {exc}",
                status_code=answer.status_code,
            ) from None

    def _stop_reason(self, progress: Progress, error: GatewayError) -> str | None:
        """Why the call ends after this error, or None to try again. The provider's own word
        (`provider_retry`, the dialect's `retry_hint`) overrides the status: False never
        retries; True retries a refusal, but an ambiguous outcome still only with a key the
        acquirer honours."""
        if error.provider_retry is False:
            return "provider_no_retry"
        if isinstance(error, PermanentError) and error.provider_retry is not True:
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
        gate = attempt.gate if attempt.gate is not None else self.gate.remaining(self.scope)
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

    def _wait_for_gate(
        self, progress: Progress, remaining: float, waits: int, last: GatewayError | None
    ) -> None:
        """The gate is closed for `remaining` seconds (`waits` waits so far): wait for it,
        or raise Stop if that does not fit."""
        policy = progress.policy
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
        progress.gate_waited += remaining + jitter
        self._sleep(remaining + jitter)

    def _elapsed(self, progress: Progress) -> float:
        return self._clock.monotonic() - progress.started


# The timeouts of an attempt with time enough left for the policy's own, by (connect, read)
# seconds (the policies in use are few: the client's and the callers'; at most this many kept).
_FULL_TIMEOUTS: dict[tuple[float, float], httpx.Timeout] = {}
_MAX_FULL_TIMEOUTS = 64


def _attempt_timeout(policy: RetryPolicy, left: float) -> httpx.Timeout:
    """The attempt's timeouts: the policy's, each cut to the `left` seconds of the call."""
    connect, read = policy.connect_timeout, policy.read_timeout
    if left >= connect and left >= read:
        timeout = _FULL_TIMEOUTS.get((connect, read))
        if timeout is None:
            timeout = httpx.Timeout(connect=connect, read=read, write=read, pool=connect)
            if len(_FULL_TIMEOUTS) < _MAX_FULL_TIMEOUTS:
                _FULL_TIMEOUTS[(connect, read)] = timeout
        return timeout
    return httpx.Timeout(
        connect=min(policy.connect_timeout, left),
        read=min(policy.read_timeout, left),
        write=min(policy.read_timeout, left),
        pool=min(policy.connect_timeout, left),
    )
