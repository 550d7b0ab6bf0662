"""
The rate gate: "not before T" for a quota scope, shared by every process using the scope.

When the acquirer says "not before T" (429 or 503 with Retry-After, or quota headers with
nothing remaining), the client closes the gate of its quota scope until T. Every call in every
process sharing the store then checks the gate before sending: it waits if T falls within its
deadline (and the configured maximum wait), and otherwise fails at once with
`RateLimitedError(retry_after, not_before)`, without sending. Without a shared gate, each worker
would wait alone while together they keep exceeding the limit (docs/reference/retries.md).

A scope names the quota: the configured `AcquirerConfig.rate_scope`, else the acquirer's
name. It is configuration, never derived from the API key: it is a Redis key and a metric
label, and a fingerprint of a secret (an unsalted hash) must be neither.

The gate keeps T on the store's clock and answers with durations ("closed for 12.5 s more"),
so processes whose clocks disagree still agree on the wait. A gate only moves later: a shorter
wait never reopens it early.
"""

from __future__ import annotations

import math

from . import _twins
from .store import AtomicScript, StateStore

__all__ = ["RateGate", "scope_for"]


def scope_for(name: str, rate_scope: str | None = None) -> str:
    """Return the quota scope: `rate_scope` when given, else the acquirer's `name`."""
    return rate_scope or name


GATE_READ = AtomicScript.packaged("gate_read", "gate_read.lua", _twins.gate_read)
GATE_CLOSE = AtomicScript.packaged("gate_close", "gate_close.lua", _twins.gate_close)


class RateGate:
    """
    Per-scope "not before" instants in a StateStore.

    `remaining(scope)`: seconds (>= 0) until the gate opens; 0 means open.
    `close(scope, seconds)`: keep the gate closed for at least `seconds` more (never shortens
    it); returns the seconds it now stays closed.
    """

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def remaining(self, scope: str) -> float:
        """Seconds until the scope may send again (0: open now)."""
        (remaining,) = self.store.run(GATE_READ, [f"gate:{scope}"], [])
        return remaining

    def close(self, scope: str, seconds: float) -> float:
        """Close the scope's gate for `seconds` (>= 0) from the store's now; returns the wait."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError("seconds must be a finite number >= 0")
        (remaining,) = self.store.run(GATE_CLOSE, [f"gate:{scope}"], [float(seconds)])
        return remaining
