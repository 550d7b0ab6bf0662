"""Benchmark: what the circuit breaker (with the retry budget, rate gate and AIMD limiter) costs
on a healthy call, and what it saves when the acquirer is down.

One command (see docs/benchmarks.md)::

    .venv/bin/python bench/breaker_overhead.py                  # memory and Redis stores
    .venv/bin/python bench/breaker_overhead.py --calls 500 --hanging 10 --no-redis

It starts the sandbox acquirer (``python -m sandbox_acquirer --port 0``) and measures, in one
run, on loopback:

1. **Healthy overhead**: ``--calls`` approved authorisations through ``AcquirerClient`` with
   everything on (breaker, budget, gate, limiter; the default policy), interleaved in rotating
   order with the same ``POST /charges`` sent by a bare ``httpx.Client`` (same headers,
   keep-alive) and by httpx's transport alone (``HTTPTransport.handle_request``, as the client
   sends since ADR 0033). Median and p99 of each, the ratio, and the median difference over
   the bare client's call and over the bare transport's. Four clients in the same run: the
   in-memory store and Redis (``--redis-url``, skipped if unreachable or ``--no-redis``), each
   with the attempt's state in two scripts (``merged``: one before sending, one after, ADR
   0025) and one script per part (``steps``: the budget on a second store object, so the
   client runs breaker, gate, slot, budget, release and record one by one, as before the
   merge). For Redis the commands each client sent are **counted** at its redis-py client
   (every command is one round trip; none is pipelined) and printed per attempt, and the Redis
   server's own time per script (``INFO commandstats``: EVALSHA microseconds per call over 300
   more calls of that client).
   With hiredis installed (a dependency: redis-py then parses answers in C), a fifth client
   ``redis merged-py`` is the merged one with redis-py's pure-Python parser, in the same run.
   With Redis, two bare round trips of a redis-py client of its own (``PING``, ``PING``) are
   timed in the same rotation: what any state kept in Redis with one round trip before the
   request and one after costs here before a script does any work.
2. **Refused versus hanging**: ``--refused`` calls refused by an open breaker (nothing sent)
   versus ``--hanging`` calls that hang until the deadline (``tok_timeout_after_commit``: the
   sandbox holds the answer; one attempt whose read timeout equals the ``--deadline``, 8 s, the
   API path's deadline, so it waits the whole deadline). The hanging calls run concurrently,
   each timed on its own. Median and p99 of each and the ratio of medians, plus the cost of
   the pre-check ``client.admits("authorize")``.

Logging stays at the default WARNING level (the client's per-attempt INFO line is not
written), so the numbers are the resilience machinery, not log I/O. Results are printed and
written to ``bench/results/breaker_overhead-<timestamp>.json`` (not committed).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import redis  # noqa: E402

from gateway_client import (  # noqa: E402
    AcquirerClient,
    AcquirerConfig,
    AuthorizationRequest,
    CircuitOpenError,
    GatewayError,
    MemoryStore,
    RedisStore,
    RetryPolicy,
    StateStore,
)
from resilience.budget import RetryBudget  # noqa: E402
from tests.support.sandbox import SandboxProcess  # noqa: E402

#: Whether redis-py parses answers with hiredis (C), as it does when hiredis is installed.
HIREDIS: bool = bool(getattr(redis.utils, "HIREDIS_AVAILABLE", False))
try:  # redis-py's pure-Python RESP2 parser, for the "merged-py" client (private; may move)
    from redis._parsers import _RESP2Parser as PYTHON_PARSER
except ImportError:  # pragma: no cover - another redis-py layout: that client is skipped
    PYTHON_PARSER = None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="healthy calls of each kind")
    parser.add_argument("--refused", type=int, default=5000, help="calls refused when open")
    parser.add_argument("--hanging", type=int, default=40, help="calls hanging to the deadline")
    parser.add_argument("--deadline", type=float, default=8.0, help="the hanging calls' deadline")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--no-redis", action="store_true", help="only the in-memory store")
    return parser.parse_args()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summary(seconds: list[float]) -> dict[str, float]:
    """Median and p99 in milliseconds."""
    return {
        "n": len(seconds),
        "median_ms": statistics.median(seconds) * 1000,
        "p99_ms": percentile(seconds, 0.99) * 1000,
    }


def request(payment_method: str = "tok_visa") -> AuthorizationRequest:
    reference = f"pay_{uuid.uuid4().hex[:24]}"
    return AuthorizationRequest(
        amount=1050,
        currency="EUR",
        payment_method=payment_method,
        payment_reference=reference,
        idempotency_key=f"authorize-{reference}",
    )


def make_client(sandbox: SandboxProcess, store: StateStore, **kwargs: Any) -> AcquirerClient:
    config = AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, name="sandbox")
    return AcquirerClient(config, store=store, **kwargs)


class CountingRedis(redis.Redis):
    """redis-py that counts the commands it sends (one round trip each: no pipelines)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands += 1
        return super().execute_command(*args, **options)


def state_clients(
    sandbox: SandboxProcess, redis_url: str | None, namespace: str
) -> dict[str, tuple[AcquirerClient, CountingRedis | None]]:
    """The four clients: memory/redis x merged/steps (see the module docstring)."""
    clients: dict[str, tuple[AcquirerClient, CountingRedis | None]] = {}
    for name in ("memory merged", "memory steps"):
        store = MemoryStore()
        kwargs: dict[str, Any] = {}
        if name.endswith("steps"):  # another store object: the client runs one script a part
            kwargs["budget"] = RetryBudget(MemoryStore(), "sandbox")
        clients[name] = (make_client(sandbox, store, **kwargs), None)
    if redis_url is None:
        return clients
    names = ["redis merged", "redis steps"]
    if HIREDIS and PYTHON_PARSER is not None:
        names.append("redis merged-py")  # the same client, answers parsed in Python
    for name in names:
        parser = {"parser_class": PYTHON_PARSER} if name.endswith("-py") else {}
        counting = CountingRedis.from_url(
            redis_url, socket_timeout=0.25, socket_connect_timeout=0.25, **parser
        )
        assert isinstance(counting, CountingRedis)
        space = f"{namespace}_{name.split()[1]}"
        shared = RedisStore(counting, namespace=space)
        kwargs = {}
        if name.endswith("steps"):
            kwargs["budget"] = RetryBudget(RedisStore(counting, namespace=space), "sandbox")
        clients[name] = (make_client(sandbox, shared, **kwargs), counting)
    return clients


def healthy_overhead(
    sandbox: SandboxProcess, redis_url: str | None, namespace: str, calls: int
) -> dict[str, Any]:
    """Bare httpx POSTs and each client's authorisations, interleaved, all approved."""
    bare = httpx.Client(
        base_url=sandbox.url,
        headers={"Authorization": f"Bearer {sandbox.api_key}", "Accept": "application/json"},
        timeout=httpx.Timeout(3.0, connect=1.0),
        trust_env=False,
    )
    clients = state_clients(sandbox, redis_url, namespace)
    # The cheapest send httpx has: its transport, as the client sends since ADR 0033.
    transport = httpx.HTTPTransport(trust_env=False)
    transport_headers = {**bare.headers, "Content-Type": "application/json"}

    def bare_transport_call() -> None:
        item = request()
        body = json.dumps({
            "amount": item.amount, "currency": item.currency,
            "payment_method": item.payment_method, "reference": item.payment_reference,
        }).encode()  # fmt: skip
        response = transport.handle_request(
            httpx.Request(
                "POST", f"{sandbox.url}/charges", content=body,
                headers=transport_headers | {"Idempotency-Key": item.idempotency_key},
                extensions={"timeout": httpx.Timeout(3.0, connect=1.0).as_dict()},
            )
        )  # fmt: skip
        response.read()
        response.close()
        assert 200 <= response.status_code <= 299
        json.loads(response.content)

    def bare_call() -> None:
        item = request()
        response = bare.post(
            "/charges",
            json={
                "amount": item.amount,
                "currency": item.currency,
                "payment_method": item.payment_method,
                "reference": item.payment_reference,
            },
            headers={"Idempotency-Key": item.idempotency_key},
        )
        response.raise_for_status()
        response.json()

    def client_call(client: AcquirerClient) -> Callable[[], None]:
        def call() -> None:
            assert client.authorize(request()).approved

        return call

    functions: dict[str, Callable[[], None]] = {
        "bare httpx": bare_call, "bare transport": bare_transport_call,
    }  # fmt: skip
    functions |= {name: client_call(client) for name, (client, _) in clients.items()}
    pinger = None
    if redis_url is not None:  # the Redis state's floor: two bare round trips of redis-py
        pinger = redis.Redis.from_url(redis_url, socket_timeout=0.25, socket_connect_timeout=0.25)

        def two_round_trips() -> None:
            pinger.ping()
            pinger.ping()

        functions["two redis round trips"] = two_round_trips
    names = list(functions)
    times: dict[str, list[float]] = {name: [] for name in names}
    counted = {name: 0 for name in clients}
    warm_up = 50
    for index in range(calls + warm_up):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:  # rotating order
            counter = clients[name][1] if name in clients else None
            before = counter.commands if counter is not None else 0
            started = time.perf_counter()
            functions[name]()
            elapsed = time.perf_counter() - started
            if index >= warm_up:  # warm-up: connections, scripts, caches
                times[name].append(elapsed)
                if counter is not None:
                    counted[name] += counter.commands - before
    script_usec = {
        name: server_script_usec(client, counter)
        for name, (client, counter) in clients.items()
        if counter is not None
    }
    bare.close()
    transport.close()
    if pinger is not None:
        pinger.close()
    for client, _ in clients.values():
        client.close()
    base = summary(times["bare httpx"])
    floor = summary(times["bare transport"])
    results: dict[str, Any] = {"bare_httpx": base, "bare_transport": floor}
    if pinger is not None:
        results["two_redis_round_trips"] = summary(times["two redis round trips"])
    for name in clients:
        measured = summary(times[name])
        attempts = calls  # every healthy call is one attempt
        results[name] = {
            **measured,
            "ratio_median": measured["median_ms"] / base["median_ms"],
            "ratio_p99": measured["p99_ms"] / base["p99_ms"],
            "overhead_median_us": (measured["median_ms"] - base["median_ms"]) * 1000,
            "overhead_over_transport_median_us": (measured["median_ms"] - floor["median_ms"])
            * 1000,
            "redis_round_trips_per_attempt": (
                counted[name] / attempts if clients[name][1] is not None else None
            ),
            "server_script_usec_per_call": script_usec.get(name),
        }
    return results


def server_script_usec(client: AcquirerClient, counter: redis.Redis, calls: int = 300) -> float:
    """
    Microseconds the Redis server spent per EVALSHA (`INFO commandstats`) over `calls` more
    authorisations of `client`: the scripts' own execution time, without the round trip.
    The statistics are the server's: other clients' EVALSHAs in the same time count too.
    """

    def evalsha() -> tuple[int, int]:
        stats = counter.info("commandstats").get("cmdstat_evalsha", {})
        return int(stats.get("calls", 0)), int(stats.get("usec", 0))

    calls_before, usec_before = evalsha()
    for _ in range(calls):
        client.authorize(request())
    calls_after, usec_after = evalsha()
    return (usec_after - usec_before) / max(1, calls_after - calls_before)


def refused_versus_hanging(
    sandbox: SandboxProcess, store: StateStore, refused_calls: int, hanging_calls: int,
    deadline: float,
) -> dict[str, Any]:  # fmt: skip
    """Calls refused by an open breaker versus calls hanging until the deadline."""
    client = make_client(sandbox, store)
    client.breakers.force_open("authorize", actor="benchmark", reason="refused-call latency")
    refused: list[float] = []
    for _ in range(refused_calls + 50):
        started = time.perf_counter()
        try:  # noqa: SIM105 - in the timed region: suppress() would add its own cost
            client.authorize(request())
        except CircuitOpenError:
            pass
        refused.append(time.perf_counter() - started)
    refused = refused[50:]
    checks: list[float] = []
    for _ in range(1000):
        started = time.perf_counter()
        client.admits("authorize")
        checks.append(time.perf_counter() - started)
    client.breakers.reset("authorize", actor="benchmark")

    # The whole deadline in one attempt: the sandbox holds the answer longer than that.
    policy = RetryPolicy(max_attempts=1, read_timeout=deadline, deadline=deadline)
    hanging_client = make_client(sandbox, store, policy=policy, breakers={"authorize": None})
    hanging: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def hang() -> None:
        started = time.perf_counter()
        try:
            hanging_client.authorize(request("tok_timeout_after_commit"))
            outcome = "answered"
        except GatewayError as error:
            outcome = type(error).__name__
        elapsed = time.perf_counter() - started
        with lock:
            hanging.append(elapsed)
            errors.append(outcome)

    threads = [threading.Thread(target=hang) for _ in range(hanging_calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    hanging_client.close()
    refused_summary, hanging_summary = summary(refused), summary(hanging)
    return {
        "refused": refused_summary,
        "admits_precheck": summary(checks),
        "hanging": hanging_summary,
        "hanging_outcomes": sorted(set(errors)),
        "ratio_median": hanging_summary["median_ms"] / refused_summary["median_ms"],
        "ratio_p99": hanging_summary["p99_ms"] / refused_summary["p99_ms"],
    }


def redis_store(url: str) -> StateStore | None:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
    except redis.RedisError:
        return None
    return RedisStore.from_url(url, namespace=f"bench_breaker_{uuid.uuid4().hex[:8]}")


def clean(url: str, store: StateStore | None) -> None:
    if isinstance(store, RedisStore):
        client = redis.Redis.from_url(url)
        prefix = repr(store).split("'")[1]
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)


def main() -> int:
    args = parse_args()
    # Records are created (WARNING and up) but not written: the machinery, not log I/O.
    logging.basicConfig(level=logging.WARNING, handlers=[logging.NullHandler()])
    stores: dict[str, StateStore] = {"memory": MemoryStore()}
    shared = None if args.no_redis else redis_store(args.redis_url)
    if shared is not None:
        stores["redis"] = shared
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "args": vars(args),
        "hiredis": HIREDIS,
    }
    namespace = f"bench_breaker_{uuid.uuid4().hex[:8]}"
    redis_url = None if shared is None else args.redis_url
    with SandboxProcess.start(extra_args=("--hang-seconds", str(args.deadline + 30))) as sandbox:
        sandbox.reset()
        results["healthy"] = healthy_overhead(sandbox, redis_url, namespace, args.calls)
        for name, store in stores.items():
            sandbox.reset()
            results[f"down_{name}"] = refused_versus_hanging(
                sandbox, store, args.refused, args.hanging, args.deadline
            )
    clean(args.redis_url, shared)
    if redis_url is not None:
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(f"{namespace}_*"):
            client.delete(key)

    healthy = results["healthy"]
    bare, floor = healthy["bare_httpx"], healthy["bare_transport"]
    print(f"Healthy call, {args.calls} of each, interleaved; bare httpx.Client median "
          f"{bare['median_ms']:.3f} ms, p99 {bare['p99_ms']:.3f} ms; bare httpx transport "
          f"median {floor['median_ms']:.3f} ms:")  # fmt: skip
    print(f"{'client':<16}{'median ms':>10}{'ratio':>8}{'p99 ms':>9}{'ratio':>8}"
          f"{'overhead us':>13}{'over transport':>16}{'Redis round trips/attempt':>27}"
          f"{'server us/script':>18}")  # fmt: skip
    for name, h in healthy.items():
        if name in ("bare_httpx", "bare_transport", "two_redis_round_trips"):
            continue
        trips, script = h["redis_round_trips_per_attempt"], h["server_script_usec_per_call"]
        print(
            f"{name:<16}{h['median_ms']:>10.3f}{h['ratio_median']:>8.2f}{h['p99_ms']:>9.3f}"
            f"{h['ratio_p99']:>8.2f}{h['overhead_median_us']:>13.0f}"
            f"{h['overhead_over_transport_median_us']:>16.0f}"
            f"{'-' if trips is None else f'{trips:.2f}':>27}"
            f"{'-' if script is None else f'{script:.1f}':>18}"
        )
    print(
        "Redis answers parsed by "
        + ("hiredis (C); merged-py: the same client with redis-py's Python parser" if HIREDIS
           else "redis-py's Python parser (hiredis is not installed)")
    )  # fmt: skip
    trips, memory, shared = (
        healthy.get(name) for name in ("two_redis_round_trips", "memory merged", "redis merged")
    )
    if trips and memory and shared:
        print(
            f"two bare redis-py round trips (PING, PING): median {trips['median_ms'] * 1000:.0f}"
            f" us; the Redis state's cost over the memory store's (redis merged - memory "
            f"merged, medians): {(shared['median_ms'] - memory['median_ms']) * 1000:.0f} us"
        )
    for store_name in ("memory", "redis"):
        merged, steps = healthy.get(f"{store_name} merged"), healthy.get(f"{store_name} steps")
        if merged and steps and steps["overhead_median_us"] > 0:
            print(
                f"{store_name}: merged / steps overhead "
                f"{merged['overhead_median_us'] / steps['overhead_median_us']:.2f}"
            )
    hiredis, python = healthy.get("redis merged"), healthy.get("redis merged-py")
    if hiredis and python and python["overhead_median_us"] > 0:
        print(
            "redis merged: hiredis / Python parser overhead "
            f"{hiredis['overhead_median_us'] / python['overhead_median_us']:.2f}"
        )
    print(f"\nAcquirer down: refused by the open breaker vs hanging until the {args.deadline:g} s"
          " deadline (ms):")  # fmt: skip
    print(f"{'store':<8}{'refused median':>16}{'refused p99':>13}{'hanging median':>16}"
          f"{'hanging p99':>13}{'ratio median':>14}{'admits() median':>17}")  # fmt: skip
    for name in stores:
        d = results[f"down_{name}"]
        print(
            f"{name:<8}{d['refused']['median_ms']:>16.4f}{d['refused']['p99_ms']:>13.4f}"
            f"{d['hanging']['median_ms']:>16.1f}{d['hanging']['p99_ms']:>13.1f}"
            f"{d['ratio_median']:>14.0f}{d['admits_precheck']['median_ms']:>17.4f}"
        )
        print(f"{'':<8}hanging calls ended with: {', '.join(d['hanging_outcomes'])}")

    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"breaker_overhead-{stamp}.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten to {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
