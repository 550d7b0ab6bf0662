"""
A metric hook: the client counts what operators need to see, without depending on a metrics
library.

`Metrics` is one method, `increment(name, value=1, **labels)`. `CounterMetrics` (the default)
keeps the counts in memory, readable with `get(name, **labels)` or `snapshot()`; to export them,
hand the client an object with the same method (a Prometheus or statsd adapter).

Counter names used by the client (labels in brackets):

| name                             | counts                                                  |
| -------------------------------- | ------------------------------------------------------- |
| attempts [operation, outcome]    | requests sent (outcome: "ok" or the error class)        |
| retries [operation, reason]      | retries started (reason: the error class behind them)   |
| invalid_header [header]          | Retry-After / quota headers present but invalid (their  |
|                                  | syntax or, for RateLimit*, their member types): ignored |
| gate_refused [operation]         | calls refused without sending: the scope's gate closed  |
| gate_waits [operation]           | waits for the scope's rate gate before sending          |
| budget_exhausted [operation]     | retries refused by the retry budget                     |
| deadline_stops [operation]       | retries not taken: the sleep would cross the deadline   |
| server_wait_too_long [operation] | server waits past the deadline or the maximum           |
| store_fallback [store]           | store operations served in memory (Redis unreachable);  |
|                                  | counted by the RedisStore's own `metrics`               |
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

__all__ = ["CounterMetrics", "Metrics", "NullMetrics"]

# Label combinations whose sorted key CounterMetrics keeps (an error class name is a label:
# the combinations are few, but a bound keeps a bug from growing the cache).
_MAX_KEYS = 10_000

_Key = tuple[str, tuple[tuple[str, str], ...]]  # a counter: its name and labels


@runtime_checkable
class Metrics(Protocol):
    """Receives counter increments: `increment("retries", operation="authorize", reason=...)`."""

    def increment(self, name: str, value: int = 1, **labels: str) -> None:
        """Add `value` to the counter `name` with these labels; must never raise."""
        ...


class NullMetrics:
    """Discards every increment."""

    def increment(self, name: str, value: int = 1, **labels: str) -> None:
        """Do nothing."""


class CounterMetrics:
    """Thread-safe in-memory counters keyed by name and labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[_Key, int] = {}
        # (name, labels in the caller's order) -> the counter's key (labels sorted), so a
        # labelled counter seen before costs one look-up, not a sort.
        self._keys: dict[_Key, _Key] = {}

    def increment(self, name: str, value: int = 1, **labels: str) -> None:
        """Add `value` to the counter `name` with these labels."""
        given = (name, tuple(labels.items()))
        key = self._keys.get(given)
        if key is None:
            key = (name, tuple(sorted(labels.items())))
            if len(self._keys) < _MAX_KEYS:
                self._keys[given] = key
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + value

    def get(self, name: str, **labels: str) -> int:
        """The sum of every counter `name` whose labels include the given ones (0 if none)."""
        wanted = set(labels.items())
        with self._lock:
            return sum(
                count
                for (counter, items), count in self._counts.items()
                if counter == name and wanted <= set(items)
            )

    def snapshot(self) -> dict[str, int]:
        """Every counter as `"name{label=value,...}" -> count`."""
        with self._lock:
            return {
                name + ("{" + ",".join(f"{k}={v}" for k, v in items) + "}" if items else ""): count
                for (name, items), count in sorted(self._counts.items())
            }
