"""
The Python twins of the Lua programs in lua/: the same steps, for the in-memory store.

Each function here is one `lua/<name>.lua` in Python, with the signature of
`store.PythonScript`: `(space, keys, args, now) -> list[float]`, where `args` are the
caller's arguments as strings (the Lua's ARGV[2:]) and `now` the store's clock. MemoryStore
runs these; RedisStore runs the Lua (and these on its fallback). Both must answer the same:
tests/integration/test_gateway_breaker_redis.py and test_gateway_lua_twins.py run every pair
on random operation sequences against a real Redis. Change a script and its twin together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .breaker_types import HALF_OPEN_RETRY_AFTER  # lua/breaker.lua's HALF_OPEN_WAIT
from .store import MemoryKeyspace

__all__ = ["admit", "aimd", "breaker", "budget", "gate_close", "gate_read", "settle"]


def _fmt(x: float) -> str:
    """A number as the Lua programs write it: string.format('%.6f', x)."""
    return f"{x:.6f}"


# -- gate_read.lua, gate_close.lua -----------------------------------------------------------


def gate_read(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/gate_read.lua in Python: seconds until the scope's gate opens."""
    not_before = float(space.get(keys[0], 0.0))
    return [float(_fmt(max(0.0, not_before - now)))]


def gate_close(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/gate_close.lua in Python: close the gate for args[0] more seconds (never earlier)."""
    wait = float(args[0])
    not_before = float(space.get(keys[0], 0.0))
    wanted = now + wait
    if wanted > not_before:
        not_before = wanted
        # Stored as the Lua stores it (microseconds), so later comparisons agree too.
        space.set(keys[0], float(_fmt(not_before)), ttl=math.ceil(wait * 1000) / 1000 + 1.0)
    return [float(_fmt(max(0.0, not_before - now)))]


# -- budget.lua -------------------------------------------------------------------------------


def budget(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/budget.lua in Python: the window is a dict slot -> thousandths of a retry."""
    op, amount, reserve = args[0], int(args[1]), int(args[2])
    slot_seconds, slots = float(args[3]), int(args[4])
    slot = math.floor(now / slot_seconds)
    oldest = slot - slots + 1
    window: dict[int, int] = space.get(keys[0]) or {}
    window = {s: v for s, v in window.items() if s >= oldest}
    balance = reserve + sum(window.values())
    ok = 1
    if op == "deposit":
        window[slot] = window.get(slot, 0) + amount
        balance += amount
    elif op == "withdraw":
        if balance >= amount:
            window[slot] = window.get(slot, 0) - amount
            balance -= amount
        else:
            ok = 0
    space.set(keys[0], window, ttl=slot_seconds * slots + 1.0)
    return [float(ok), float(balance)]


# -- aimd.lua ---------------------------------------------------------------------------------


def aimd(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/aimd.lua in Python: the same hash fields, the same lease strings."""
    now = float(f"{now:.6f}")
    key, op = keys[0], args[0]
    initial, max_limit, min_limit = int(args[1]), int(args[2]), int(args[3])
    ratio = float(args[4])
    slot_id = args[5] if len(args) > 5 else ""
    arg = args[6] if len(args) > 6 else ""
    h: dict[str, str] = dict(space.get(key) or {})
    limit = min(max_limit, max(min_limit, int(h.get("lim", initial))))
    kept: list[str] = []
    mine = -1
    for entry in filter(None, h.get("ls", "").split(";")):
        lease_id, expiry, count = entry.split("=")
        if float(expiry) > now:
            if lease_id == slot_id and op == "release":
                mine = int(count)
            else:
                kept.append(entry)
    result = 0
    dec, inc = int(h.get("dec", 0)), int(h.get("inc", 0))
    if op == "acquire":
        if len(kept) < limit:
            mine = len(kept) + 1
            kept.append(f"{slot_id}={now + float(arg):.6f}={mine}")
            result = 1
    elif op == "release":
        if mine < 0:
            mine = len(kept) + 1
        if arg == "drop":
            new = max(min_limit, min(limit - 1, math.floor(limit * ratio)))
            if new < limit:
                result, dec = -1, dec + 1
            limit = new
        elif arg == "success" and mine * 2 >= limit:
            new = min(max_limit, limit + 1)
            if new > limit:
                result, inc = 1, inc + 1
            limit = new
    if op != "read":
        space.set(key, {"lim": str(limit), "ls": ";".join(kept), "dec": str(dec), "inc": str(inc)})
    return [float(result), float(limit), float(len(kept)), float(dec), float(inc), float(mine)]


# -- breaker.lua ------------------------------------------------------------------------------


def _window_py(h: dict[str, str], wtype: str, wsize: int, now: float) -> tuple[int, int, int, str]:
    if wtype == "count":
        w = h.get("w", "")
        if len(w) > wsize:
            w = w[-wsize:]
        slow_failures = w.count("3")
        return len(w), w.count("1") + slow_failures, w.count("2") + slow_failures, w
    oldest = math.floor(now) - wsize + 1
    kept: list[str] = []
    c = f = s = 0
    for entry in filter(None, h.get("tw", "").split(";")):
        sec, ec, ef, es = entry.split(":")
        if int(sec) >= oldest:
            kept.append(entry)
            c, f, s = c + int(ec), f + int(ef), s + int(es)
    return c, f, s, ";".join(kept)


def _leases_py(h: dict[str, str], now: float) -> list[tuple[str, str]]:
    kept = []
    for entry in filter(None, h.get("ls", "").split(";")):
        lease_id, _, expiry = entry.partition("=")
        if float(expiry) > now:
            kept.append((lease_id, expiry))
    return kept


def _join_leases(leases: Sequence[tuple[str, str]]) -> str:
    return ";".join(f"{lease_id}={expiry}" for lease_id, expiry in leases)


def breaker(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/breaker.lua in Python: the same steps, on a dict of the same strings."""
    now = float(_fmt(now))  # microseconds, as stored: "at exactly opened + 30 s" holds
    key = keys[0]
    op, wtype = args[0], args[1]
    wsize, minc = int(args[2]), int(args[3])
    fthr, sthr, opend = float(args[4]), float(args[5]), float(args[6])
    permits, maxho = int(args[7]), float(args[8])
    a1 = args[9] if len(args) > 9 else ""
    a2 = args[10] if len(args) > 10 else ""
    a3 = args[11] if len(args) > 11 else ""

    h: dict[str, str] = dict(space.get(key) or {})
    dirty = False

    def num(field: str, default: float) -> float:
        value = h.get(field)
        return default if value is None or value == "" else float(value)

    def put(field: str, value: str) -> None:
        nonlocal dirty
        h[field] = value
        dirty = True

    st, gen, ov = int(num("st", 0)), int(num("gen", 0)), int(num("ov", 0))
    since = num("since", now)
    from_s = to_s = -1

    def reported() -> int:
        return ov if ov != 0 else st

    def add(o: str) -> None:
        if wtype == "count":
            put("w", (h.get("w", "") + o)[-wsize:])
            return
        fail, slow = int(o in "13"), int(o in "23")
        sec = str(math.floor(now))
        kept, found = [], False
        for entry in filter(None, _window_py(h, wtype, wsize, now)[3].split(";")):
            esec, ec, ef, es = entry.split(":")
            if esec == sec:
                found = True
                ec, ef, es = str(int(ec) + 1), str(int(ef) + fail), str(int(es) + slow)
            kept.append(f"{esec}:{ec}:{ef}:{es}")
        if not found:
            kept.append(f"{sec}:1:{fail}:{slow}")
        put("tw", ";".join(kept))

    def needed() -> int:
        return wsize if wtype == "count" and wsize < minc else minc

    def trips(c: float, f: float, s: float, least: int) -> bool:
        if c < least:
            return False
        return f * 100 >= fthr * c or (sthr > 0 and s * 100 >= sthr * c)

    def purge() -> list[tuple[str, str]]:
        live = _leases_py(h, now)
        joined = _join_leases(live)
        if joined != h.get("ls", ""):
            put("ls", joined)
        return live

    def take_lease(lease_id: str) -> bool:
        live = purge()
        kept = [item for item in live if item[0] != lease_id]
        if len(kept) != len(live):
            put("ls", _join_leases(kept))
            return True
        return False

    def clear() -> None:
        for field, value in (("w", ""), ("tw", ""), ("ls", ""), ("hc", "0"), ("hf", "0")):
            put(field, value)
        put("hs", "0")

    def go(to: int) -> None:
        nonlocal st, gen, since, from_s, to_s
        if from_s < 0:
            from_s = reported()
        st, gen, since = to, gen + 1, now
        put("st", str(st))
        put("gen", str(gen))
        put("since", _fmt(now))
        clear()
        if to == 1:
            put("until", _fmt(now + opend))
        to_s = reported()

    def half_open_expired() -> bool:
        return st == 2 and ov == 0 and maxho > 0 and now - since >= maxho

    result, retry = 0, 0.0
    dc = df = ds = -1

    if op == "acquire":
        if ov in (4, 5):
            result = 1
        elif ov == 3:
            retry = opend
        else:
            if half_open_expired():
                go(1)
            if st == 1 and now >= num("until", 0):
                go(2)
            if st == 0:
                result = 1
            elif st == 1:
                retry = num("until", 0) - now
            else:
                live = purge()
                if len(live) + num("hc", 0) < permits:
                    put("ls", _join_leases([*live, (a1, _fmt(now + float(a2)))]))
                    result = 2
                else:
                    retry = HALF_OPEN_RETRY_AFTER
        if result == 0:
            put("ref", str(int(num("ref", 0)) + 1))
    elif op == "peek":
        if ov == 3 or half_open_expired():
            retry = opend
        elif ov in (4, 5) or st == 0:
            result = 1
        elif st == 1:
            until = num("until", 0)
            if now >= until:
                result = 1
            else:
                retry = until - now
        elif len(_leases_py(h, now)) + num("hc", 0) < permits:
            result = 1
        else:
            retry = HALF_OPEN_RETRY_AFTER
    elif op == "record":
        o = a2
        fail, slow = int(o in ("1", "3")), int(o in ("2", "3"))
        if ov == 4:
            result = 0
        elif o == "i":
            if int(a3) == gen and st == 2 and ov == 0 and a1 != "-":
                take_lease(a1)
            result = 0
        else:
            put("ct", str(int(num("ct", 0)) + 1))
            if fail:
                put("ft", str(int(num("ft", 0)) + 1))
            if int(a3) != gen:
                put("lt", str(int(num("lt", 0)) + 1))
                result = 2
            elif ov == 5 or (ov == 0 and st == 0):
                add(o)
                c, f, s, _ = _window_py(h, wtype, wsize, now)
                dc, df, ds = c, f, s
                if ov == 0 and trips(c, f, s, needed()):
                    go(1)
                result = 1
            elif ov == 0 and st == 2 and a1 != "-" and take_lease(a1):
                hc, hf, hs = (
                    int(num("hc", 0)) + 1,
                    int(num("hf", 0)) + fail,
                    int(num("hs", 0)) + slow,
                )
                put("hc", str(hc))
                put("hf", str(hf))
                put("hs", str(hs))
                dc, df, ds = hc, hf, hs
                if hc >= permits:
                    go(1 if trips(hc, hf, hs, permits) else 0)
                result = 1
            else:
                put("lt", str(int(num("lt", 0)) + 1))
                result = 2
    elif op in ("override", "reset"):
        from_s = reported()
        ov = int(a1) if op == "override" else 0
        st, gen, since = 0, gen + 1, now
        put("ov", str(ov))
        put("st", "0")
        put("gen", str(gen))
        put("since", _fmt(now))
        clear()
        to_s = reported()

    if op not in ("acquire", "peek"):
        if ov == 3:
            retry = opend
        elif ov == 0 and st == 1:
            retry = max(0.0, num("until", 0) - now)

    if dirty:
        space.set(key, h)

    if dc >= 0:
        c, f, s = dc, df, ds
    elif st == 2 and ov == 0:
        c, f, s = int(num("hc", 0)), int(num("hf", 0)), int(num("hs", 0))
    else:
        c, f, s, _ = _window_py(h, wtype, wsize, now)
    in_use = len(_leases_py(h, now))
    # Numbers pass through the same "%.6f" text as the Lua answer, so both twins agree exactly.
    return [
        float(result), float(reported()), float(gen), float(_fmt(retry)), float(from_s),
        float(to_s), float(c), float(f), float(s), num("ref", 0), float(in_use),
        num("ct", 0), num("ft", 0), num("lt", 0), float(_fmt(since)),
        float(_fmt(num("until", 0))), float(_fmt(now)),
    ]  # fmt: skip


# -- admit.lua, settle.lua: one round trip per phase of an attempt -------------------------------

_NONE = [0.0] * 6


def admit(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/admit.lua in Python: breaker, gate, slot, budget; all or nothing (see the file)."""
    limiter = args[5:9]
    breaker_config = args[11:19]
    lease, slot_id = args[10], args[9]
    permit = args[19] if len(keys) >= 4 else ""
    b: list[float] = []
    if len(keys) >= 4:
        b = breaker(space, [keys[3]], ["acquire", *breaker_config, permit, lease], now)

    def give_back_permit() -> None:
        if b and b[0] == 2:
            generation = str(int(b[2]))
            breaker(space, [keys[3]], ["record", *breaker_config, permit, "i", generation], now)

    if b and b[0] == 0:
        return [1.0, 0.0, 0.0, 0.0, *_NONE, *b]
    (gate,) = gate_read(space, [keys[0]], [], now)
    if gate > 0:
        give_back_permit()
        return [2.0, gate, 0.0, 0.0, *_NONE, *b]
    slot = aimd(space, [keys[2]], ["acquire", *limiter, slot_id, lease], now)
    if slot[0] != 1:
        give_back_permit()
        return [3.0, gate, 0.0, 0.0, *slot, *b]
    ok, balance = budget(space, [keys[1]], args[0:5], now)
    if ok != 1:
        aimd(space, [keys[2]], ["release", *limiter, slot_id, "ignore"], now)
        give_back_permit()
        return [4.0, gate, ok, balance, *slot, *b]
    return [0.0, gate, ok, balance, *slot, *b]


def settle(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/settle.lua in Python: gate close, slot release, breaker record, reads (see the file)."""
    gate = -1.0
    if args[0] != "":
        (gate,) = gate_close(space, [keys[0]], [args[0]], now)
    slot = aimd(space, [keys[2]], ["release", *args[5:9], args[9], args[10]], now)
    b: list[float] = []
    if len(keys) >= 4:
        b = breaker(space, [keys[3]], ["record", *args[11:19], *args[19:22]], now)
    ok, balance = 0.0, -1.0
    if args[1] == "1":
        if gate == -1.0:
            (gate,) = gate_read(space, [keys[0]], [], now)
        ok, balance = budget(space, [keys[1]], ["read", "0", *args[2:5]], now)
    return [gate, ok, balance, *slot, *b]
