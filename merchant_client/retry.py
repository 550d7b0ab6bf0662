"""
When the merchant client retries, and how long it waits: one pure function, `decide`.

The rules follow the API's contract (docs/api.md, "Errors" and "Idempotency contract"); every
attempt of one call sends the same idempotency key:

| outcome of an attempt                                  | retried?                           |
| ------------------------------------------------------ | ---------------------------------- |
| 2xx (201, 200, and 202 `Pending`: not a failure)        | no: a result                       |
| refused connection, DNS, connect timeout (not sent)     | yes, after the backoff             |
| reset or close after sending, read timeout, garbled 2xx | yes, after the backoff (same key)  |
| 409 `idempotency_key_in_use`                            | yes, after `Retry-After`           |
| 503, 429                                                | yes, after `Retry-After`, if the   |
|                                                         | deadline allows                    |
| 500, 504, any other 5xx                                 | yes, after the backoff (same key)  |
| 502 `acquirer_error`                                    | no: a stored answer, replayed as is|
| 400, 401, 403, 404, 422, another 409, other 4xx         | never                              |

The wait: the server's `Retry-After` (read by `resilience.parse_retry_after`, strict RFC 9110:
delay-seconds or an HTTP-date; an invalid value is ignored) is a floor, and full jitter
`uniform(0, min(cap, base * 2**n))` (`resilience.full_jitter`, n = 0 before the
first retry) is added above it. A server wait longer than `policy.max_server_wait`, or one
that would leave less than `policy.min_attempt_time` before the deadline, is not slept on:
the call stops at once and its error carries the full `retry_after` (ADR 0014). The same
check with the jitter added stops a backoff that does not fit. `policy.max_attempts` counts
every request, the first included.

`policy` is a `gateway_client.RetryPolicy` (its `concurrency_wait` is not used here);
`DEFAULT_POLICY` holds the merchant client's defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway_client import RetryPolicy
from resilience import full_jitter, parse_retry_after

__all__ = [
    "AMBIGUOUS",
    "DEFAULT_POLICY",
    "NOT_SENT",
    "Decision",
    "Outcome",
    "decide",
]

#: The merchant client's defaults: 3 attempts within 30 s (sleeps included); per attempt a
#: 2 s connect and a 10 s read timeout (the API answers within its own 8 s acquirer deadline);
#: full jitter bounds 0.5 s, then 1 s; server waits up to 30 s are slept on while they fit.
DEFAULT_POLICY = RetryPolicy(
    max_attempts=3,
    deadline=30.0,
    connect_timeout=2.0,
    read_timeout=10.0,
    backoff_base=0.5,
    backoff_cap=5.0,
    max_server_wait=30.0,
    min_attempt_time=0.5,
)

#: `Outcome.transport` values: no answer, and certainly not sent / perhaps applied.
NOT_SENT = "not_sent"
AMBIGUOUS = "ambiguous"

#: Statuses whose `Retry-After` is the wait to honour (409 only with idempotency_key_in_use).
_SERVER_WAIT_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class Outcome:
    """
    What one attempt produced: `status_code` and `headers` of an answer (`code`: its problem
    code, or None), or `transport` (`NOT_SENT` or `AMBIGUOUS`) when no complete answer came.
    """

    status_code: int | None = None
    headers: Mapping[str, str] | None = None
    code: str | None = None
    transport: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """
    `retry`: send again after `wait` seconds. Otherwise `reason` says why the call ends
    (`result`, `never`, `max_attempts`, `server_wait_too_long`, `deadline`, `ambiguous`) and
    `retry_after` is the server's wait in seconds (None if it gave none).
    """

    retry: bool
    wait: float
    reason: str
    retry_after: float | None = None


def server_wait(outcome: Outcome, *, now: float) -> float | None:
    """The answer's `Retry-After` in seconds (`now`: wall-clock Unix seconds for an
    HTTP-date), None when absent or invalid."""
    headers = outcome.headers or {}
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    return parse_retry_after(value, now=now)


def retry_kind(outcome: Outcome) -> str:
    """`result`, `never`, `wait` (retry after Retry-After) or `resend` (retry after backoff)."""
    if outcome.transport is not None:
        return "resend"
    status = outcome.status_code
    assert status is not None, "an outcome has a status or a transport failure"
    if 200 <= status <= 299:
        return "result"
    if status in _SERVER_WAIT_STATUSES:
        return "wait"
    if status == 409 and outcome.code == "idempotency_key_in_use":
        return "wait"
    if status == 502 and outcome.code == "acquirer_error":
        return "never"
    if 500 <= status <= 599:
        return "resend"
    return "never"


def decide(
    outcome: Outcome,
    *,
    attempts: int,
    elapsed: float,
    policy: RetryPolicy,
    now: float,
    random: Callable[[], float],
) -> Decision:
    """
    Whether to send again after `outcome`, and the sleep before it (seconds).

    `attempts`: requests sent so far (>= 1); `elapsed`: seconds since the call started
    (monotonic); `now`: wall-clock Unix seconds (to read an HTTP-date `Retry-After`);
    `random`: a float in [0, 1) for the jitter. Pure: reads nothing else.
    """
    kind = retry_kind(outcome)
    floor = server_wait(outcome, now=now) if kind in ("wait", "resend") else None
    if kind in ("result", "never"):
        return Decision(False, 0.0, kind, server_wait(outcome, now=now))
    if kind == "resend" and not policy.retry_ambiguous and outcome.transport != NOT_SENT:
        return Decision(False, 0.0, "ambiguous", floor)
    if attempts >= policy.max_attempts:
        return Decision(False, 0.0, "max_attempts", floor)
    if floor is not None and (
        floor > policy.max_server_wait
        or elapsed + floor + policy.min_attempt_time > policy.deadline
    ):
        return Decision(False, 0.0, "server_wait_too_long", floor)
    wait = (floor or 0.0) + full_jitter(
        attempts - 1, policy.backoff_base, policy.backoff_cap, random
    )
    if elapsed + wait + policy.min_attempt_time > policy.deadline:
        return Decision(False, 0.0, "deadline", floor)
    return Decision(True, wait, "retry", floor)
