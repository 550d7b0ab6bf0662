"""
The retry policy: how many attempts, how long to wait between them, and how long in total.

`RetryPolicy()` holds the defaults for the synchronous API path (a merchant waiting on
`POST /payments`):

| field           | default | why                                                              |
| --------------- | ------- | ---------------------------------------------------------------- |
| max_attempts    | 3       | 1 attempt + 2 retries: shallow (SRE book: at most 3 per request) |
| backoff_base    | 0.2 s   | full jitter bound 0.2 s before the first retry, 0.4 s before the |
|                 |         | second: short enough for a merchant who is waiting               |
| backoff_cap     | 2.0 s   | no single backoff longer than 2 s within an 8 s deadline         |
| connect_timeout | 1.0 s   | a regional connect takes milliseconds; 1 s means a dead host,    |
|                 |         | and nothing was sent, so the retry is safe                       |
| read_timeout    | 3.0 s   | per read (and per write); an authorisation takes well under 1 s  |
| deadline        | 8.0 s   | the whole call, sleeps included: below the usual 10 s timeout of |
|                 |         | a merchant's HTTP client, so we answer before they give up       |
| max_server_wait | 30.0 s  | the longest Retry-After / quota wait worth sleeping on; within   |
|                 |         | an 8 s deadline it never applies, for reconciliation it does     |
| min_attempt_time| 0.5 s   | a retry is sent only if this much time is left for it after the  |
|                 |         | sleep: a POST cut off by the deadline turns a clean "not         |
|                 |         | applied" into an ambiguous outcome that needs reconciliation     |
| concurrency_wait| 0.1 s   | how long an attempt may wait for a concurrency slot of its quota |
|                 |         | scope (aimd.py) once rate limits lowered the limit: briefly on   |
|                 |         | the API path; background senders pass a longer wait              |
| retry_ambiguous | True    | re-send ambiguous outcomes (500, 502, 504, read timeout, reset,  |
|                 |         | garbled answer, 409) with the same idempotency key, and only     |
|                 |         | when the acquirer honours keys                                   |
|                 |         | (AcquirerConfig.honours_idempotency_keys)                        |

Every value is per call too (`client.authorize(request, policy=...)`): reconciliation uses a
longer deadline and its own attempts. `AcquirerClient(config)` without a policy uses these
defaults with the config's connect and read timeouts.

Retry in one layer only: the client is the only inner retry layer. Celery tasks and
reconciliation must not wrap it in retries of their own (3 attempts inside 3 task retries make
9 calls for one logical call); they re-run later, at a pace set by the database schedule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from resilience.validate import positive_int, positive_seconds

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """
    How one call retries (immutable). Times are seconds (int or float).

    `max_attempts` >= 1 counts every request sent, the first included. Backoff before retry n
    (n = 0 first) is full jitter: uniform(0, min(backoff_cap, backoff_base * 2**n)).
    `connect_timeout` and `read_timeout` are per attempt, and each is cut to the time left
    before `deadline`, which bounds the whole call (answers included: a trickling answer is
    cut off at the deadline). A retry (or a wait for the rate gate) happens only if, after the
    sleep, at least `min_attempt_time` is left before the deadline. A server wait above
    `max_server_wait` (or past the deadline) is not slept on: the call fails at once with the
    full wait. Before each attempt a concurrency slot of the quota scope is awaited for at
    most `concurrency_wait` seconds (never past the deadline). Raises ValueError on bad values.
    """

    max_attempts: int = 3
    backoff_base: float = 0.2
    backoff_cap: float = 2.0
    connect_timeout: float = 1.0
    read_timeout: float = 3.0
    deadline: float = 8.0
    max_server_wait: float = 30.0
    retry_ambiguous: bool = True
    min_attempt_time: float = 0.5
    concurrency_wait: float = 0.1

    def __post_init__(self) -> None:
        positive_int("max_attempts", self.max_attempts)
        positive_seconds("backoff_base", self.backoff_base, allow_zero=True)
        positive_seconds("backoff_cap", self.backoff_cap, allow_zero=True)
        positive_seconds("connect_timeout", self.connect_timeout)
        positive_seconds("read_timeout", self.read_timeout)
        positive_seconds("deadline", self.deadline)
        positive_seconds("max_server_wait", self.max_server_wait, allow_zero=True)
        positive_seconds("min_attempt_time", self.min_attempt_time, allow_zero=True)
        positive_seconds("concurrency_wait", self.concurrency_wait, allow_zero=True)
        if not isinstance(self.retry_ambiguous, bool):
            raise ValueError("retry_ambiguous must be a bool")

    def replace(self, **changes: Any) -> RetryPolicy:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
