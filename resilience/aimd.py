"""
Adaptive concurrency per quota scope: additive increase, multiplicative decrease (AIMD).

A rate-limit answer (429, or a 403 confirmed as a secondary rate limit) says the fleet sends
too much at once for this quota scope; lowering the concurrency, then raising it gradually,
finds the rate the acquirer accepts (docs/reference/retries.md, Netflix concurrency-limits'
AIMDLimit):

- on a drop (a rate-limit answer): new = max(min_limit, min(limit - 1, int(limit * 0.9)));
  10 -> 9, 2 -> 1, 1 stays 1;
- on a success: + 1, only when the call was sent with at least half the limit in flight
  (in_flight * 2 >= limit, the count when its slot was taken, itself included), up to
  `max_limit`: 9 -> 10 with 5 in flight, 9 stays 9 with 4;
- any other outcome (a failure, a 4xx, a cancelled call) leaves the limit alone.

The limit and the slots live in the StateStore (one hash per scope, `aimd:<scope>`), so every
process sharing the scope shares one limit. A slot is a lease that expires (a caller killed
mid-call frees its slot when the lease ends; the client leases for the call's remaining
deadline plus a margin). `AimdLimiter.acquire(scope, wait=...)` polls for a free slot for at
most `wait` seconds and never blocks longer: the client's synchronous path waits briefly
(`RetryPolicy.concurrency_wait`, 0.1 s by default), background senders (reconciliation) pass a
longer wait in their own policy.

Defaults (`AimdConfig()`): `initial_limit` = `max_limit` = 100 concurrent calls per scope,
above the fleet's expected peak, so the limiter changes nothing until the acquirer answers
with a rate limit; `min_limit` 1 (docs/reference/retries.md); `backoff_ratio` 0.9 (Netflix).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import _twins
from .metrics import Metrics, NullMetrics
from .store import AtomicScript, StateStore
from .validate import positive_int, positive_seconds

__all__ = [
    "DROP",
    "IGNORE",
    "SUCCESS",
    "AimdConfig",
    "AimdLimiter",
    "LimiterSnapshot",
    "Slot",
    "aimd_next_limit",
]

logger = logging.getLogger("gateway_client.aimd")

#: Outcomes handed to `AimdLimiter.release`.
DROP = "drop"
SUCCESS = "success"
IGNORE = "ignore"


def aimd_next_limit(
    limit: int,
    *,
    in_flight: int,
    dropped: bool,
    max_limit: int,
    min_limit: int = 1,
    backoff_ratio: float = 0.9,
) -> int:
    """
    The limit after one result: a drop gives max(min_limit, min(limit - 1, int(limit *
    backoff_ratio))); a success with in_flight * 2 >= limit gives min(max_limit, limit + 1);
    otherwise the limit is unchanged.
    """
    if dropped:
        return max(min_limit, min(limit - 1, math.floor(limit * backoff_ratio)))
    if in_flight * 2 >= limit:
        return min(max_limit, limit + 1)
    return limit


@dataclass(frozen=True, slots=True)
class AimdConfig:
    """
    The limiter's numbers (immutable; see the module docstring for the defaults' reasons).

    `initial_limit`: the limit of a scope never seen before. `max_limit`, `min_limit`: its
    bounds. `backoff_ratio`: the multiplicative decrease. `slot_lease`: seconds a slot is held
    when the caller gives no lease. `poll_interval`: seconds between two tries while waiting.
    """

    initial_limit: int = 100
    max_limit: int = 100
    min_limit: int = 1
    backoff_ratio: float = 0.9
    slot_lease: float = 60.0
    poll_interval: float = 0.01

    def __post_init__(self) -> None:
        for name in ("initial_limit", "max_limit", "min_limit"):
            positive_int(name, getattr(self, name))
        if not self.min_limit <= self.initial_limit <= self.max_limit:
            raise ValueError("min_limit <= initial_limit <= max_limit is required")
        if not (0 < self.backoff_ratio < 1):
            raise ValueError("backoff_ratio must be between 0 and 1 (exclusive)")
        positive_seconds("slot_lease", self.slot_lease)
        positive_seconds("poll_interval", self.poll_interval)


@dataclass(frozen=True, slots=True)
class Slot:
    """A held concurrency slot: hand it back to `AimdLimiter.release`."""

    scope: str
    slot_id: str
    limit: int
    in_flight: int


@dataclass(frozen=True, slots=True)
class LimiterSnapshot:
    """A scope's `limit`, slots `in_flight` now, and the `decreases`/`increases` so far."""

    scope: str
    limit: int
    in_flight: int
    max_limit: int
    decreases: int
    increases: int


#: The limiter's one atomic script: lua/aimd.lua and its twin (see the file's header).
AIMD_SCRIPT = AtomicScript.packaged("aimd_limiter", "aimd.lua", _twins.aimd)


class AimdLimiter:
    """
    AIMD concurrency limits per quota scope, in a StateStore (see the module docstring).

    `try_acquire(scope)` takes a slot now or returns None; `acquire(scope, wait=s)` polls up
    to `s` seconds (with the injected `sleep` and `monotonic`); `release(slot, outcome)` gives
    it back with DROP, SUCCESS or IGNORE and applies the AIMD rule; `snapshot(scope)` reads
    the limit. `metrics` receives `concurrency_limit_changes` {scope, direction},
    `concurrency_waits` {scope} and `concurrency_refused` {scope}.
    """

    def __init__(
        self,
        store: StateStore,
        config: AimdConfig | None = None,
        *,
        metrics: Metrics | None = None,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        if config is not None and not isinstance(config, AimdConfig):
            raise TypeError("config must be an AimdConfig")
        self.store = store
        self.config = config if config is not None else AimdConfig()
        self.metrics: Metrics = metrics if metrics is not None else NullMetrics()
        self._sleep = sleep if sleep is not None else time.sleep
        self._monotonic = monotonic if monotonic is not None else time.monotonic

    def try_acquire(self, scope: str, *, lease: float | None = None) -> Slot | None:
        """Take a slot of `scope` for `lease` seconds (default the config's) if one is free."""
        seconds = self.config.slot_lease if lease is None else lease
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError("lease must be a positive number of seconds")
        slot_id = uuid.uuid4().hex
        granted, limit, _, _, _, mine = self._run(scope, "acquire", slot_id, float(seconds))
        if granted != 1:
            return None
        return Slot(scope, slot_id, int(limit), int(mine))

    def acquire(self, scope: str, *, wait: float = 0.0, lease: float | None = None) -> Slot | None:
        """Take a slot, polling for at most `wait` seconds; None if none was free in time."""
        slot = self.try_acquire(scope, lease=lease)
        if slot is not None or wait <= 0:
            if slot is None:
                self.metrics.increment("concurrency_refused", scope=scope)
            return slot
        self.metrics.increment("concurrency_waits", scope=scope)
        deadline = self._monotonic() + wait
        while slot is None:
            left = deadline - self._monotonic()
            if left <= 0:
                self.metrics.increment("concurrency_refused", scope=scope)
                return None
            self._sleep(min(self.config.poll_interval, left))
            slot = self.try_acquire(scope, lease=lease)
        return slot

    def release(self, slot: Slot, outcome: str) -> int:
        """Give `slot` back with its outcome (DROP, SUCCESS or IGNORE); returns the new limit."""
        if outcome not in (DROP, SUCCESS, IGNORE):
            raise ValueError("outcome must be DROP, SUCCESS or IGNORE")
        return self._released(slot, self._run(slot.scope, "release", slot.slot_id, outcome))

    def _released(self, slot: Slot, values: Sequence[float]) -> int:
        """After a `release` answer: count and log a change of the limit; the new limit."""
        change, limit, in_flight = values[0], values[1], values[2]
        if change != 0:
            direction = "down" if change < 0 else "up"
            self.metrics.increment(
                "concurrency_limit_changes", scope=slot.scope, direction=direction
            )
            logger.log(
                logging.WARNING if change < 0 else logging.INFO,
                "concurrency limit of scope %s %s to %d (%s; %d in flight)",
                slot.scope,
                "lowered" if change < 0 else "raised",
                int(limit),
                "rate limited" if change < 0 else "success at high concurrency",
                int(in_flight),
                extra={
                    "gateway_scope": slot.scope,
                    "gateway_concurrency_limit": int(limit),
                    "gateway_concurrency_direction": direction,
                    "gateway_concurrency_in_flight": int(in_flight),
                },
            )
        return int(limit)

    def snapshot(self, scope: str) -> LimiterSnapshot:
        """The scope's limit and slots in flight now (read-only)."""
        _, limit, in_flight, dec, inc, _ = self._run(scope, "read", "", "")
        return LimiterSnapshot(
            scope, int(limit), int(in_flight), self.config.max_limit, int(dec), int(inc)
        )

    def wait_step(self, until: float) -> bool:
        """
        One pause of a wait for a slot that ends at `until` (the limiter's monotonic
        seconds): sleeps `min(poll_interval, time left)` and returns True, or returns False
        at once when no time is left.
        """
        left = until - self._monotonic()
        if left <= 0:
            return False
        self._sleep(min(self.config.poll_interval, left))
        return True

    def now(self) -> float:
        """The limiter's monotonic clock (seconds), the one `wait_step` reads."""
        return self._monotonic()

    def _config_args(self) -> list[str | int | float]:
        """The script's limiter arguments (initial, max, min, ratio), after the op."""
        config = self.config
        return [
            config.initial_limit,
            config.max_limit,
            config.min_limit,
            float(config.backoff_ratio),
        ]

    def _run(self, scope: str, op: str, slot_id: str, arg: str | float) -> list[float]:
        return self.store.run(
            AIMD_SCRIPT, [f"aimd:{scope}"], [op, *self._config_args(), slot_id, arg]
        )

    def __repr__(self) -> str:
        return f"AimdLimiter(config={self.config!r})"
