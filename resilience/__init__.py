"""
A framework-free resilience kit: shared state for a fleet of processes, and the rules that
keep one client from making an outage worse.

Plain Python (and httpx for the deadline-aware sockets): no Django, DRF, Celery or project
package is imported here, and no setting or environment variable is read. gateway_client
(the acquirer client) is built on it, and so are the webhook deliveries, the per-merchant
limits and merchant_client:

    store = RedisStore.from_url("redis://127.0.0.1:6379/0", namespace="payments")
    breaker = CircuitBreaker(store, "endpoint-7", BreakerConfig(), name="webhooks")
    admission = breaker.acquire()          # refused while open; record the outcome after
    budget = RetryBudget(store, "acme")    # retries as a share of calls, shared by the fleet
    allowed, remaining, reset, window = store.run(RATE_SCRIPT, ["rate:42"], [100, 60, 42 % 60])

What lives where:

* the state store (store.py): `StateStore`, `MemoryStore` (one process) and `RedisStore`
  (the fleet, falling back to memory while Redis is unreachable); each operation is an
  `AtomicScript`, a Lua program in lua/ and its Python twin (_twins.py, limits.py), run
  against a real Redis by the twin tests;
* the circuit breaker on the failure rate (breaker.py, breaker_types.py), the retry budget
  (budget.py), the adaptive (AIMD) concurrency limit (aimd.py), the shared rate gate
  (gate.py), one attempt's admission and settlement over all four (attempt.py), per-key
  request rates and lease slots (limits.py);
* the server's wait: Retry-After (retry_after.py, RFC 9110), the quota headers (quota.py,
  draft-ietf-httpapi-ratelimit-headers and vendors' forms) read with an RFC 9651 structured
  field parser (structured_fields.py);
* the server's own threads: many waiting on the network, few running (run_slots.py);
* the client's own waits: backoff and jitter (backoff.py), a deadline over the whole call
  with deadline-aware sockets (deadline.py), an injectable clock (clock.py), counters
  (metrics.py), and the number checks of the frozen configs (validate.py).

The names below are the public surface; import them from `resilience`. The modules' other
names (the Lua twins, the scripts' argument encoding) are the kit's own.
"""

from .aimd import AimdConfig, AimdLimiter, LimiterSnapshot, Slot
from .attempt import ADMIT_SCRIPT, SETTLE_SCRIPT
from .backoff import (
    Backoff,
    DecorrelatedJitter,
    EqualJitter,
    ExponentialBackoff,
    FixedInterval,
    FullJitter,
    NoBackoff,
    backoff_bound,
    full_jitter,
)
from .breaker import BreakerSet, CircuitBreaker
from .breaker_types import (
    DEFAULT_GROUPS,
    FAILURE,
    IGNORED,
    SUCCESS,
    Admission,
    BreakerConfig,
    BreakerSnapshot,
    Recorded,
)
from .budget import BudgetState, RetryBudget
from .clock import Clock, ManualClock, SystemClock
from .deadline import attempt_deadline
from .deadline import install as install_deadline
from .gate import RateGate, scope_for
from .limits import RATE_SCRIPT, SLOTS_SCRIPT
from .metrics import CounterMetrics, Metrics, NullMetrics
from .quota import ServerWait, parse_ratelimit, parse_ratelimit_policy, quota_profile
from .retry_after import MAX_DELAY_SECONDS, parse_delay_seconds, parse_http_date, parse_retry_after
from .run_slots import RunSlotPool, RunSlotSnapshot, run_slot_lent
from .store import STORE_NOW, AtomicScript, MemoryKeyspace, MemoryStore, RedisStore, StateStore
from .structured_fields import ParseError, parse_dictionary, parse_item, parse_list
from .validate import positive_int, positive_number, positive_seconds

__all__ = [  # noqa: RUF022 - grouped by part, as the docstring lists them
    # the state store and its scripts
    "StateStore",
    "MemoryStore",
    "RedisStore",
    "MemoryKeyspace",
    "AtomicScript",
    "STORE_NOW",
    "ADMIT_SCRIPT",
    "SETTLE_SCRIPT",
    "RATE_SCRIPT",
    "SLOTS_SCRIPT",
    # the circuit breaker (outcomes for CircuitBreaker.record: SUCCESS, FAILURE, IGNORED)
    "CircuitBreaker",
    "BreakerSet",
    "BreakerConfig",
    "BreakerSnapshot",
    "Admission",
    "Recorded",
    "DEFAULT_GROUPS",
    "SUCCESS",
    "FAILURE",
    "IGNORED",
    # the retry budget, the AIMD limiter, the rate gate
    "RetryBudget",
    "BudgetState",
    "AimdLimiter",
    "AimdConfig",
    "LimiterSnapshot",
    "Slot",
    "RateGate",
    "scope_for",
    # the server's wait: Retry-After, quota headers, structured fields
    "MAX_DELAY_SECONDS",
    "parse_retry_after",
    "parse_delay_seconds",
    "parse_http_date",
    "ServerWait",
    "quota_profile",
    "parse_ratelimit",
    "parse_ratelimit_policy",
    "ParseError",
    "parse_list",
    "parse_dictionary",
    "parse_item",
    # the server's threads: run slots
    "RunSlotPool",
    "RunSlotSnapshot",
    "run_slot_lent",
    # backoff, deadline, clock, metrics, config checks
    "Backoff",
    "ExponentialBackoff",
    "FixedInterval",
    "FullJitter",
    "EqualJitter",
    "DecorrelatedJitter",
    "NoBackoff",
    "backoff_bound",
    "full_jitter",
    "attempt_deadline",
    "install_deadline",
    "Clock",
    "SystemClock",
    "ManualClock",
    "Metrics",
    "NullMetrics",
    "CounterMetrics",
    "positive_int",
    "positive_number",
    "positive_seconds",
]
