"""
The shared state of one attempt in two store round trips: `admit` before sending, `settle`
after (ADR 0025). The scripts are resilience's (`resilience.attempt`); this module builds
their arguments from the client's parts and reads their answers.

`admit` runs lua/admit.lua (twin: `_twins.admit`): the breaker's permit, the rate gate, a
concurrency slot and the retry budget's share (a first attempt deposits, a retry withdraws),
all or nothing: the first step that refuses decides (`Verdict`), and what earlier steps took
goes back inside the same atomic script. `settle` runs lua/settle.lua (twin:
`_twins.settle`): the gate closed for the server's wait, the slot given back with the AIMD
outcome, the breaker's record, and, when the call may retry, the gate and the budget read
for the retry loop's decision. The two scripts call the parts' own programs (breaker.lua,
aimd.lua, budget.lua, gate_read.lua, gate_close.lua) as Lua functions, so each rule is still
written once in Lua and once in Python.

Both scripts need the four parts in one store. A client whose budget, limiter or breakers
were built on other stores gets the same steps, in the same order and with the same
give-backs, one script per step (`AttemptState.merged` is False).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from resilience import aimd as _aimd
from resilience.aimd import AimdConfig, AimdLimiter, Slot
from resilience.attempt import ADMIT_SCRIPT, SETTLE_SCRIPT
from resilience.breaker import BreakerSet, CircuitBreaker
from resilience.breaker_types import DEFAULT_GROUPS, Admission, BreakerConfig, Recorded
from resilience.budget import ONE_RETRY, BudgetState, RetryBudget, budget_state
from resilience.clock import Clock
from resilience.gate import RateGate
from resilience.metrics import Metrics
from resilience.store import AtomicScript, StateStore, arg_text

__all__ = [
    "Admitted",
    "AttemptState",
    "Settled",
    "Verdict",
    "aimd_limiter",
    "breaker_set",
]


class Verdict:
    """The admission's answer: admitted, or which step refused (the scripts' codes)."""

    ADMITTED = 0
    BREAKER = 1
    GATE = 2
    CONCURRENCY = 3
    BUDGET = 4


@dataclass(frozen=True, slots=True)
class Admitted:
    """
    What `admit` answered. `verdict`: a `Verdict` code. `admission`: the breaker's answer
    (None without a breaker, or when an earlier step refused). `slot`: the concurrency slot
    (None unless admitted). `gate`: seconds until the gate opens (when it refused). `limit`:
    the scope's concurrency limit. `budget`: the balance after the budget's step (None when
    it was not reached).
    """

    verdict: int
    admission: Admission | None
    slot: Slot | None
    gate: float
    limit: int
    budget: BudgetState | None

    @property
    def admitted(self) -> bool:
        """True when the attempt may be sent."""
        return self.verdict == Verdict.ADMITTED


@dataclass(frozen=True, slots=True)
class Settled:
    """What `settle` answered: the breaker's `recorded` state (None without a breaker), and,
    when read, the `gate` seconds and the budget's `balance` in thousandths of a retry."""

    recorded: Recorded | None
    gate: float | None
    balance: float | None

    def retry_allowed(self) -> tuple[bool, BudgetState | None]:
        """Does the budget read allow one retry? (allowed, the state after that retry)."""
        if self.balance is None:
            return True, None
        if self.balance >= ONE_RETRY:
            return True, budget_state(self.balance - ONE_RETRY)
        return False, budget_state(self.balance)


class AttemptState:
    """
    The rate gate, retry budget, AIMD limiter and breakers of one client, run per attempt in
    one script before sending and one after (see the module docstring). `scope`: the quota
    scope (gate and limiter keys).
    """

    def __init__(
        self,
        store: StateStore,
        *,
        gate: RateGate,
        budget: RetryBudget,
        limiter: AimdLimiter,
        scope: str,
    ) -> None:
        self.store = store
        self.gate = gate
        self.budget = budget
        self.limiter = limiter
        self.scope = scope
        self._gate_key = f"gate:{scope}"
        self._aimd_key = f"aimd:{scope}"
        # The constant arguments, as the strings the store sends (made once, not per attempt).
        self._budget_args = [arg_text(a) for a in budget._args("deposit", 0)[2:]]
        self._limiter_args = [arg_text(a) for a in limiter._config_args()]
        self._breaker_args: dict[str, list[str]] = {}
        # The package's stores take keys and texts as they are (`_run_texts`); another
        # StateStore gets them through `run_checked` or `run`.
        self._run_texts = getattr(store, "_run_texts", None)
        full_key = getattr(store, "_full_key", None)
        self._keys = [self._gate_key, budget.key, self._aimd_key]
        if self._run_texts is not None and full_key is not None:
            self._keys = [full_key(key) for key in self._keys]
        else:
            self._run_texts = full_key = None
        self._full_key = full_key
        self._admit_first = ["deposit", arg_text(budget._deposit), *self._budget_args]
        self._admit_first += self._limiter_args
        self._admit_retry = ["withdraw", arg_text(ONE_RETRY), *self._budget_args]
        self._admit_retry += self._limiter_args
        self._settle_args = [*self._budget_args, *self._limiter_args]
        self._with_breaker: dict[str, tuple[list[str], list[str]]] = {}

    def merged(self, breaker: CircuitBreaker | None) -> bool:
        """True when the gate, budget, limiter and `breaker` share one store (one script)."""
        store = self.store
        return (
            self.gate.store is store
            and self.budget.store is store
            and self.limiter.store is store
            and (breaker is None or breaker.store is store)
        )

    def _config_of(self, breaker: CircuitBreaker) -> list[str]:
        text = self._breaker_args.get(breaker._key)
        if text is None:
            text = self._breaker_args[breaker._key] = [arg_text(a) for a in breaker._args]
        return text

    def _keys_of(self, breaker: CircuitBreaker | None) -> tuple[list[str], list[str]]:
        """The scripts' keys with `breaker`'s and its config's strings (made once each)."""
        name = "" if breaker is None else breaker._key
        prepared = self._with_breaker.get(name)
        if prepared is None:
            if breaker is None:
                prepared = (self._keys, [])
            else:
                key = breaker._key if self._full_key is None else self._full_key(breaker._key)
                prepared = ([*self._keys, key], self._config_of(breaker))
            self._with_breaker[name] = prepared
        return prepared

    def _run(
        self, script: AtomicScript, keys: list[str], texts: list[str]
    ) -> tuple[list[float], bool]:
        if self._run_texts is not None:
            values, fallback = self._run_texts(script, keys, texts)
            return values, fallback
        return _run(self.store, script, keys, texts)

    # -- before sending ------------------------------------------------------------------------

    def admit(self, breaker: CircuitBreaker | None, *, first: bool, lease: float) -> Admitted:
        """
        Admit one attempt (`first`: the call's first, which deposits; else a retry, which
        withdraws one retry) holding a permit and a slot for `lease` seconds, or refuse it.
        """
        if not (math.isfinite(lease) and lease > 0):
            raise ValueError("lease must be a positive number of seconds")
        if not self.merged(breaker):
            return self._admit_in_steps(breaker, first=first, lease=lease)
        # One id (32 hex digits, random): the permit and the slot are in two hashes.
        permit_id = slot_id = os.urandom(16).hex()
        keys, config = self._keys_of(breaker)
        texts = [
            *(self._admit_first if first else self._admit_retry), slot_id, repr(float(lease))
        ]  # fmt: skip
        if breaker is not None:
            texts += config
            texts.append(permit_id)
        values, fallback = self._run(ADMIT_SCRIPT, keys, texts)
        verdict = int(values[0])
        admission = None
        if breaker is not None:
            breaker_values = values[10:]
            breaker._observe(breaker_values, fallback)
            admission = breaker._admission(breaker_values, permit_id)
        slot_values = values[4:10]
        slot = None
        if verdict == Verdict.ADMITTED:
            slot = Slot(self.scope, slot_id, int(slot_values[1]), int(slot_values[5]))
        return Admitted(
            verdict=verdict,
            admission=admission,
            slot=slot,
            gate=values[1],
            limit=int(slot_values[1]),
            budget=budget_state(values[3]) if verdict in (Verdict.ADMITTED, Verdict.BUDGET)
            else None,
        )  # fmt: skip

    def _admit_in_steps(
        self, breaker: CircuitBreaker | None, *, first: bool, lease: float
    ) -> Admitted:
        admission = None
        if breaker is not None:
            admission = breaker.acquire(lease=lease)
            if not admission.admitted:
                return Admitted(Verdict.BREAKER, admission, None, 0.0, 0, None)
        remaining = self.gate.remaining(self.scope)
        if remaining > 0:
            _give_back(breaker, admission)
            return Admitted(Verdict.GATE, admission, None, remaining, 0, None)
        slot = self.limiter.try_acquire(self.scope, lease=lease)
        if slot is None:
            _give_back(breaker, admission)
            limit = self.limiter.snapshot(self.scope).limit
            return Admitted(Verdict.CONCURRENCY, admission, None, remaining, limit, None)
        if first:
            allowed, state = True, self.budget.record_request()
        else:
            allowed, state = self.budget.try_withdraw()
        if not allowed:
            self.limiter.release(slot, _aimd.IGNORE)
            _give_back(breaker, admission)
            return Admitted(Verdict.BUDGET, admission, None, remaining, slot.limit, state)
        return Admitted(Verdict.ADMITTED, admission, slot, remaining, slot.limit, state)

    # -- after sending -------------------------------------------------------------------------

    def settle(
        self,
        breaker: CircuitBreaker | None,
        admitted: Admitted,
        *,
        limiter_outcome: str,
        breaker_outcome: str,
        duration: float | None,
        close_gate: float | None = None,
        read: bool = False,
    ) -> Settled:
        """
        After an admitted attempt: close the gate for `close_gate` seconds (None: leave it),
        give the slot back with `limiter_outcome` (aimd DROP, SUCCESS or IGNORE), record
        `breaker_outcome` (SUCCESS, FAILURE or IGNORED) with the attempt's `duration`, and
        when `read`, read the gate and the budget for the retry decision.
        """
        slot, admission = admitted.slot, admitted.admission
        if slot is None:
            raise ValueError("only an admitted attempt has an outcome to settle")
        if limiter_outcome not in (_aimd.DROP, _aimd.SUCCESS, _aimd.IGNORE):
            raise ValueError("limiter_outcome must be DROP, SUCCESS or IGNORE")
        if close_gate is not None and not (math.isfinite(close_gate) and close_gate >= 0):
            raise ValueError("close_gate must be a finite number >= 0")
        if breaker is not None and admission is None:
            raise ValueError("an attempt admitted by a breaker carries its Admission")
        if not self.merged(breaker):
            return self._settle_in_steps(
                breaker, admission, slot, limiter_outcome, breaker_outcome, duration,
                close_gate, read,
            )  # fmt: skip
        keys, config = self._keys_of(breaker)
        texts = [
            "" if close_gate is None else repr(float(close_gate)), "1" if read else "0",
            *self._settle_args, slot.slot_id, limiter_outcome,
        ]  # fmt: skip
        if breaker is not None and admission is not None:
            code = breaker._record_code(admission, breaker_outcome, duration)
            texts += config
            texts += (admission.permit_id or "-", code, str(admission.generation))
        values, fallback = self._run(SETTLE_SCRIPT, keys, texts)
        self.limiter._released(slot, values[3:9])
        recorded = None
        if breaker is not None:
            breaker_values = values[9:]
            breaker._observe(breaker_values, fallback)
            recorded = breaker._recorded(breaker_values)
        return Settled(
            recorded=recorded,
            gate=values[0] if read else None,
            balance=values[2] if read else None,
        )

    def _settle_in_steps(
        self,
        breaker: CircuitBreaker | None,
        admission: Admission | None,
        slot: Slot,
        limiter_outcome: str,
        breaker_outcome: str,
        duration: float | None,
        close_gate: float | None,
        read: bool,
    ) -> Settled:
        gate = None
        if close_gate is not None:
            gate = self.gate.close(self.scope, close_gate)
        self.limiter.release(slot, limiter_outcome)
        recorded = None
        if breaker is not None and admission is not None:
            recorded = breaker.record(admission, breaker_outcome, duration=duration)
        if not read:
            return Settled(recorded, None, None)
        if gate is None:
            gate = self.gate.remaining(self.scope)
        return Settled(recorded, gate, self.budget.state().balance * ONE_RETRY)


def _give_back(breaker: CircuitBreaker | None, admission: Admission | None) -> None:
    if breaker is not None and admission is not None:
        breaker.release(admission)


def _run(
    store: StateStore, script: AtomicScript, keys: Sequence[str], args: Sequence[str | int | float]
) -> tuple[list[float], bool]:
    checked = getattr(store, "run_checked", None)
    if checked is not None:
        values, fallback = checked(script, keys, args)
        return values, bool(fallback)
    return store.run(script, keys, args), False


def breaker_set(
    store: StateStore,
    breakers: BreakerSet | Mapping[str, BreakerConfig | None] | None,
    *,
    name: str,
    metrics: Metrics,
) -> BreakerSet:
    """
    A client's breakers from its `breakers` argument: a BreakerSet as is; else one breaker per
    group in `store`, the `DEFAULT_GROUPS` with the production `BreakerConfig()` unless the
    mapping says otherwise (a group mapped to None has none). TypeError for anything else.
    """
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
    return BreakerSet(store, chosen, name=name, metrics=metrics)


def aimd_limiter(
    store: StateStore,
    limiter: AimdLimiter | AimdConfig | None,
    *,
    metrics: Metrics,
    sleep: Callable[[float], None],
    clock: Clock,
) -> AimdLimiter:
    """A client's AIMD limiter from its `limiter` argument: an AimdLimiter as is; an AimdConfig
    (None: the defaults) for one in `store` on `clock`'s monotonic seconds. TypeError else."""
    if isinstance(limiter, AimdLimiter):
        return limiter
    if limiter is None or isinstance(limiter, AimdConfig):
        return AimdLimiter(store, limiter, metrics=metrics, sleep=sleep, monotonic=clock.monotonic)
    raise TypeError("limiter must be an AimdLimiter, an AimdConfig or None")
