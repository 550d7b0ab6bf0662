"""
Shared state for the retry machinery: one interface, two backends.

A `StateStore` runs `AtomicScript`s. An AtomicScript is one operation written twice with the
same meaning: in Lua for Redis (run with EVALSHA, atomic on the server) and in Python for the
in-memory store (run under a lock). Every script receives the store's clock reading, so all
processes sharing a Redis agree on time (Redis `TIME`) whatever their own clocks say. The rate
gate (`gate.py`), the retry budget (`budget.py`), the AIMD limiter (`aimd.py`) and the circuit
breaker (`breaker.py`) are built this way: their Lua programs are package files
(`resilience/lua/*.lua`, loaded with `AtomicScript.packaged`), their Python twins are in
`_twins.py`. A script of your own:

    INCREMENT = AtomicScript(
        name="increment",
        lua=STORE_NOW + "return {tostring(redis.call('INCRBY', KEYS[1], ARGV[2]))}",
        python=lambda space, keys, args, now: [space.incr(keys[0], int(args[0]))],
    )
    store.run(INCREMENT, ["counter:authorize"], [1])   # -> [1.0]

Conventions for scripts:
- `KEYS` are the caller's keys with the store's namespace prepended (`"<namespace>:" + key`).
  The parts' scripts take one key each; the attempt's two scripts (lua/admit.lua,
  lua/settle.lua) take up to four, so on a Redis Cluster the namespace needs a hash tag
  (`namespace="{payments}"`: every key of the namespace in one slot). `AtomicScript.packaged`
  with `parts=` prepends other package scripts as Lua functions (`part_function`).
- `ARGV[1]` is the clock reading to use, or the empty string: then the Lua script reads the
  server's `TIME` (the `STORE_NOW` snippet below does this). The caller's arguments follow
  from `ARGV[2]` on; the Python function receives them as `args` (strings) and `now` (float).
- Results are flat lists of numbers. Lua returns fractional ones as strings (Redis would
  truncate a Lua float to an integer) and may return whole ones as Lua numbers (integer
  replies, exact; the breaker and the limiter do); both backends hand back `list[float]`.

Backends:
- `run_checked(script, keys, args)` returns `(values, used_fallback)`: the circuit breaker
  uses it to count and log the operations its local fallback decided.
- `MemoryStore(clock=time.monotonic)`: one process (threads share it). The default.
- `RedisStore(redis_client, namespace=..., fallback=MemoryStore())`: every gunicorn worker and
  Celery process sharing the Redis sees the same gates and budget. When Redis is unreachable
  (any `redis.RedisError` or `OSError`), the operation runs on the in-memory fallback instead
  and the call goes on: a store outage must never become a payment outage. Redis is not tried
  again for `retry_interval` seconds (so calls do not each pay a connect timeout), the
  fallback is logged at most once per `log_interval` seconds (and its end once), and every
  operation served by the fallback increments the `store_fallback` metric.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from .metrics import Metrics, NullMetrics

__all__ = [
    "STORE_NOW",
    "AtomicScript",
    "MemoryKeyspace",
    "MemoryStore",
    "RedisStore",
    "StateStore",
    "arg_text",
    "lua_source",
    "part_function",
]

logger = logging.getLogger("gateway_client.store")


def lua_source(filename: str) -> str:
    """The text of the package file `lua/<filename>` (a script or the prelude)."""
    return (resources.files(__package__) / "lua" / filename).read_text(encoding="utf-8")


#: Lua prelude (lua/prelude.lua): `now` is ARGV[1] if given, else the Redis server's clock
#: (seconds, float). Every packaged script runs after it; start your own scripts with it.
STORE_NOW = lua_source("prelude.lua")

PythonScript = Callable[["MemoryKeyspace", list[str], list[str], float], list[float]]


@dataclass(frozen=True, slots=True)
class AtomicScript:
    """
    One atomic operation on the store, in Lua (Redis) and Python (memory), same semantics.

    `lua` starts with `STORE_NOW` (or reads ARGV[1] itself) and returns a list of numbers as
    strings; `python(space, keys, args, now)` returns the same numbers as a list of floats.
    The package's own scripts are files (`AtomicScript.packaged`, `source` = the file name in
    resilience/lua/), their twins in _twins.py and limits.py.
    """

    name: str
    lua: str
    python: PythonScript
    source: str | None = None
    parts: tuple[str, ...] = ()

    @classmethod
    def packaged(
        cls, name: str, filename: str, python: PythonScript, *, parts: Sequence[str] = ()
    ) -> AtomicScript:
        """
        The script whose Lua is the package file `lua/<filename>`, after the prelude.

        `parts`: other package scripts (file names) the file calls as Lua functions, one
        Redis round trip for several operations: `lua/gate_read.lua` becomes
        `local function gate_read(KEYS, ARGV, now) ... end`, placed between the prelude and
        the file (`part_function`).
        """
        functions = "".join(part_function(part) for part in parts)
        lua = STORE_NOW + functions + lua_source(filename)
        return cls(name, lua, python, source=filename, parts=tuple(parts))


def part_function(filename: str) -> str:
    """
    The package script `lua/<filename>` as a Lua function named after the file (without
    `.lua`) that takes `(KEYS, ARGV, now)` and returns the script's answer: the caller
    passes the part's own KEYS and ARGV tables (ARGV[1] unused, as in a script of its own).
    """
    name = filename.removesuffix(".lua")
    return f"local function {name}(KEYS, ARGV, now)\n{lua_source(filename)}\nend\n"


class StateStore(Protocol):
    """Runs AtomicScripts; `now()` is the store's clock in seconds (only differences matter)."""

    kind: str

    def run(
        self, script: AtomicScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> list[float]:
        """Run `script` atomically on `keys` (namespaced by the store) with `args`."""
        ...

    def now(self) -> float:
        """The store's clock, in seconds."""
        ...


class MemoryKeyspace:
    """
    The in-memory store's data, as seen by a Python script: values with optional expiry.

    Values are Python objects (a dict stands for a Redis hash). `get` treats an expired key as
    absent (and forgets it); `set(key, value, ttl)` sets a time to live in seconds (None: keep).
    """

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._expiry: dict[str, float] = {}
        self.now = 0.0

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default` if absent or expired."""
        expires = self._expiry.get(key)
        if expires is not None and expires <= self.now:
            self.delete(key)
        return self._values.get(key, default)

    def set(self, key: str, value: Any, ttl: float | None = None) -> None:
        """Store `value`; `ttl` seconds from the store's now (None: no expiry)."""
        self._values[key] = value
        if ttl is None:
            self._expiry.pop(key, None)
        else:
            self._expiry[key] = self.now + ttl

    def expire(self, key: str, ttl: float) -> None:
        """Set the time to live of an existing key, in seconds."""
        if key in self._values:
            self._expiry[key] = self.now + ttl

    def delete(self, key: str) -> None:
        """Forget `key`."""
        self._values.pop(key, None)
        self._expiry.pop(key, None)

    def incr(self, key: str, amount: int = 1) -> int:
        """Add `amount` to an integer value (absent: 0) and return it."""
        value = int(self.get(key, 0)) + amount
        self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)


class MemoryStore:
    """
    A StateStore for one process: a dict behind a lock, with the given clock.

    `clock` returns seconds (default `time.monotonic`); the client hands in its own clock's
    `monotonic` so that a ManualClock moves the store's time too. `namespace` prefixes keys.
    """

    kind = "memory"

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, *, namespace: str = "gateway_client"
    ) -> None:
        self._clock = clock
        self._namespace = namespace
        self._lock = threading.Lock()
        self._space = MemoryKeyspace()

    def now(self) -> float:
        """The store's clock, in seconds."""
        return self._clock()

    def run(
        self, script: AtomicScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> list[float]:
        """Run `script.python` under the store's lock; returns its numbers as floats."""
        full_keys = [f"{self._namespace}:{key}" for key in keys]
        with self._lock:
            self._space.now = self._clock()
            result = script.python(
                self._space, full_keys, [arg_text(a) for a in args], self._space.now
            )
        return [float(value) for value in result]

    def run_checked(
        self, script: AtomicScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> tuple[list[float], bool]:
        """`run`, and whether a fallback served it (never, for memory): `(values, False)`."""
        return self.run(script, keys, args), False

    def _full_key(self, key: str) -> str:
        """`key` with the store's namespace, as a script receives it in `keys`."""
        return f"{self._namespace}:{key}"

    def _run_texts(
        self, script: AtomicScript, full_keys: list[str], texts: list[str]
    ) -> tuple[list[float], bool]:
        """
        `run_checked` for the client's hot path: keys already namespaced (`_full_key`), args
        already the strings `arg_text` makes, and a script whose Python returns floats (the
        package's own), so nothing is converted per call.
        """
        with self._lock:
            self._space.now = now = self._clock()
            return script.python(self._space, full_keys, texts, now), False

    def __repr__(self) -> str:
        return f"MemoryStore(namespace={self._namespace!r})"


class RedisStore:
    """
    A StateStore in Redis (redis-py), shared by every process; falls back to memory.

    `redis_client`: a `redis.Redis` (build it with short socket timeouts, or use `from_url`).
    `namespace`: prefix of every key (`"<namespace>:gate:<scope>"`, ...). `clock`: None uses
    the Redis server's `TIME` inside each script (one clock for the whole fleet); a callable
    (seconds) is for tests. `fallback`: the MemoryStore used while Redis is unreachable.
    `retry_interval`: seconds before Redis is tried again after a failure. `log_interval`:
    seconds between two "unreachable" log lines. `metrics`: receives `store_fallback`.
    """

    kind = "redis"

    def __init__(
        self,
        redis_client: Any,
        *,
        namespace: str = "gateway_client",
        clock: Callable[[], float] | None = None,
        fallback: MemoryStore | None = None,
        retry_interval: float = 5.0,
        log_interval: float = 60.0,
        metrics: Metrics | None = None,
        local_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import redis  # a dependency of the project; imported here so memory-only use needs none

        self._redis = redis_client
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._namespace = namespace
        self._clock = clock
        self.fallback = fallback if fallback is not None else MemoryStore(namespace=namespace)
        self._retry_interval = retry_interval
        self._log_interval = log_interval
        self._metrics: Metrics = metrics if metrics is not None else NullMetrics()
        self._local_clock = local_clock
        self._lock = threading.Lock()
        self._scripts: dict[str, Any] = {}
        self._down_until: float | None = None
        self._last_log: float | None = None
        self.fallback_operations = 0

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout: float = 0.25,
        socket_connect_timeout: float = 0.25,
        **kwargs: Any,
    ) -> RedisStore:
        """
        Build a store on `redis.Redis.from_url(url)` with short timeouts (seconds): a slow
        Redis must cost a payment call milliseconds, not seconds. `kwargs` go to `__init__`.
        """
        import redis

        client = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout,
            retry_on_timeout=False,
        )
        return cls(client, **kwargs)

    @property
    def using_fallback(self) -> bool:
        """True while Redis is considered unreachable (operations go to the fallback)."""
        with self._lock:
            return self._down_until is not None

    def now(self) -> float:
        """The store's clock: the injected one, else Redis `TIME` (fallback's clock if down)."""
        if self._clock is not None:
            return self._clock()
        if self._skip_redis():
            return self.fallback.now()
        try:
            seconds, micros = self._redis.time()
        except self._errors as exc:
            self._failed(exc)
            return self.fallback.now()
        self._recovered()
        return float(seconds) + float(micros) / 1_000_000

    def run(
        self, script: AtomicScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> list[float]:
        """Run the Lua script on Redis; on a Redis failure, the Python one on the fallback."""
        return self.run_checked(script, keys, args)[0]

    def run_checked(
        self, script: AtomicScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> tuple[list[float], bool]:
        """`run`, and whether the in-memory fallback served it: `(values, used_fallback)`."""
        if self._skip_redis():
            return self._run_fallback(script, keys, args), True
        full_keys = [f"{self._namespace}:{key}" for key in keys]
        now = "" if self._clock is None else repr(float(self._clock()))
        try:
            result = self._script(script)(keys=full_keys, args=[now, *map(arg_text, args)])
        except self._errors as exc:
            self._failed(exc)
            return self._run_fallback(script, keys, args), True
        self._recovered()
        return [float(value) for value in result], False

    def _full_key(self, key: str) -> str:
        """`key` with the store's namespace, as a script receives it in `keys`."""
        return f"{self._namespace}:{key}"

    def _run_texts(
        self, script: AtomicScript, full_keys: list[str], texts: list[str]
    ) -> tuple[list[float], bool]:
        """
        `run_checked` for the client's hot path: keys already namespaced (`_full_key`) and
        args already the strings `arg_text` makes (the fallback gets the same ones).
        """
        if self._down_until is not None and self._skip_redis():
            return self._run_fallback_texts(script, full_keys, texts), True
        now = "" if self._clock is None else repr(float(self._clock()))
        try:
            result = self._script(script)(keys=full_keys, args=[now, *texts])
        except self._errors as exc:
            self._failed(exc)
            return self._run_fallback_texts(script, full_keys, texts), True
        if self._down_until is not None:
            self._recovered()
        return [float(value) for value in result], False

    def _run_fallback_texts(
        self, script: AtomicScript, full_keys: list[str], texts: list[str]
    ) -> list[float]:
        prefix = len(self._namespace) + 1
        return self._run_fallback(script, [key[prefix:] for key in full_keys], texts)

    # -- fallback bookkeeping ------------------------------------------------------------------

    def _script(self, script: AtomicScript) -> Any:
        registered = self._scripts.get(script.name)
        if registered is None:
            registered = self._redis.register_script(script.lua)
            self._scripts[script.name] = registered
        return registered

    def _skip_redis(self) -> bool:
        with self._lock:
            if self._down_until is None:
                return False
            return self._local_clock() < self._down_until

    def _run_fallback(
        self, script: AtomicScript, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> list[float]:
        with self._lock:
            self.fallback_operations += 1
        self._metrics.increment("store_fallback", store="redis")
        return self.fallback.run(script, keys, args)

    def _failed(self, exc: BaseException) -> None:
        now = self._local_clock()
        with self._lock:
            self._down_until = now + self._retry_interval
            should_log = self._last_log is None or now - self._last_log >= self._log_interval
            if should_log:
                self._last_log = now
        if should_log:
            # The class only: a connection error's message can carry the URL (and a password).
            logger.warning(
                "state store: Redis unreachable (%s); using the in-memory fallback, "
                "shared by this process only",
                type(exc).__name__,
                extra={"gateway_store": "redis", "gateway_store_error": type(exc).__name__},
            )

    def _recovered(self) -> None:
        with self._lock:
            was_down = self._down_until is not None
            self._down_until = None
        if was_down:
            logger.warning(
                "state store: Redis reachable again; shared state resumes",
                extra={"gateway_store": "redis"},
            )

    def __repr__(self) -> str:
        return f"RedisStore(namespace={self._namespace!r})"


def arg_text(value: str | int | float) -> str:
    """A script argument as the text both backends receive: floats by `repr`, else `str`."""
    if type(value) is str:  # the most frequent case first: a script's hot path
        return value
    if isinstance(value, float):
        return repr(value)
    return str(value)
