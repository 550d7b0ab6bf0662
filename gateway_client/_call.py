"""
The running state of one call to the acquirer, as the retry loop (client.py), the exchange
(_exchange.py) and the attempt log (_attempt_log.py) share it, and the errors a call ends
with when the client itself stops it (breaker, gate, concurrency limiter, retry budget, or an
earlier ambiguous attempt). Internal: nothing here is public; every value lives for one call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from opentelemetry import trace

from resilience.breaker_types import Recorded
from resilience.budget import BudgetState
from resilience.quota import ServerWait
from resilience.retry_after import MAX_DELAY_SECONDS

from .errors import (
    AmbiguousOutcomeError,
    CircuitOpenError,
    ConcurrencyLimitedError,
    GatewayError,
    RateLimitedError,
    RetryableError,
    RetryBudgetExhaustedError,
)
from .policy import RetryPolicy
from .types import AttemptRecord

__all__ = [
    "Answer",
    "Attempt",
    "CallLabel",
    "Progress",
    "Stop",
    "budget_error",
    "circuit_error",
    "concurrency_error",
    "final_error",
    "gate_error",
    "set_wait",
]


@dataclass(frozen=True, slots=True)
class CallLabel:
    """
    What one attempt is about: enough to label its errors and its log lines. `reference`:
    what the call is about (our payment reference for authorize and lookup, the acquirer's
    charge id for capture and void, our refund reference for refund and lookup_refunds).
    """

    operation: str
    reference: str
    idempotency_key: str | None
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class Answer:
    """The acquirer's answer to one request: status, headers and the body as read."""

    status_code: int
    headers: httpx.Headers
    body: bytes | None  # None: the body could not be read (the status still counts)


@dataclass(slots=True)
class Attempt:
    """
    The outcome of one attempt, as the retry loop needs it. `close_gate`: seconds the
    answer closes the scope's gate for (None: it leaves it). Set by the outcome's store
    round trip: `breaker` (the breaker's state after the record), and, when the call may
    retry, `gate` (seconds until the gate opens) and `retry_budget` (whether the budget
    allows a retry, and its state after that retry).
    """

    error: GatewayError | None
    status_code: int | None
    started: float
    server_wait: ServerWait | None = None
    result: Any = None
    breaker: Recorded | None = None
    close_gate: float | None = None
    gate: float | None = None
    retry_budget: tuple[bool, BudgetState | None] = (True, None)
    provider_request_id: str | None = None


@dataclass(slots=True)
class Progress:
    """
    The running state of one call: attempts so far, the deadline, what the log needs, and
    `trail`, the call's AttemptRecords so far (the attempt log writes one per line), and
    `span`, the running attempt's span, which the attempt log ends with its record.
    `operation` labels the call (errors, metrics, log); `group` names its circuit breaker;
    `safe` is True for a GET (every ambiguous outcome may be repeated); `reference` as in
    CallLabel; `request_id` the caller's id of the request behind the call (sent on every
    attempt, logged), or None.
    """

    operation: str
    group: str
    safe: bool
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
    request_id: str | None = None
    trail: list[AttemptRecord] = field(default_factory=list)
    span: trace.Span | None = None  # the running attempt's span (_tracing.py), until its record


class Stop(Exception):  # a control-flow signal inside the client, never raised out
    """End the call by raising `error`; `reason` and `attempt` go to the log."""

    def __init__(self, error: GatewayError, reason: str, attempt: Attempt | None = None) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason
        self.attempt = attempt


# -- the errors a call ends with ---------------------------------------------------------------


def set_wait(
    error: GatewayError, seconds: float, source: str, not_before: Callable[[float], datetime]
) -> None:
    """Give a RetryableError its wait: `retry_after` (capped), `not_before` and its source."""
    if isinstance(error, RetryableError):
        seconds = min(seconds, float(MAX_DELAY_SECONDS))
        error.retry_after = seconds
        error.not_before = not_before(seconds)
        error.wait_source = source


def final_error(progress: Progress, error: GatewayError) -> GatewayError:
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


def budget_error(progress: Progress, error: GatewayError, acquirer: str) -> GatewayError:
    """A retry was refused by the budget: RetryBudgetExhaustedError (or the ambiguous error)."""
    if progress.ambiguous is not None:
        return final_error(progress, error)
    exhausted = RetryBudgetExhaustedError(
        f"{progress.operation} at acquirer {acquirer!r}: retry budget exhausted "
        f"after {progress.attempts} attempt(s); last: {type(error).__name__}"
        " [RetryBudgetExhaustedError]",
        operation=progress.operation,
        attempts=progress.attempts,
        idempotency_key=progress.idempotency_key,
        status_code=error.status_code,
        code=error.code,
        acquirer=acquirer,
        last_error=type(error).__name__,
    )
    if isinstance(error, RetryableError):
        exhausted.retry_after = error.retry_after
        exhausted.not_before = error.not_before
        exhausted.wait_source = error.wait_source
    exhausted.__cause__ = error
    return exhausted


def gate_error(progress: Progress, acquirer: str) -> RateLimitedError:
    """Not sent: the rate gate of the quota scope is closed (the caller sets the wait)."""
    return RateLimitedError(
        f"{progress.operation} at acquirer {acquirer!r}: not sent, the rate "
        "gate of its quota scope is closed [RateLimitedError]",
        operation=progress.operation,
        attempts=progress.attempts,
        idempotency_key=progress.idempotency_key,
        acquirer=acquirer,
    )


def circuit_error(
    progress: Progress, acquirer: str, state: str, retry_after: float
) -> CircuitOpenError:
    """Not sent: the breaker of the operation's group is `state` (the caller sets the wait)."""
    return CircuitOpenError(
        f"{progress.operation} at acquirer {acquirer!r}: not sent, the circuit "
        f"breaker of group {progress.group!r} is {state}; probes in "
        f"{retry_after:.3f} s [CircuitOpenError]",
        operation=progress.operation,
        attempts=progress.attempts,
        idempotency_key=progress.idempotency_key,
        acquirer=acquirer,
        group=progress.group,
        state=state,
    )


def concurrency_error(
    progress: Progress, acquirer: str, scope: str, limit: int
) -> ConcurrencyLimitedError:
    """Not sent: no concurrency slot of `scope` was free (limit `limit`)."""
    return ConcurrencyLimitedError(
        f"{progress.operation} at acquirer {acquirer!r}: not sent, no concurrency "
        f"slot of its quota scope was free (limit {limit}) [ConcurrencyLimitedError]",
        operation=progress.operation,
        attempts=progress.attempts,
        idempotency_key=progress.idempotency_key,
        acquirer=acquirer,
        scope=scope,
        limit=limit,
    )
