"""
The circuit breaker's values: its configuration, its answers and its snapshot (breaker.py has
the breaker itself; the rules are in its docstring).

Frozen, slotted dataclasses and constants, no I/O: `BreakerConfig` (validated on creation),
`Admission` (before an attempt), `Recorded` (after it), `BreakerSnapshot` (for the admin and
/metrics), the outcomes handed to `CircuitBreaker.record` and the default endpoint groups.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .validate import positive_int, positive_number, positive_seconds

__all__ = [
    "DEFAULT_GROUPS",
    "FAILURE",
    "HALF_OPEN_RETRY_AFTER",
    "IGNORED",
    "SUCCESS",
    "Admission",
    "BreakerConfig",
    "BreakerSnapshot",
    "Recorded",
]

#: The groups every client has, one per kind of operation: `authorize` (POST /charges),
#: `capture` (POST /charges/{id}/capture), `void` (POST /charges/{id}/void), `refund`
#: (POST /refunds) and `lookup` (GET /charges and GET /refunds, reconciliation's read path).
DEFAULT_GROUPS = ("authorize", "capture", "void", "refund", "lookup")

#: Outcomes handed to `CircuitBreaker.record`.
SUCCESS = "success"
FAILURE = "failure"
IGNORED = "ignored"

#: The wait suggested to a call refused while the half-open probes are in flight (seconds):
#: their answers, typically well under a second, decide the state.
HALF_OPEN_RETRY_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """
    The rules of one breaker (immutable). Times are seconds. The defaults are the production
    defaults (their reasoning: gateway_client/README.md, "Circuit breaker").

    `window_type`: "count" (the last `window_size` results) or "time" (the results of the
    last `window_size` whole seconds). `minimum_calls`: results needed before the rate can
    open the breaker (for a count window, at most `window_size`). `failure_rate_threshold`:
    percent, compared inclusively (>=). `slow_call_duration`: an attempt at least this long
    counts as slow (None: off); `slow_call_rate_threshold`: percent of slow calls that opens
    it. `open_duration`: how long calls are refused before probes. `half_open_permits`: probes
    whose results decide. `max_half_open_duration`: half-open longer than this opens again
    (None: no limit, resilience4j's default; expiring leases keep it from wedging).
    `permit_lease`: the lease of a half-open permit when the caller gives none.
    Raises ValueError on bad values.
    """

    window_type: str = "count"
    window_size: int = 50
    minimum_calls: int = 20
    failure_rate_threshold: float = 50.0
    slow_call_duration: float | None = None
    slow_call_rate_threshold: float = 100.0
    open_duration: float = 30.0
    half_open_permits: int = 5
    max_half_open_duration: float | None = None
    permit_lease: float = 30.0

    def __post_init__(self) -> None:
        if self.window_type not in ("count", "time"):
            raise ValueError('window_type must be "count" or "time"')
        positive_int("window_size", self.window_size)
        if self.window_type == "count" and self.window_size > 10_000:
            raise ValueError("a count window holds at most 10000 results")
        if self.window_type == "time" and self.window_size > 3600:
            raise ValueError("a time window spans at most 3600 seconds")
        positive_int("minimum_calls", self.minimum_calls)
        for name in ("failure_rate_threshold", "slow_call_rate_threshold"):
            value = getattr(self, name)
            positive_number(name, value)
            if value > 100:
                raise ValueError(f"{name} is a percentage: 0 < value <= 100")
        positive_seconds("slow_call_duration", self.slow_call_duration, allow_none=True)
        positive_seconds("open_duration", self.open_duration)
        positive_int("half_open_permits", self.half_open_permits)
        if self.half_open_permits > 1000:
            raise ValueError("half_open_permits must be <= 1000")
        positive_seconds("max_half_open_duration", self.max_half_open_duration, allow_none=True)
        positive_seconds("permit_lease", self.permit_lease)

    def _args(self) -> list[str | int | float]:
        slow_threshold = 0.0 if self.slow_call_duration is None else self.slow_call_rate_threshold
        return [
            self.window_type,
            self.window_size,
            self.minimum_calls,
            float(self.failure_rate_threshold),
            float(slow_threshold),
            float(self.open_duration),
            self.half_open_permits,
            float(self.max_half_open_duration or 0.0),
        ]


@dataclass(frozen=True, slots=True)
class Admission:
    """
    The breaker's answer before one attempt.

    `admitted`: send or not. `permit_id`: the half-open permit (a probe), else None.
    `generation`: the generation the call was admitted in (hand the Admission back to
    `record`). `state`: the state that decided. `retry_after`: seconds before a call may be
    admitted (0 when admitted).
    """

    group: str
    admitted: bool
    state: str
    generation: int
    retry_after: float
    permit_id: str | None = None

    @property
    def probe(self) -> bool:
        """True when this call holds a half-open permit."""
        return self.permit_id is not None


@dataclass(frozen=True, slots=True)
class Recorded:
    """What recording a result left: the `state`, `retry_after` if refusing, `late` result."""

    state: str
    retry_after: float
    late: bool
    generation: int

    @property
    def refusing(self) -> bool:
        """True when the next call would be refused (open or forced open)."""
        return self.state in ("open", "forced_open")


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """
    One breaker's state, for the admin and /metrics (`as_dict()` for JSON).

    `state`: closed, open, half_open, forced_open, disabled or metrics_only. `failure_rate`
    and `slow_call_rate`: percent over `buffered_calls` (the window; in half-open, the probe
    results), None with no buffered call. `refused_calls`: calls refused since the breaker's
    state was created (fleet-wide, never reset). `seconds_until_half_open`: while open, the
    time until the next call is admitted as a probe (0: the next one is); None when not open.
    `half_open_permits_in_use`: live probe leases. `override`: the operator's override or
    None. `store`: "memory", "redis", or "fallback" (Redis unreachable: this process's local
    breaker). `recorded_calls`, `recorded_failures`, `late_results`: every result recorded
    since the state was created (late ones included).
    """

    name: str
    group: str
    state: str
    generation: int
    failure_rate: float | None
    slow_call_rate: float | None
    buffered_calls: int
    failed_calls: int
    slow_calls: int
    minimum_calls: int
    refused_calls: int
    seconds_until_half_open: float | None
    seconds_in_state: float
    half_open_permits_in_use: int
    override: str | None
    store: str
    recorded_calls: int
    recorded_failures: int
    late_results: int

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as a plain dict (JSON-ready)."""
        return asdict(self)
