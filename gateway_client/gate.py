"""
The rate gate: "not before T" for a quota scope, shared by every process using the scope.

When the acquirer says "not before T" (429 or 503 with Retry-After, or quota headers with
nothing remaining), the client closes the gate of its quota scope until T. Every call in every
process sharing the store then checks the gate before sending: it waits if T falls within its
deadline (and the configured maximum wait), and otherwise fails at once with
`RateLimitedError(retry_after, not_before)`, without sending. Without a shared gate, each worker
would wait alone while together they keep exceeding the limit (REFERENCE.md section 2).

A scope names the quota: the acquirer's name plus a fingerprint of the API key (the first 12
hex digits of its SHA-256), or the configured `AcquirerConfig.rate_scope`; never the raw key.

The gate keeps T on the store's clock and answers with durations ("closed for 12.5 s more"),
so processes whose clocks disagree still agree on the wait. A gate only moves later: a shorter
wait never reopens it early.
"""

from __future__ import annotations

import hashlib
import math

from .store import STORE_NOW, AtomicScript, MemoryKeyspace, StateStore

__all__ = ["RateGate", "scope_for"]


def scope_for(name: str, api_key: str, override: str | None = None) -> str:
    """Return the quota scope `"<name>:<12 hex of sha256(api_key)>"`, or `override` if given."""
    if override:
        return override
    fingerprint = hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:12]
    return f"{name}:{fingerprint}"


_READ_LUA = (
    STORE_NOW
    + """
local not_before = tonumber(redis.call('GET', KEYS[1]) or '0')
local remaining = not_before - now
if remaining < 0 then remaining = 0 end
return {string.format('%.6f', remaining)}
"""
)

_CLOSE_LUA = (
    STORE_NOW
    + """
local wait = tonumber(ARGV[2])
local not_before = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = now + wait
if wanted > not_before then
  not_before = wanted
  redis.call('SET', KEYS[1], string.format('%.6f', not_before), 'PX', math.ceil(wait * 1000) + 1000)
end
local remaining = not_before - now
if remaining < 0 then remaining = 0 end
return {string.format('%.6f', remaining)}
"""
)


def _read_py(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    not_before = float(space.get(keys[0], 0.0))
    return [max(0.0, not_before - now)]


def _close_py(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    wait = float(args[0])
    not_before = float(space.get(keys[0], 0.0))
    wanted = now + wait
    if wanted > not_before:
        not_before = wanted
        space.set(keys[0], not_before, ttl=math.ceil(wait * 1000) / 1000 + 1.0)
    return [max(0.0, not_before - now)]


GATE_READ = AtomicScript("gate_read", _READ_LUA, _read_py)
GATE_CLOSE = AtomicScript("gate_close", _CLOSE_LUA, _close_py)


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
