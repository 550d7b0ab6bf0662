"""
Retry budgets: retries may add only a small fraction to the load on the acquirer.

`RetryBudget` (the one the client uses) follows Finagle's RetryBudget (a token bucket whose
deposits expire, with a reserve), kept in a StateStore so every process calling the same
acquirer shares it:

- every first attempt deposits `percent_can_retry` of a retry (0.1: ten first attempts earn
  one retry);
- every retry withdraws one whole retry, and only if the balance allows it;
- deposits and withdrawals count for `ttl` seconds (a sliding window of `ttl / slots`-second
  slots), then expire;
- `min_retries_per_second * ttl` retries are always in reserve, so a quiet service can still
  retry a rare failure.

Over any window of `ttl` seconds: retries <= reserve + percent_can_retry * first attempts.

The numbers (the defaults): `percent_can_retry=0.1` (the SRE book's 10 % per-client retry
ratio; Finagle's own default is 20 %), `ttl=10.0` s (Finagle), `min_retries_per_second=10`
(Finagle), so a reserve of 100 retries per 10 s. During a fleet-wide outage with R first
attempts per 10 s, the acquirer sees at most R * 1.1 + 100 requests per 10 s instead of R * 3.
An empty budget never blocks: the call fails at once (`RetryBudgetExhaustedError`, or the
ambiguous error when an earlier attempt may have been applied).

Amounts are kept in integer thousandths of a retry, so the arithmetic is exact in Lua too.

gRPC's client retry throttling (gRFC A6), modelled for comparison, is bench/grpc_throttle.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import _twins
from .store import AtomicScript, StateStore

__all__ = ["ONE_RETRY", "BudgetState", "RetryBudget", "budget_state"]

_SCALE = 1000  # thousandths of a retry

BUDGET_SCRIPT = AtomicScript.packaged("retry_budget", "budget.lua", _twins.budget)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A budget reading: `retries_available` (whole retries now), `balance` (fractional)."""

    retries_available: int
    balance: float


#: One retry, in the script's unit (thousandths of a retry): what a retry withdraws.
ONE_RETRY = _SCALE


def budget_state(balance: float) -> BudgetState:
    """The BudgetState of a balance in thousandths of a retry, as the script answers it."""
    return BudgetState(max(0, int(balance // _SCALE)), balance / _SCALE)


class RetryBudget:
    """
    Finagle-style retry budget for one acquirer, in a StateStore (see the module docstring).

    `name`: the budget's key (the acquirer's name). `ttl`: seconds a deposit or withdrawal
    counts. `min_retries_per_second`: the reserve rate (reserve = rate * ttl retries).
    `percent_can_retry`: the fraction of a retry each first attempt earns (0 <= p <= 1).
    `slots`: window granularity (ttl / slots seconds per slot). Raises ValueError on bad numbers.
    """

    def __init__(
        self,
        store: StateStore,
        name: str,
        *,
        ttl: float = 10.0,
        min_retries_per_second: float = 10.0,
        percent_can_retry: float = 0.1,
        slots: int = 10,
    ) -> None:
        if not (math.isfinite(ttl) and ttl > 0):
            raise ValueError("ttl must be a positive number of seconds")
        if not (math.isfinite(min_retries_per_second) and min_retries_per_second >= 0):
            raise ValueError("min_retries_per_second must be >= 0")
        if not (math.isfinite(percent_can_retry) and 0 <= percent_can_retry <= 1):
            raise ValueError("percent_can_retry must be between 0 and 1")
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.store = store
        self.name = name
        self.ttl = float(ttl)
        self.min_retries_per_second = float(min_retries_per_second)
        self.percent_can_retry = float(percent_can_retry)
        self.slots = int(slots)
        self._deposit = round(percent_can_retry * _SCALE)
        self._reserve = round(min_retries_per_second * ttl * _SCALE)

    def record_request(self) -> BudgetState:
        """A first attempt is being sent: deposit its share of a retry."""
        return self._run("deposit", self._deposit)[1]

    def try_withdraw(self) -> tuple[bool, BudgetState]:
        """Take one retry if the balance allows; returns (allowed, state after). Never blocks."""
        return self._run("withdraw", ONE_RETRY)

    def state(self) -> BudgetState:
        """The balance now, without changing it."""
        return self._run("read", 0)[1]

    @property
    def key(self) -> str:
        """The budget's key in the store (before the store's namespace)."""
        return f"budget:{self.name}"

    def _args(self, op: str, amount: int) -> list[str | int | float]:
        """The script's arguments: op, amount, reserve, slot seconds, slots."""
        return [op, amount, self._reserve, self.ttl / self.slots, self.slots]

    def _run(self, op: str, amount: int) -> tuple[bool, BudgetState]:
        ok, balance = self.store.run(BUDGET_SCRIPT, [self.key], self._args(op, amount))
        return ok == 1, budget_state(balance)

    def __repr__(self) -> str:
        return (
            f"RetryBudget(name={self.name!r}, ttl={self.ttl}, "
            f"min_retries_per_second={self.min_retries_per_second}, "
            f"percent_can_retry={self.percent_can_retry})"
        )
