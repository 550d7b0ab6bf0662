"""
A circuit breaker on the failure RATE, per acquirer endpoint group, shared by every process.

Why our own: the common Python breakers (pybreaker, circuitbreaker, purgatory, aiobreaker) count
consecutive failures and reset on any success, so a repeating F,F,F,F,S pattern (80 %
failures) never opens them, and pybreaker's Redis storage is not atomic. This one follows
resilience4j's rules (docs/reference/circuit-breaker.md) and keeps its state in a `StateStore`
(store.py): one atomic script, lua/breaker.lua for Redis and its twin in _twins.py for memory,
with the same semantics. The values it takes and answers (BreakerConfig, Admission, Recorded,
BreakerSnapshot, the outcomes) are in breaker_types.py; this module has the two classes,
CircuitBreaker and BreakerSet.

States (`BreakerSnapshot.state`)::

    closed ──(failure rate >= threshold over >= minimum calls)──> open
    open ──(open_duration elapsed; the next call)──> half_open
    half_open ──(half_open_permits results: failure rate >= threshold)──> open (a new wait)
    half_open ──(half_open_permits results: below the threshold)──> closed (an empty window)
    half_open ──(longer than max_half_open_duration, if set)──> open
    any ──(operator)──> forced_open | disabled | metrics_only ──(operator reset)──> closed

- closed: every call is admitted; each result enters a sliding window, count-based (the last
  `window_size` results) or time-based (the results of the last `window_size` seconds, in
  one-second buckets). Once the window holds at least `minimum_calls` results (for a count
  window at most `window_size`), the breaker opens when failures * 100 >=
  failure_rate_threshold * calls (inclusive, compared in integers), or when the slow calls
  reach `slow_call_rate_threshold` (only if `slow_call_duration` is set).
- open: calls are refused without being sent; `retry_after` is the time until probes are
  admitted. At `opened + open_duration` exactly (>=), the next call turns the breaker
  half-open and is admitted as a probe.
- half_open: at most `half_open_permits` probes in flight plus results in; every other call
  is refused at once (`retry_after` = HALF_OPEN_RETRY_AFTER). A permit is a lease that
  expires (a probe killed mid-call frees its permit when its lease ends; the client's lease is
  the call's remaining deadline plus a margin). When all permitted results are in, the rate
  decides: open again (a new `open_duration` from the last result) or closed.
- forced_open (operator): every call refused; `retry_after` is `open_duration`, a hint to
  check back. disabled (operator): every call admitted, nothing recorded. metrics_only
  (operator): every call admitted, results recorded and the rate shown, never opens.

Outcomes (the client's classification, `outcome_for`): failures are connection failures
(refused, DNS, connect timeout), timeouts, resets and 5xx (503 included) and answers that are
not the documented one; successes are 2xx, declines included (a decline proves the acquirer
healthy). Ignored (and a half-open permit taken for them is given back): our own 4xx
(400, 401, 403, 404, 409, 422 ...), a pool timeout (our own saturation), and any call cancelled
on the client side (an exception that is not a classified outcome). Rate limits (429, a
confirmed 403) belong to the rate gate and the concurrency limiter, not to the breaker.

Shared state: one hash per breaker, key `breaker:<name>:<group>` (namespaced by the store),
holding the state, a generation number, the window, the half-open leases and counters. Every
transition increments the generation, and every result carries the generation its call was
admitted in: a late result from an older generation (a call admitted before the breaker
opened, or before an operator's override) updates the statistics only (`late_results`) and
can never cause a transition. Transitions are decided inside the atomic script, so exactly
one process performs each: only that process logs it (once fleet-wide) and counts it in the
metrics hook (`breaker_transitions`). Time is the store's clock (Redis `TIME`), so processes
whose clocks disagree still agree on the open period.

Redis unreachable: the RedisStore runs the same script on its in-memory fallback, so a local
breaker with the same config decides for this process until Redis answers again; it is
logged (once per episode) and counted (`breaker_store_fallback{group}`), and the store outage
itself is never recorded as an acquirer failure.

Every process using a breaker must use the same `BreakerConfig` for it: the config travels
with each operation, and the state is interpreted with the caller's config.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence

from . import _twins
from .breaker_types import (
    DEFAULT_GROUPS,
    FAILURE,
    HALF_OPEN_RETRY_AFTER,
    IGNORED,
    SUCCESS,
    Admission,
    BreakerConfig,
    BreakerSnapshot,
    Recorded,
)
from .metrics import Metrics, NullMetrics
from .store import AtomicScript, StateStore

__all__ = [
    "DEFAULT_GROUPS",
    "FAILURE",
    "HALF_OPEN_RETRY_AFTER",
    "IGNORED",
    "SUCCESS",
    "Admission",
    "BreakerConfig",
    "BreakerSet",
    "BreakerSnapshot",
    "CircuitBreaker",
    "Recorded",
]

logger = logging.getLogger("gateway_client.breaker")

_STATES = ("closed", "open", "half_open", "forced_open", "disabled", "metrics_only")
_OVERRIDES = {"forced_open": 3, "disabled": 4, "metrics_only": 5}
_OUTCOME_CODES = {  # (outcome, slow) -> the window's character
    (SUCCESS, False): "0",
    (FAILURE, False): "1",
    (SUCCESS, True): "2",
    (FAILURE, True): "3",
}

# Result vector of the script (both twins), by index.
_RESULT, _STATE, _GEN, _RETRY, _FROM, _TO = 0, 1, 2, 3, 4, 5
_CALLS, _FAILS, _SLOWS, _REFUSED, _IN_USE = 6, 7, 8, 9, 10
_TOTAL, _TOTAL_FAILS, _LATE, _SINCE, _UNTIL, _NOW = 11, 12, 13, 14, 15, 16


#: The breaker's one atomic script: lua/breaker.lua and its twin (see the file's header).
BREAKER_SCRIPT = AtomicScript.packaged("circuit_breaker", "breaker.lua", _twins.breaker)


# -- the breaker ------------------------------------------------------------------------------


class CircuitBreaker:
    """
    One breaker: an endpoint `group` of the acquirer `name`, in `store`, with `config`.

    `acquire()` before each attempt; `record(admission, outcome, duration=...)` after it
    (outcome SUCCESS, FAILURE or IGNORED; IGNORED gives a half-open permit back). `admits()`
    is a cheap read-only pre-check. `snapshot()` reads the state; `force_open`, `disable`,
    `metrics_only` and `reset` are the operator's overrides (logged with the actor and reason,
    seen by every process sharing the store). `metrics` receives `breaker_transitions`
    {group, from_state, to_state}, `breaker_refused` {group}, `breaker_late_results` {group},
    `breaker_store_fallback` {group} and `breaker_operator_actions` {group, action}.
    """

    def __init__(
        self,
        store: StateStore,
        group: str,
        config: BreakerConfig | None = None,
        *,
        name: str = "acquirer",
        metrics: Metrics | None = None,
    ) -> None:
        if not isinstance(group, str) or not group or not group.isprintable() or " " in group:
            raise ValueError("group must be a non-empty printable string without spaces")
        if config is not None and not isinstance(config, BreakerConfig):
            raise TypeError("config must be a BreakerConfig")
        self.store = store
        self.group = group
        self.name = name
        self.config = config if config is not None else BreakerConfig()
        self.metrics: Metrics = metrics if metrics is not None else NullMetrics()
        self._key = f"breaker:{name}:{group}"
        self._args = self.config._args()
        self._lock = threading.Lock()
        self._in_fallback = False

    # -- calls ---------------------------------------------------------------------------------

    def acquire(self, *, lease: float | None = None) -> Admission:
        """
        Before an attempt: admit it (closed, or a half-open permit leased for `lease` seconds,
        default `config.permit_lease`) or refuse it (`retry_after` until probes are admitted).
        """
        seconds = self.config.permit_lease if lease is None else lease
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError("lease must be a positive number of seconds")
        permit_id = uuid.uuid4().hex
        return self._admission(self._run("acquire", permit_id, float(seconds)), permit_id)

    def record(
        self, admission: Admission, outcome: str, *, duration: float | None = None
    ) -> Recorded:
        """
        After an admitted attempt: its `outcome` (SUCCESS, FAILURE or IGNORED) and `duration`
        in seconds (slow-call detection). A result of an older generation counts in the
        statistics only. Returns the state the breaker is left in.
        """
        code = self._record_code(admission, outcome, duration)
        values = self._run("record", admission.permit_id or "-", code, admission.generation)
        return self._recorded(values)

    def release(self, admission: Admission) -> None:
        """Give back what `admission` took without a result (an ignored or cancelled call)."""
        if admission.admitted:
            self.record(admission, IGNORED)

    def admits(self) -> tuple[bool, float]:
        """
        Would a call be admitted now? `(True, 0.0)`, or `(False, retry_after)`. Takes no
        permit and changes nothing (a pre-check before writing anything).
        """
        values = self._run("peek")
        admitted = values[_RESULT] != 0
        return admitted, 0.0 if admitted else max(0.0, values[_RETRY])

    def snapshot(self) -> BreakerSnapshot:
        """The breaker's state, rate and counters now (read-only)."""
        return self._snapshot(self._run("read"))

    # -- the operator's overrides --------------------------------------------------------------

    def force_open(self, *, actor: str | None = None, reason: str | None = None) -> BreakerSnapshot:
        """Refuse every call until `reset` (fleet-wide); logged with `actor` and `reason`."""
        return self._operator(
            "force_open", "override", str(_OVERRIDES["forced_open"]), actor, reason
        )

    def disable(self, *, actor: str | None = None, reason: str | None = None) -> BreakerSnapshot:
        """Admit every call and record nothing until `reset` (fleet-wide)."""
        return self._operator("disable", "override", str(_OVERRIDES["disabled"]), actor, reason)

    def metrics_only(
        self, *, actor: str | None = None, reason: str | None = None
    ) -> BreakerSnapshot:
        """Admit every call, keep measuring the rate, never open, until `reset` (fleet-wide)."""
        return self._operator(
            "metrics_only", "override", str(_OVERRIDES["metrics_only"]), actor, reason
        )

    def reset(self, *, actor: str | None = None, reason: str | None = None) -> BreakerSnapshot:
        """Clear any override and close the breaker with an empty window (fleet-wide)."""
        return self._operator("reset", "reset", "", actor, reason)

    # -- the client's one-round-trip path (_attempt_state.py runs the script) -----------------

    def _admission(self, values: Sequence[float], permit_id: str) -> Admission:
        """The Admission of an `acquire` answer (counts a refusal)."""
        admitted = values[_RESULT] != 0
        if not admitted:
            self.metrics.increment("breaker_refused", group=self.group)
        return Admission(
            group=self.group,
            admitted=admitted,
            state=_state_name(values[_STATE]),
            generation=int(values[_GEN]),
            retry_after=0.0 if admitted else max(0.0, values[_RETRY]),
            permit_id=permit_id if values[_RESULT] == 2 else None,
        )

    def _record_code(self, admission: Admission, outcome: str, duration: float | None) -> str:
        """The window's character for `outcome` ("i" for IGNORED); ValueError if not admitted."""
        if not admission.admitted:
            raise ValueError("only an admitted call has a result to record")
        if outcome == IGNORED:
            return "i"
        if outcome not in (SUCCESS, FAILURE):
            raise ValueError("outcome must be SUCCESS, FAILURE or IGNORED")
        threshold = self.config.slow_call_duration
        slow = threshold is not None and duration is not None and duration >= threshold
        return _OUTCOME_CODES[(outcome, slow)]

    def _recorded(self, values: Sequence[float]) -> Recorded:
        """The Recorded of a `record` answer (counts a late result)."""
        late = values[_RESULT] == 2
        if late:
            self.metrics.increment("breaker_late_results", group=self.group)
        return Recorded(
            state=_state_name(values[_STATE]),
            retry_after=max(0.0, values[_RETRY]),
            late=late,
            generation=int(values[_GEN]),
        )

    def _observe(self, values: Sequence[float], fallback: bool) -> None:
        """After any script answer: count/log the fallback, log and count a transition."""
        self._note_store(fallback)
        if values[_TO] >= 0:
            self._log_transition(values)

    # -- internals -----------------------------------------------------------------------------

    def _operator(
        self, action: str, op: str, arg: str, actor: str | None, reason: str | None
    ) -> BreakerSnapshot:
        values = self._run(op, arg, log_transition=False)
        self.metrics.increment("breaker_operator_actions", group=self.group, action=action)
        logger.warning(
            "circuit breaker %s/%s: operator %s by %s (%s): %s -> %s, generation %d",
            self.name,
            self.group,
            action,
            actor or "-",
            reason or "no reason given",
            _state_name(values[_FROM]),
            _state_name(values[_TO]),
            int(values[_GEN]),
            extra={
                "gateway_breaker": self.name,
                "gateway_breaker_group": self.group,
                "gateway_breaker_action": action,
                "gateway_breaker_actor": actor,
                "gateway_breaker_reason": reason,
                "gateway_breaker_from": _state_name(values[_FROM]),
                "gateway_breaker_to": _state_name(values[_TO]),
                "gateway_breaker_generation": int(values[_GEN]),
            },
        )
        return self._snapshot(values)

    def _run(
        self, op: str, *op_args: str | int | float, log_transition: bool = True
    ) -> list[float]:
        args: list[str | int | float] = [op, *self._args, *op_args]
        checked = getattr(self.store, "run_checked", None)
        values: list[float]
        if checked is not None:
            values, fallback = checked(BREAKER_SCRIPT, [self._key], args)
        else:
            values, fallback = self.store.run(BREAKER_SCRIPT, [self._key], args), False
        self._note_store(fallback)
        if log_transition and values[_TO] >= 0:
            self._log_transition(values)
        return values

    def _note_store(self, fallback: bool) -> None:
        if not fallback and not self._in_fallback:
            return  # the usual case: nothing changed, nothing to count (no lock needed)
        with self._lock:
            changed = fallback != self._in_fallback
            self._in_fallback = fallback
        if fallback:
            self.metrics.increment("breaker_store_fallback", group=self.group)
        if changed and fallback:
            logger.warning(
                "circuit breaker %s/%s: shared state unreachable; a local breaker with the "
                "same config decides for this process (not an acquirer failure)",
                self.name,
                self.group,
                extra={"gateway_breaker": self.name, "gateway_breaker_group": self.group},
            )
        elif changed:
            logger.warning(
                "circuit breaker %s/%s: shared state reachable again",
                self.name,
                self.group,
                extra={"gateway_breaker": self.name, "gateway_breaker_group": self.group},
            )

    def _log_transition(self, values: Sequence[float]) -> None:
        source, target = _state_name(values[_FROM]), _state_name(values[_TO])
        calls, failures = int(values[_CALLS]), int(values[_FAILS])
        rate = 100.0 * failures / calls if calls else None
        self.metrics.increment(
            "breaker_transitions", group=self.group, from_state=source, to_state=target
        )
        level = logging.WARNING if target in ("open", "forced_open") else logging.INFO
        logger.log(
            level,
            "circuit breaker %s/%s: %s -> %s (failures %d of %d%s), generation %d%s",
            self.name,
            self.group,
            source,
            target,
            failures,
            calls,
            f", {rate:.1f} %" if rate is not None else "",
            int(values[_GEN]),
            f", probes in {values[_RETRY]:.3f} s" if target == "open" else "",
            extra={
                "gateway_breaker": self.name,
                "gateway_breaker_group": self.group,
                "gateway_breaker_from": source,
                "gateway_breaker_to": target,
                "gateway_breaker_generation": int(values[_GEN]),
                "gateway_breaker_calls": calls,
                "gateway_breaker_failures": failures,
                "gateway_breaker_failure_rate": rate,
                "gateway_breaker_retry_after": values[_RETRY] if target == "open" else None,
            },
        )

    def _snapshot(self, values: list[float]) -> BreakerSnapshot:
        calls, failures, slow = int(values[_CALLS]), int(values[_FAILS]), int(values[_SLOWS])
        state = _state_name(values[_STATE])
        override = state if state in _OVERRIDES else None
        if state == "open":
            until_half_open: float | None = max(0.0, values[_UNTIL] - values[_NOW])
        else:
            until_half_open = None
        kind = getattr(self.store, "kind", "custom")
        return BreakerSnapshot(
            name=self.name,
            group=self.group,
            state=state,
            generation=int(values[_GEN]),
            failure_rate=100.0 * failures / calls if calls else None,
            slow_call_rate=100.0 * slow / calls if calls else None,
            buffered_calls=calls,
            failed_calls=failures,
            slow_calls=slow,
            minimum_calls=self.config.minimum_calls,
            refused_calls=int(values[_REFUSED]),
            seconds_until_half_open=until_half_open,
            seconds_in_state=max(0.0, values[_NOW] - values[_SINCE]),
            half_open_permits_in_use=int(values[_IN_USE]),
            override=override,
            store="fallback" if self._in_fallback else kind,
            recorded_calls=int(values[_TOTAL]),
            recorded_failures=int(values[_TOTAL_FAILS]),
            late_results=int(values[_LATE]),
        )

    def __repr__(self) -> str:
        return f"CircuitBreaker(name={self.name!r}, group={self.group!r}, config={self.config!r})"


class BreakerSet(Mapping[str, CircuitBreaker]):
    """
    The breakers of one acquirer, by endpoint group (a read-only mapping group -> breaker).

    `configs`: group -> BreakerConfig (None: the production default for each of
    DEFAULT_GROUPS). Every group shares `store`, `name` and `metrics`. The operator functions
    and the snapshot take the group's name:

        breakers.snapshot()                       # {"authorize": BreakerSnapshot, ...}
        breakers.force_open("authorize", actor="alice", reason="acquirer incident 42")
        breakers.reset("authorize", actor="alice")
    """

    def __init__(
        self,
        store: StateStore,
        configs: Mapping[str, BreakerConfig] | None = None,
        *,
        name: str = "acquirer",
        metrics: Metrics | None = None,
    ) -> None:
        chosen = dict(configs) if configs is not None else dict.fromkeys(DEFAULT_GROUPS, None)
        self.store = store
        self.name = name
        self._breakers = {
            group: CircuitBreaker(store, group, config, name=name, metrics=metrics)
            for group, config in chosen.items()
        }

    def __getitem__(self, group: str) -> CircuitBreaker:
        return self._breakers[group]

    def get(self, group: str, default: CircuitBreaker | None = None) -> CircuitBreaker | None:  # type: ignore[override]
        """The breaker of `group`, or `default` (Mapping.get, one dict look-up per attempt)."""
        return self._breakers.get(group, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._breakers)

    def __len__(self) -> int:
        return len(self._breakers)

    def snapshot(self) -> dict[str, BreakerSnapshot]:
        """Every group's snapshot, by group."""
        return {group: breaker.snapshot() for group, breaker in self._breakers.items()}

    def admits(self, group: str) -> tuple[bool, float]:
        """`self[group].admits()`: (admitted, retry_after) without taking a permit."""
        return self[group].admits()

    def force_open(
        self, group: str, *, actor: str | None = None, reason: str | None = None
    ) -> BreakerSnapshot:
        """`self[group].force_open(...)`."""
        return self[group].force_open(actor=actor, reason=reason)

    def disable(
        self, group: str, *, actor: str | None = None, reason: str | None = None
    ) -> BreakerSnapshot:
        """`self[group].disable(...)`."""
        return self[group].disable(actor=actor, reason=reason)

    def metrics_only(
        self, group: str, *, actor: str | None = None, reason: str | None = None
    ) -> BreakerSnapshot:
        """`self[group].metrics_only(...)`."""
        return self[group].metrics_only(actor=actor, reason=reason)

    def reset(
        self, group: str, *, actor: str | None = None, reason: str | None = None
    ) -> BreakerSnapshot:
        """`self[group].reset(...)`."""
        return self[group].reset(actor=actor, reason=reason)

    def __repr__(self) -> str:
        return f"BreakerSet(name={self.name!r}, groups={list(self._breakers)!r})"


def _state_name(code: float) -> str:
    index = int(code)
    return _STATES[index] if 0 <= index < len(_STATES) else "unknown"
