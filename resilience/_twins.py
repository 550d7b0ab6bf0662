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
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from .breaker_types import HALF_OPEN_RETRY_AFTER  # lua/breaker.lua's HALF_OPEN_WAIT
from .store import MemoryKeyspace

__all__ = ["admit", "aimd", "breaker", "budget", "gate_close", "gate_read", "settle"]

# The parts' configs (the constant arguments of a client's scripts) are parsed once per
# distinct config and kept, at most this many of each kind.
_MAX_CONFIGS = 256


def _fmt(x: float) -> str:
    """A number as the Lua programs write it: string.format('%.6f', x)."""
    return f"{x:.6f}"


_Config = TypeVar("_Config")


def _parsed(
    cache: dict[tuple[str, ...], _Config],
    texts: Sequence[str],
    parse: Callable[[tuple[str, ...]], _Config],
) -> _Config:
    """`parse(texts)`, kept in `cache` (at most _MAX_CONFIGS entries) for the next call."""
    key = tuple(texts)
    config = cache.get(key)
    if config is None:
        config = parse(key)
        if len(cache) < _MAX_CONFIGS:
            cache[key] = config
    return config


# -- gate_read.lua, gate_close.lua -----------------------------------------------------------


def gate_read(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/gate_read.lua in Python: seconds until the scope's gate opens."""
    return [_gate_read(space, keys[0], now)]


def _gate_read(space: MemoryKeyspace, key: str, now: float) -> float:
    not_before = float(space.get(key, 0.0))
    return float(_fmt(max(0.0, not_before - now)))


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


class _LimiterConfig(NamedTuple):
    """aimd.lua's ARGV[3..6], parsed: initial, max, min limit, backoff ratio."""

    initial: int
    max_limit: int
    min_limit: int
    ratio: float


_LIMITER_CONFIGS: dict[tuple[str, ...], _LimiterConfig] = {}


def _limiter_config(texts: Sequence[str]) -> _LimiterConfig:
    """The limiter's config from its argument strings, parsed once per distinct config."""
    return _parsed(_LIMITER_CONFIGS, texts, _parse_limiter)


def _parse_limiter(key: tuple[str, ...]) -> _LimiterConfig:
    return _LimiterConfig(int(key[0]), int(key[1]), int(key[2]), float(key[3]))


def aimd(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/aimd.lua in Python: the same hash fields, the same lease strings."""
    slot_id = args[5] if len(args) > 5 else ""
    arg = args[6] if len(args) > 6 else ""
    return _aimd(space, keys[0], args[0], _limiter_config(args[1:5]), slot_id, arg, now)


def _aimd(
    space: MemoryKeyspace,
    key: str,
    op: str,
    config: _LimiterConfig,
    slot_id: str,
    arg: str,
    now: float,
) -> list[float]:
    """aimd.lua's steps on one scope's hash (`config` parsed: `_limiter_config`)."""
    now = float(f"{now:.6f}")
    initial, max_limit, min_limit, ratio = config
    h: dict[str, str] = space.get(key) or {}  # read only: a new dict is stored
    limit = min(max_limit, max(min_limit, int(h.get("lim", initial))))
    kept: list[str] = []
    mine = -1
    leases = h.get("ls", "")
    if leases:
        for entry in leases.split(";"):
            if not entry:
                continue
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


class _BreakerConfig(NamedTuple):
    """breaker.lua's ARGV[3..10], parsed (see the file's header)."""

    wtype: str
    wsize: int
    minc: int
    fthr: float
    sthr: float
    opend: float
    permits: int
    maxho: float


_BREAKER_CONFIGS: dict[tuple[str, ...], _BreakerConfig] = {}


def _breaker_config(texts: Sequence[str]) -> _BreakerConfig:
    """The breaker's config from its argument strings, parsed once per distinct config."""
    return _parsed(_BREAKER_CONFIGS, texts, _parse_breaker)


def _parse_breaker(key: tuple[str, ...]) -> _BreakerConfig:
    return _BreakerConfig(
        key[0], int(key[1]), int(key[2]), float(key[3]), float(key[4]), float(key[5]),
        int(key[6]), float(key[7]),
    )  # fmt: skip


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


def _leases_py(ls: str, now: float) -> list[tuple[str, str]]:
    """The live leases of the field `ls` ("id=expiry;..."): (id, expiry text) pairs."""
    kept = []
    if ls:
        for entry in ls.split(";"):
            if entry:
                lease_id, _, expiry = entry.partition("=")
                if float(expiry) > now:
                    kept.append((lease_id, expiry))
    return kept


def _join_leases(leases: Sequence[tuple[str, str]]) -> str:
    return ";".join(f"{lease_id}={expiry}" for lease_id, expiry in leases)


def _int(value: str | None) -> int:
    """breaker.lua's num(field, 0) of an integer field (absent or '': 0)."""
    return int(float(value)) if value else 0


def breaker(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/breaker.lua in Python: the same steps, on a dict of the same strings."""
    a1 = args[9] if len(args) > 9 else ""
    a2 = args[10] if len(args) > 10 else ""
    a3 = args[11] if len(args) > 11 else ""
    return _breaker(space, keys[0], args[0], _breaker_config(args[1:9]), a1, a2, a3, now)


def _breaker(
    space: MemoryKeyspace,
    key: str,
    op: str,
    config: _BreakerConfig,
    a1: str,
    a2: str,
    a3: str,
    now: float,
) -> list[float]:
    """
    breaker.lua's steps on one breaker's hash (`config` parsed: `_breaker_config`). The
    hash's numbers are read once into locals, and every write puts the field's string (as
    the Lua's `put`) and updates the local, so a later read sees what `num` would parse.
    """
    now = float(f"{now:.6f}")  # microseconds, as stored: "at exactly opened + 30 s" holds
    wtype, wsize, minc, fthr, sthr, opend, permits, maxho = config
    stored = space.get(key)
    h: dict[str, str] = dict(stored) if stored else {}
    dirty = False
    get = h.get
    st, gen, ov = _int(get("st")), _int(get("gen")), _int(get("ov"))
    value = get("since")
    since = float(value) if value else now
    value = get("until")
    until = float(value) if value else 0.0
    hc, hf, hs = _int(get("hc")), _int(get("hf")), _int(get("hs"))
    ref, ct, ft, lt = _int(get("ref")), _int(get("ct")), _int(get("ft")), _int(get("lt"))
    from_s = to_s = -1
    live: list[tuple[str, str]] | None = None  # the live leases, once read

    def purge() -> list[tuple[str, str]]:
        nonlocal live, dirty
        if live is None:
            ls = get("ls", "")
            live = _leases_py(ls, now)
            joined = _join_leases(live)
            if joined != ls:
                h["ls"], dirty = joined, True
        return live

    def take_lease(lease_id: str) -> bool:
        nonlocal live, dirty
        leases = purge()
        kept = [item for item in leases if item[0] != lease_id]
        if len(kept) != len(leases):
            live = kept
            h["ls"], dirty = _join_leases(kept), True
            return True
        return False

    def go(to: int) -> None:
        nonlocal st, gen, since, until, from_s, to_s, hc, hf, hs, live, dirty
        if from_s < 0:
            from_s = ov if ov != 0 else st
        st, gen, since = to, gen + 1, now
        h["st"], h["gen"], h["since"] = str(st), str(gen), f"{now:.6f}"
        # clear(): an empty window, no leases, no half-open results
        h["w"] = h["tw"] = h["ls"] = ""
        h["hc"] = h["hf"] = h["hs"] = "0"
        hc = hf = hs = 0
        live = []
        if to == 1:
            h["until"] = f"{now + opend:.6f}"
            until = float(h["until"])
        dirty = True
        to_s = ov if ov != 0 else st

    def trips(c: float, f: float, s: float, least: int) -> bool:
        if c < least:
            return False
        return f * 100 >= fthr * c or (sthr > 0 and s * 100 >= sthr * c)

    result, retry = 0, 0.0
    dc = df = ds = -1
    half_open_expired = st == 2 and ov == 0 and maxho > 0 and now - since >= maxho

    if op == "acquire":
        if ov in (4, 5):
            result = 1
        elif ov == 3:
            retry = opend
        else:
            if half_open_expired:
                go(1)
            if st == 1 and now >= until:
                go(2)
            if st == 0:
                result = 1
            elif st == 1:
                retry = until - now
            else:
                leases = purge()
                if len(leases) + hc < permits:
                    live = [*leases, (a1, f"{now + float(a2):.6f}")]
                    h["ls"], dirty = _join_leases(live), True
                    result = 2
                else:
                    retry = HALF_OPEN_RETRY_AFTER
        if result == 0:
            ref += 1
            h["ref"], dirty = str(ref), True
    elif op == "peek":
        if ov == 3 or half_open_expired:
            retry = opend
        elif ov in (4, 5) or st == 0:
            result = 1
        elif st == 1:
            if now >= until:
                result = 1
            else:
                retry = until - now
        elif len(_leases_py(get("ls", ""), now)) + hc < permits:
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
            ct += 1
            h["ct"], dirty = str(ct), True
            if fail:
                ft += 1
                h["ft"] = str(ft)
            if int(a3) != gen:
                lt += 1
                h["lt"] = str(lt)
                result = 2
            elif ov == 5 or (ov == 0 and st == 0):
                if wtype == "count":
                    h["w"] = (get("w", "") + o)[-wsize:]
                else:
                    _add_to_time_window(h, o, fail, slow, wsize, now)
                c, f, s, _ = _window_py(h, wtype, wsize, now)
                dc, df, ds = c, f, s
                if ov == 0 and trips(c, f, s, wsize if wtype == "count" and wsize < minc else minc):
                    go(1)
                result = 1
            elif ov == 0 and st == 2 and a1 != "-" and take_lease(a1):
                hc, hf, hs = hc + 1, hf + fail, hs + slow
                h["hc"], h["hf"], h["hs"] = str(hc), str(hf), str(hs)
                dc, df, ds = hc, hf, hs
                if hc >= permits:
                    go(1 if trips(hc, hf, hs, permits) else 0)
                result = 1
            else:
                lt += 1
                h["lt"] = str(lt)
                result = 2
    elif op in ("override", "reset"):
        from_s = ov if ov != 0 else st
        ov = int(a1) if op == "override" else 0
        st, gen, since = 0, gen + 1, now
        h["ov"], h["st"], h["gen"], h["since"] = str(ov), "0", str(gen), f"{now:.6f}"
        h["w"] = h["tw"] = h["ls"] = ""
        h["hc"] = h["hf"] = h["hs"] = "0"
        hc = hf = hs = 0
        live = []
        dirty = True
        to_s = ov if ov != 0 else st

    if op not in ("acquire", "peek"):
        if ov == 3:
            retry = opend
        elif ov == 0 and st == 1:
            retry = max(0.0, until - now)

    if dirty:
        space.set(key, h)

    if dc >= 0:
        c, f, s = dc, df, ds
    elif st == 2 and ov == 0:
        c, f, s = hc, hf, hs
    else:
        c, f, s, _ = _window_py(h, wtype, wsize, now)
    if live is None:
        in_use = len(_leases_py(get("ls", ""), now))
    else:
        in_use = sum(1 for _, expiry in live if float(expiry) > now)
    # Numbers pass through the same "%.6f" text as the Lua answer, so both twins agree exactly.
    return [
        float(result), float(ov if ov != 0 else st), float(gen), float(f"{retry:.6f}"),
        float(from_s), float(to_s), float(c), float(f), float(s), float(ref), float(in_use),
        float(ct), float(ft), float(lt), float(f"{since:.6f}"), float(f"{until:.6f}"),
        float(f"{now:.6f}"),
    ]  # fmt: skip


def _add_to_time_window(
    h: dict[str, str], o: str, fail: int, slow: int, wsize: int, now: float
) -> None:
    """breaker.lua's add() for a time window: one more result in the current second."""
    sec = str(math.floor(now))
    kept, found = [], False
    for entry in filter(None, _window_py(h, "time", wsize, now)[3].split(";")):
        esec, ec, ef, es = entry.split(":")
        if esec == sec:
            found = True
            ec, ef, es = str(int(ec) + 1), str(int(ef) + fail), str(int(es) + slow)
        kept.append(f"{esec}:{ec}:{ef}:{es}")
    if not found:
        kept.append(f"{sec}:1:{fail}:{slow}")
    h["tw"] = ";".join(kept)


# -- admit.lua, settle.lua: one round trip per phase of an attempt -------------------------------

_NONE = [0.0] * 6


def admit(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/admit.lua in Python: breaker, gate, slot, budget; all or nothing (see the file)."""
    limiter = _limiter_config(args[5:9])
    lease, slot_id = args[10], args[9]
    has_breaker = len(keys) >= 4
    b: list[float] = []
    if has_breaker:
        breaker_config = _breaker_config(args[11:19])
        permit = args[19]
        b = _breaker(space, keys[3], "acquire", breaker_config, permit, lease, "", now)
        if b[0] == 0:
            return [1.0, 0.0, 0.0, 0.0, *_NONE, *b]

    def give_back_permit() -> None:
        if has_breaker and b[0] == 2:
            generation = str(int(b[2]))
            _breaker(space, keys[3], "record", breaker_config, permit, "i", generation, now)

    gate = _gate_read(space, keys[0], now)
    if gate > 0:
        give_back_permit()
        return [2.0, gate, 0.0, 0.0, *_NONE, *b]
    slot = _aimd(space, keys[2], "acquire", limiter, slot_id, lease, now)
    if slot[0] != 1:
        give_back_permit()
        return [3.0, gate, 0.0, 0.0, *slot, *b]
    ok, balance = budget(space, [keys[1]], args[0:5], now)
    if ok != 1:
        _aimd(space, keys[2], "release", limiter, slot_id, "ignore", now)
        give_back_permit()
        return [4.0, gate, ok, balance, *slot, *b]
    return [0.0, gate, ok, balance, *slot, *b]


def settle(space: MemoryKeyspace, keys: list[str], args: list[str], now: float) -> list[float]:
    """lua/settle.lua in Python: gate close, slot release, breaker record, reads (see the file)."""
    gate = -1.0
    if args[0] != "":
        (gate,) = gate_close(space, [keys[0]], [args[0]], now)
    slot = _aimd(space, keys[2], "release", _limiter_config(args[5:9]), args[9], args[10], now)
    b: list[float] = []
    if len(keys) >= 4:
        config = _breaker_config(args[11:19])
        b = _breaker(space, keys[3], "record", config, args[19], args[20], args[21], now)
    ok, balance = 0.0, -1.0
    if args[1] == "1":
        if gate == -1.0:
            gate = _gate_read(space, keys[0], now)
        ok, balance = budget(space, [keys[1]], ["read", "0", *args[2:5]], now)
    return [gate, ok, balance, *slot, *b]
