"""
Per-key limits in the store: a request rate over a fixed window, and a cap on leases held at
once. payments/api/limits.py keys them by merchant (ADR 0018); nothing here knows what a
merchant is.

Each is one `AtomicScript`: a Lua program (lua/merchant_rate.lua, lua/merchant_slots.lua) and
its Python twin below (ADR 0005), with the signature of `store.PythonScript`;
tests/integration/test_merchant_limits_redis.py runs both on the same sequences.

* `RATE_SCRIPT`, keys `[counter]`, args `[quota, window seconds, offset seconds]`: a fixed
  window of `window` seconds, shifted by `offset` (so every key's window does not restart at
  the same second), allows `quota` requests; a refused request is not counted. Answers
  `[allowed (1/0), remaining, seconds until the window ends, the window's number]`. With
  args `[quota, window, offset, "refund", window number]` it gives back one request counted in
  that window, while it lasts (a request another limit refused after it was counted), and
  answers `[given back (1/0), remaining, seconds until the window ends, the window's number]`.
* `SLOTS_SCRIPT`, keys `[lease set]`, args `["acquire", lease id, limit, lease seconds]` or
  `["release", lease id]`: a set of leases, id -> expiry; an expired lease (a process killed
  while holding one) frees its slot by itself. Answers `[granted or released (1/0), leases held
  after the operation]`.
"""

from __future__ import annotations

import math

from ._twins import _fmt
from .store import AtomicScript, MemoryKeyspace

__all__ = ["RATE_SCRIPT", "SLOTS_SCRIPT", "rate_twin", "slots_twin"]


def rate_twin(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/merchant_rate.lua in Python: `args` = quota, window, offset (seconds)[, "refund",
    the window's number]."""
    now = float(_fmt(now))
    quota, window, offset = int(args[0]), float(args[1]), float(args[2])
    index = math.floor((now - offset) / window)
    ends = (index + 1) * window + offset
    stored = space.get(keys[0]) or {}
    count = int(stored["n"]) if stored.get("w") == str(index) else 0
    done = 0
    if len(args) > 3 and args[3] == "refund":
        if str(args[4]) == str(index) and count > 0:
            done, count = 1, count - 1
    elif count < quota:
        done, count = 1, count + 1
    if done:
        space.set(
            keys[0],
            {"w": str(index), "n": str(count)},
            ttl=(math.ceil((ends - now) * 1000) + 1000) / 1000,
        )
    return [float(done), float(quota - count), float(_fmt(ends - now)), float(index)]


def slots_twin(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/merchant_slots.lua in Python: `args` = op, lease id[, limit, lease seconds]."""
    now = float(_fmt(now))
    leases: dict[str, float] = {
        lease: expiry for lease, expiry in (space.get(keys[0]) or {}).items() if expiry > now
    }
    held = len(leases)
    op, lease_id = args[0], args[1]
    if op == "acquire":
        limit, seconds = int(args[2]), float(args[3])
        if held >= limit:
            result = [0.0, float(held)]
        else:
            leases[lease_id] = float(_fmt(now + seconds))
            result = [1.0, float(held + 1)]
    else:
        removed = 1 if leases.pop(lease_id, None) is not None else 0
        result = [float(removed), float(held - removed)]
    if leases:
        ttl = (math.ceil((max(leases.values()) - now) * 1000) + 1000) / 1000
        space.set(keys[0], leases, ttl=ttl)
    else:
        space.delete(keys[0])
    return result


#: A request rate per key (lua/merchant_rate.lua; twin: `rate_twin`).
RATE_SCRIPT = AtomicScript.packaged("merchant_rate", "merchant_rate.lua", rate_twin)
#: Leases held at once per key (lua/merchant_slots.lua; twin: `slots_twin`).
SLOTS_SCRIPT = AtomicScript.packaged("merchant_slots", "merchant_slots.lua", slots_twin)
