"""Acquirer-wide conditions: outages, flapping, rate limits, capacity and latency.

Per-payment scenarios (``scenarios``) make one payment fail; conditions make the whole
acquirer misbehave, for every payment at once. They are set through the control API
(``POST /_sandbox/conditions/<name>``) or on the command line (``--outage ...``), and they
apply to the acquirer API only (``ENDPOINTS``: charges, captures, voids, refunds and their
look-ups; ``endpoints`` narrows a condition to some of them), never to ``/healthz`` or
``/_sandbox/*``, so a harness can always observe and reset the sandbox.

Each condition is validated from a JSON object (the control API's body, or the CLI's
``key=value,...`` text) into a frozen value; invalid input raises ``ConditionError`` with a
sentence naming the field, which the control API answers with a 400.

==============  =================================================================================
``outage``      for ``duration_seconds`` (starting ``start_in_seconds`` from now) every request
                gets ``failure``: a status (400..504) or ``"refused"``, ``"reset"``, ``"close"``
``flapping``    alternating ``healthy_seconds`` / ``failing_seconds`` periods, failing as above
``rate_limit``  at most ``limit`` requests per ``window_seconds`` per API key; 429 (``primary``)
                or 403 (``secondary``) above it, with switchable headers
``capacity``    at most ``max_per_second`` admitted requests per second and/or
                ``max_concurrent`` in flight; above it 503, optionally ``overload_delay_ms`` slower
``latency``     extra processing time for requests that reach the endpoint: ``fixed``,
                ``uniform`` or ``normal`` (seeded)
==============  =================================================================================

Times are epoch seconds (floats) from the store's injected clock, so unit tests are exact.
"""

from __future__ import annotations

import base64
import json
import math
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sandbox_acquirer.faults import FAULT_KINDS, FAULT_STATUSES, Fault, RetryAfterFormat

__all__ = [
    "CONDITION_NAMES",
    "ENDPOINTS",
    "MAX_DURATION_SECONDS",
    "MAX_LATENCY_MS",
    "Capacity",
    "CapacityVerdict",
    "ConditionError",
    "ConditionSet",
    "FailureWindow",
    "Latency",
    "RateLimit",
    "RateLimitVerdict",
    "parse_condition",
    "parse_cli_value",
]

#: The acquirer API endpoints conditions apply to, as labels (``{id}`` stands for any charge
#: id); also the keys of ``requests_by_endpoint`` in the stats.
ENDPOINTS: tuple[str, ...] = (
    "POST /charges",
    "GET /charges",
    "POST /charges/{id}/capture",
    "POST /charges/{id}/void",
    "POST /refunds",
    "GET /refunds",
)
#: The condition names, in the order they are applied.
CONDITION_NAMES: tuple[str, ...] = ("capacity", "outage", "flapping", "rate_limit", "latency")
#: Longest outage, flapping period or rate-limit window (one day).
MAX_DURATION_SECONDS = 86_400
#: Longest latency draw or overload delay (one minute).
MAX_LATENCY_MS = 60_000

Phase = Literal["before_commit", "after_commit"]


class ConditionError(ValueError):
    """A condition's settings are invalid; ``detail`` is a sentence for the 400 body."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# -- validation helpers -----------------------------------------------------------------


class _Fields:
    """Typed access to a JSON object's fields, each read at most once; ``done()`` refuses
    the fields nobody asked for."""

    def __init__(self, name: str, data: Any) -> None:
        if not isinstance(data, Mapping):
            raise ConditionError(f"{name} must be a JSON object.")
        self.name = name
        self.data = data
        self.seen: set[str] = set()

    def _get(self, key: str) -> Any:
        self.seen.add(key)
        return self.data.get(key)

    def number(
        self, key: str, *, low: float, high: float, default: float | None = None,
        required: bool = False, integer: bool = False, low_inclusive: bool = True,
    ) -> float | None:  # fmt: skip
        value = self._get(key)
        kind = "an integer" if integer else "a number"
        if value is None:
            if required:
                raise ConditionError(f"{self.name}.{key} is required.")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConditionError(f"{self.name}.{key} must be {kind}.")
        if integer and not isinstance(value, int):
            raise ConditionError(f"{self.name}.{key} must be {kind}.")
        if (
            not math.isfinite(value)
            or value > high
            or value < low
            or (not low_inclusive and value == low)
        ):
            bound = ">" if not low_inclusive else ">="
            raise ConditionError(
                f"{self.name}.{key} must be {kind} {bound} {low:g} and <= {high:g}."
            )
        return value

    def integer(self, key: str, **kwargs: Any) -> int | None:
        value = self.number(key, integer=True, **kwargs)
        return None if value is None else int(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConditionError(f"{self.name}.{key} must be true or false.")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self._get(key)
        if value is None:
            return default
        if value not in choices:
            raise ConditionError(f"{self.name}.{key} must be one of {', '.join(choices)}.")
        return value

    def endpoints(self) -> tuple[str, ...]:
        value = self._get("endpoints")
        if value is None:
            return ENDPOINTS
        if not isinstance(value, list) or not value or any(item not in ENDPOINTS for item in value):
            raise ConditionError(
                f"{self.name}.endpoints must be a non-empty list of "
                + ", ".join(f'"{endpoint}"' for endpoint in ENDPOINTS)
                + "."
            )
        return tuple(endpoint for endpoint in ENDPOINTS if endpoint in value)

    def raw(self, key: str) -> Any:
        return self._get(key)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise ConditionError(f"{self.name}: unknown field(s) {', '.join(unknown)}.")


def _failure(fields: _Fields) -> tuple[Fault, Phase, bool]:
    """Read ``failure``, ``retry_after``, ``retry_after_format`` and ``phase``.

    Returns the fault (its ``retry_after_seconds`` unset when ``retry_after`` is
    ``"until_end"``), the phase and whether Retry-After counts down to the window's end.
    """
    name = fields.name
    failure = fields.raw("failure")
    if failure is None:
        failure = 503
    statuses = ", ".join(str(status) for status in FAULT_STATUSES)
    usage = f'{name}.failure must be a status ({statuses}) or "refused", "reset", "close".'
    if isinstance(failure, bool) or not isinstance(failure, (int, str)):
        raise ConditionError(usage)
    if isinstance(failure, int) and failure not in FAULT_STATUSES:
        raise ConditionError(usage)
    if isinstance(failure, str) and failure not in FAULT_KINDS:
        raise ConditionError(usage)
    phase = fields.choice("phase", ("before_commit", "after_commit"), "before_commit")
    fmt: RetryAfterFormat = fields.choice(  # type: ignore[assignment]
        "retry_after_format", ("seconds", "date"), "seconds"
    )
    retry_after = fields.raw("retry_after")
    until_end = False
    seconds: int | None = None
    if retry_after is not None:
        if not isinstance(failure, int):
            raise ConditionError(f"{name}.retry_after needs an HTTP status failure.")
        if retry_after == "until_end":
            until_end = True
        elif (
            isinstance(retry_after, bool)
            or not isinstance(retry_after, int)
            or not 0 <= retry_after <= MAX_DURATION_SECONDS
        ):
            raise ConditionError(
                f"{name}.retry_after must be whole seconds from 0 to {MAX_DURATION_SECONDS} "
                'or "until_end".'
            )
        else:
            seconds = retry_after
    if failure == "refused" and phase == "after_commit":
        raise ConditionError(
            f'{name}: a "refused" connection happens before the request is read, so its phase '
            "must be before_commit."
        )
    if isinstance(failure, int):
        fault = Fault(
            kind="status",
            status=failure,
            retry_after_seconds=seconds,
            retry_after_format=fmt,
            reason=name,
        )
    else:
        fault = Fault(kind=failure, reason=name)  # type: ignore[arg-type]
    return fault, phase, until_end  # type: ignore[return-value]


def _failure_json(window: FailureWindow) -> dict[str, Any]:
    fault = window.fault
    result: dict[str, Any] = {"failure": fault.status if fault.kind == "status" else fault.kind}
    if window.retry_after_until_end:
        result["retry_after"] = "until_end"
    elif fault.retry_after_seconds is not None:
        result["retry_after"] = fault.retry_after_seconds
    if result.get("retry_after") is not None:
        result["retry_after_format"] = fault.retry_after_format
    result["phase"] = window.phase
    result["endpoints"] = list(window.endpoints)
    return result


# -- the conditions ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailureWindow:
    """An outage (one window) or flapping (periodic windows).

    Outage: failing from ``origin`` for ``failing_seconds``. Flapping: from ``origin`` on,
    periods of ``healthy_seconds`` then ``failing_seconds`` (``start="failing"`` swaps
    the order), forever.
    """

    name: Literal["outage", "flapping"]
    fault: Fault
    phase: Phase
    origin: float
    failing_seconds: float
    healthy_seconds: float = 0.0
    start: Literal["healthy", "failing"] = "failing"
    retry_after_until_end: bool = False
    endpoints: tuple[str, ...] = ENDPOINTS

    def failing_for(self, now: float) -> float | None:
        """Seconds until the current failing period ends, or ``None`` if healthy at ``now``."""
        elapsed = now - self.origin
        if elapsed < 0:
            return None
        if self.name == "outage":
            return self.failing_seconds - elapsed if elapsed < self.failing_seconds else None
        period = self.healthy_seconds + self.failing_seconds
        position = elapsed % period
        if self.start == "failing":
            if position < self.failing_seconds:
                return self.failing_seconds - position
            return None
        if position >= self.healthy_seconds:
            return period - position
        return None

    def fault_at(self, now: float, endpoint: str) -> Fault | None:
        """The fault a request to ``endpoint`` arriving at ``now`` gets, or ``None``."""
        if endpoint not in self.endpoints:
            return None
        remaining = self.failing_for(now)
        if remaining is None:
            return None
        if self.retry_after_until_end:
            return Fault(
                kind="status",
                status=self.fault.status,
                retry_after_seconds=max(0, math.ceil(remaining)),
                retry_after_format=self.fault.retry_after_format,
                reason=self.fault.reason,
            )
        return self.fault

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any]
        if self.name == "outage":
            result = {
                "starts_at": self.origin,
                "ends_at": self.origin + self.failing_seconds,
                "duration_seconds": self.failing_seconds,
            }
        else:
            result = {
                "origin": self.origin,
                "healthy_seconds": self.healthy_seconds,
                "failing_seconds": self.failing_seconds,
                "start": self.start,
            }
        result.update(_failure_json(self))
        return result


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` requests per fixed ``window_seconds`` window, per API key.

    Windows are aligned on multiples of ``window_seconds`` since the epoch, so the reset
    instant is a whole epoch second. ``mode="primary"``: 429 above the limit, with
    ``Retry-After`` (if ``retry_after``), GitHub's ``x-ratelimit-*`` (if ``github_headers``)
    and the IETF draft-10 ``RateLimit-Policy``/``RateLimit`` (if ``ietf_headers``); the quota
    headers are on every answer, not only the 429. ``mode="secondary"``: 403 with a
    ``secondary_rate_limit`` body, no quota or reset header (``Retry-After`` only if asked).
    """

    limit: int
    window_seconds: int
    mode: Literal["primary", "secondary"] = "primary"
    retry_after: bool = True
    github_headers: bool = True
    ietf_headers: bool = True
    endpoints: tuple[str, ...] = ENDPOINTS

    def to_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "window_seconds": self.window_seconds,
            "mode": self.mode,
            "retry_after": self.retry_after,
            "github_headers": self.github_headers,
            "ietf_headers": self.ietf_headers,
            "endpoints": list(self.endpoints),
        }


@dataclass(frozen=True, slots=True)
class Capacity:
    """At most ``max_per_second`` admitted requests per wall-clock second and/or
    ``max_concurrent`` in flight; others get 503 (with ``Retry-After`` if set) after
    ``overload_delay_ms`` (a struggling service is slow even to refuse)."""

    max_per_second: int | None = None
    max_concurrent: int | None = None
    overload_delay_ms: int = 0
    retry_after: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "max_per_second": self.max_per_second,
            "max_concurrent": self.max_concurrent,
            "overload_delay_ms": self.overload_delay_ms,
            "retry_after": self.retry_after,
        }


@dataclass(frozen=True, slots=True)
class Latency:
    """Extra time, in milliseconds, drawn per request: ``fixed`` (``ms``), ``uniform``
    (``min_ms`` .. ``max_ms``) or ``normal`` (``mean_ms``, ``sd_ms``; negative draws count
    as 0, draws above one minute as one minute). ``seed`` makes the sequence repeatable."""

    distribution: Literal["fixed", "uniform", "normal"]
    ms: float = 0.0
    min_ms: float = 0.0
    max_ms: float = 0.0
    mean_ms: float = 0.0
    sd_ms: float = 0.0
    seed: int | None = None

    def draw(self, rng: random.Random) -> float:
        """One delay in seconds."""
        if self.distribution == "fixed":
            value = self.ms
        elif self.distribution == "uniform":
            value = rng.uniform(self.min_ms, self.max_ms)
        else:
            value = rng.gauss(self.mean_ms, self.sd_ms)
        return min(max(value, 0.0), MAX_LATENCY_MS) / 1000

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {"distribution": self.distribution}
        if self.distribution == "fixed":
            result["ms"] = self.ms
        elif self.distribution == "uniform":
            result.update(min_ms=self.min_ms, max_ms=self.max_ms)
        else:
            result.update(mean_ms=self.mean_ms, sd_ms=self.sd_ms)
        result["seed"] = self.seed
        return result


Condition = FailureWindow | RateLimit | Capacity | Latency


def _parse_outage(data: Any, now: float) -> FailureWindow:
    fields = _Fields("outage", data)
    duration = fields.number(
        "duration_seconds", low=0, high=MAX_DURATION_SECONDS, required=True, low_inclusive=False
    )
    start_in = fields.number("start_in_seconds", low=0, high=MAX_DURATION_SECONDS, default=0)
    fault, phase, until_end = _failure(fields)
    endpoints = fields.endpoints()
    fields.done()
    assert duration is not None and start_in is not None
    return FailureWindow(
        name="outage",
        fault=fault,
        phase=phase,
        origin=now + start_in,
        failing_seconds=duration,
        retry_after_until_end=until_end,
        endpoints=endpoints,
    )


def _parse_flapping(data: Any, now: float) -> FailureWindow:
    fields = _Fields("flapping", data)
    healthy = fields.number(
        "healthy_seconds", low=0, high=MAX_DURATION_SECONDS, required=True, low_inclusive=False
    )
    failing = fields.number(
        "failing_seconds", low=0, high=MAX_DURATION_SECONDS, required=True, low_inclusive=False
    )
    start = fields.choice("start", ("healthy", "failing"), "healthy")
    fault, phase, until_end = _failure(fields)
    endpoints = fields.endpoints()
    fields.done()
    assert healthy is not None and failing is not None
    return FailureWindow(
        name="flapping",
        fault=fault,
        phase=phase,
        origin=now,
        failing_seconds=failing,
        healthy_seconds=healthy,
        start=start,  # type: ignore[arg-type]
        retry_after_until_end=until_end,
        endpoints=endpoints,
    )


def _parse_rate_limit(data: Any, now: float) -> RateLimit:
    fields = _Fields("rate_limit", data)
    limit = fields.integer("limit", low=1, high=1_000_000, required=True)
    window = fields.integer("window_seconds", low=1, high=MAX_DURATION_SECONDS, required=True)
    mode = fields.choice("mode", ("primary", "secondary"), "primary")
    retry_after = fields.boolean("retry_after", default=mode == "primary")
    github = fields.boolean("github_headers", default=True)
    ietf = fields.boolean("ietf_headers", default=True)
    endpoints = fields.endpoints()
    fields.done()
    assert limit is not None and window is not None
    return RateLimit(
        limit=limit,
        window_seconds=window,
        mode=mode,  # type: ignore[arg-type]
        retry_after=retry_after,
        github_headers=github,
        ietf_headers=ietf,
        endpoints=endpoints,
    )


def _parse_capacity(data: Any, now: float) -> Capacity:
    fields = _Fields("capacity", data)
    per_second = fields.integer("max_per_second", low=1, high=1_000_000)
    concurrent = fields.integer("max_concurrent", low=1, high=100_000)
    delay = fields.integer("overload_delay_ms", low=0, high=MAX_LATENCY_MS, default=0)
    retry_after = fields.integer("retry_after", low=0, high=MAX_DURATION_SECONDS)
    fields.done()
    if per_second is None and concurrent is None:
        raise ConditionError("capacity needs max_per_second, max_concurrent or both.")
    assert delay is not None
    return Capacity(
        max_per_second=per_second,
        max_concurrent=concurrent,
        overload_delay_ms=delay,
        retry_after=retry_after,
    )


def _parse_latency(data: Any, now: float) -> Latency:
    fields = _Fields("latency", data)
    distribution = fields.choice("distribution", ("fixed", "uniform", "normal"), "fixed")
    seed = fields.integer("seed", low=0, high=2**63 - 1)
    bound = {"low": 0, "high": MAX_LATENCY_MS, "required": True}
    if distribution == "fixed":
        ms = fields.number("ms", **bound)
        fields.done()
        return Latency("fixed", ms=ms or 0.0, seed=seed)
    if distribution == "uniform":
        low = fields.number("min_ms", **bound)
        high = fields.number("max_ms", **bound)
        fields.done()
        assert low is not None and high is not None
        if low > high:
            raise ConditionError("latency.min_ms must not be above latency.max_ms.")
        return Latency("uniform", min_ms=low, max_ms=high, seed=seed)
    mean = fields.number("mean_ms", **bound)
    sd = fields.number("sd_ms", **bound)
    fields.done()
    assert mean is not None and sd is not None
    return Latency("normal", mean_ms=mean, sd_ms=sd, seed=seed)


_PARSERS = {
    "outage": _parse_outage,
    "flapping": _parse_flapping,
    "rate_limit": _parse_rate_limit,
    "capacity": _parse_capacity,
    "latency": _parse_latency,
}


def parse_condition(name: str, data: Any, now: float) -> Condition:
    """Validate ``data`` (a decoded JSON object) as condition ``name`` set at ``now``."""
    parser = _PARSERS.get(name)
    if parser is None:
        raise ConditionError(f"Unknown condition {name!r}; known: {', '.join(CONDITION_NAMES)}.")
    return parser(data, now)


def parse_cli_value(text: str) -> dict[str, Any]:
    """A CLI condition value: a JSON object, or ``key=value[,key=value...]``.

    In the second form each value is read as JSON when it parses (``5``, ``true``,
    ``"x"``) and as a plain string otherwise (``failure=reset``); ``endpoints`` takes
    one endpoint label (``POST /charges``, ``POST /refunds``, ...). Raises ``ConditionError``.
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConditionError("not a valid JSON object") from exc
        if not isinstance(value, dict):
            raise ConditionError("not a JSON object")
        return value
    result: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, separator, raw = item.partition("=")
        key = key.strip()
        if not separator or not key:
            raise ConditionError(f"expected key=value, got {item!r}")
        raw = raw.strip()
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if key == "endpoints":
            value = [raw]
        result[key] = value
    return result


# -- evaluation -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RateLimitVerdict:
    """``allowed`` or not, and the headers to add to the answer either way."""

    allowed: bool
    headers: tuple[tuple[str, str], ...] = ()
    mode: str = "primary"
    retry_after: int | None = None


@dataclass(frozen=True, slots=True)
class CapacityVerdict:
    """``admitted`` or not; a refused request waits ``delay_seconds`` before its 503."""

    admitted: bool
    delay_seconds: float = 0.0
    retry_after: int | None = None


@dataclass(slots=True)
class _RateState:
    window_start: float
    used: int = 0


@dataclass(slots=True)
class _Live:
    conditions: dict[str, Condition] = field(default_factory=dict)
    rate_windows: dict[str, _RateState] = field(default_factory=dict)
    capacity_second: int = -1
    capacity_count: int = 0
    rng: random.Random = field(default_factory=random.Random)


class ConditionSet:
    """The conditions in force and their counters, thread-safe.

    ``baseline`` holds the command line's conditions as raw JSON objects: ``reset()`` clears
    everything set through the control API and re-applies them (their timers restart).
    """

    def __init__(self, baseline: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self._lock = threading.Lock()
        self._baseline = dict(baseline or {})
        self._live = _Live()
        for name, data in self._baseline.items():
            parse_condition(name, data, 0.0)  # validate early; reset() applies them

    def reset(self, now: float) -> None:
        """Drop every condition and counter, then apply the baseline as of ``now``."""
        live = _Live()
        for name, data in self._baseline.items():
            live.conditions[name] = parse_condition(name, data, now)
        with self._lock:
            self._live = live
            self._seed()

    def set(self, name: str, data: Any, now: float) -> Condition:
        """Validate and install condition ``name`` (replacing the previous one)."""
        condition = parse_condition(name, data, now)
        with self._lock:
            self._live.conditions[name] = condition
            if name == "rate_limit":
                self._live.rate_windows.clear()
            if name == "capacity":
                self._live.capacity_second, self._live.capacity_count = -1, 0
            if name == "latency":
                self._seed()
        return condition

    def clear(self, name: str | None = None) -> None:
        """Remove condition ``name`` (all of them when ``None``)."""
        with self._lock:
            if name is None:
                self._live.conditions.clear()
            else:
                self._live.conditions.pop(name, None)

    def get(self, name: str) -> Condition | None:
        with self._lock:
            return self._live.conditions.get(name)

    def to_json(self) -> dict[str, Any]:
        """Every condition by name (``None`` when not set), JSON-ready."""
        with self._lock:
            conditions = dict(self._live.conditions)
        return {
            name: (conditions[name].to_json() if name in conditions else None)
            for name in CONDITION_NAMES
        }

    # -- decisions (all take the arrival time `now`, epoch seconds) -----------------------

    def admit(self, now: float, in_flight: int) -> CapacityVerdict:
        """Capacity: admit a request arriving at ``now`` with ``in_flight`` running
        (itself included)?"""
        with self._lock:
            capacity = self._live.conditions.get("capacity")
            if not isinstance(capacity, Capacity):
                return CapacityVerdict(admitted=True)
            second = math.floor(now)
            if second != self._live.capacity_second:
                self._live.capacity_second, self._live.capacity_count = second, 0
            over = (
                capacity.max_concurrent is not None and in_flight > capacity.max_concurrent
            ) or (
                capacity.max_per_second is not None
                and self._live.capacity_count >= capacity.max_per_second
            )
            if over:
                return CapacityVerdict(
                    admitted=False,
                    delay_seconds=capacity.overload_delay_ms / 1000,
                    retry_after=capacity.retry_after,
                )
            self._live.capacity_count += 1
            return CapacityVerdict(admitted=True)

    def window_fault(self, now: float, endpoint: str, phase: Phase) -> Fault | None:
        """The outage's or flapping's fault for ``endpoint`` at ``now`` in ``phase``."""
        with self._lock:
            windows = [
                self._live.conditions.get("outage"),
                self._live.conditions.get("flapping"),
            ]
        for window in windows:
            if isinstance(window, FailureWindow) and window.phase == phase:
                fault = window.fault_at(now, endpoint)
                if fault is not None:
                    return fault
        return None

    def refuses(self, now: float, endpoint: str) -> bool:
        """Whether a request to ``endpoint`` at ``now`` is to be refused before it is read."""
        fault = self.window_fault(now, endpoint, "before_commit")
        return fault is not None and fault.kind == "refused"

    def rate_limit(self, account: str, endpoint: str, now: float) -> RateLimitVerdict:
        """Count one request of ``account`` against the rate limit and say if it may run."""
        with self._lock:
            rule = self._live.conditions.get("rate_limit")
            if not isinstance(rule, RateLimit) or endpoint not in rule.endpoints:
                return RateLimitVerdict(allowed=True)
            window_start = math.floor(now / rule.window_seconds) * rule.window_seconds
            state = self._live.rate_windows.get(account)
            if state is None or state.window_start != window_start:
                state = self._live.rate_windows[account] = _RateState(window_start)
                if len(self._live.rate_windows) > 10_000:  # bounded: one per API key anyway
                    self._live.rate_windows.pop(next(iter(self._live.rate_windows)))
            allowed = state.used < rule.limit
            if allowed:
                state.used += 1
            reset_at = window_start + rule.window_seconds
            seconds_left = max(1, math.ceil(reset_at - now))
            remaining = rule.limit - state.used if allowed else 0
            used = state.used
        if rule.mode == "secondary":
            retry_after = seconds_left if (rule.retry_after and not allowed) else None
            return RateLimitVerdict(allowed=allowed, mode="secondary", retry_after=retry_after)
        headers: list[tuple[str, str]] = []
        if rule.github_headers:
            headers += [
                ("x-ratelimit-limit", str(rule.limit)),
                ("x-ratelimit-remaining", str(remaining)),
                ("x-ratelimit-reset", str(int(reset_at))),
                ("x-ratelimit-used", str(used)),
                ("x-ratelimit-resource", "charges"),
            ]
        if rule.ietf_headers:
            partition = base64.b64encode(account.encode("utf-8")).decode("ascii")
            headers += [
                (
                    "RateLimit-Policy",
                    f'"default";q={rule.limit};w={rule.window_seconds};pk=:{partition}:',
                ),
                ("RateLimit", f'"default";r={remaining};t={seconds_left}'),
            ]
        retry_after = seconds_left if (rule.retry_after and not allowed) else None
        return RateLimitVerdict(
            allowed=allowed, headers=tuple(headers), mode="primary", retry_after=retry_after
        )

    def latency(self) -> float:
        """One extra delay in seconds from the latency condition (0 when none is set)."""
        with self._lock:
            latency = self._live.conditions.get("latency")
            if not isinstance(latency, Latency):
                return 0.0
            return latency.draw(self._live.rng)

    def _seed(self) -> None:
        latency = self._live.conditions.get("latency")
        seed = latency.seed if isinstance(latency, Latency) else None
        self._live.rng = random.Random(seed)
