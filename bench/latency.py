"""Benchmark: the service with a slow acquirer, against itself with an instant one (issue 30,
ADR 0048, docs/scaling.md "Payments in flight").

One command (docs/benchmarks.md, "A slow acquirer")::

    .venv/bin/python bench/latency.py                         # the Procfile's server, 2 rounds
    .venv/bin/python bench/latency.py --server gevent --rounds 1 --duration 6
    .venv/bin/python bench/latency.py --versus WEB_RUN_SLOTS=8     # a setting's A/B, one run

It starts the sandbox and gunicorn as the Procfile does (``--server`` picks the worker class:
``runslots``, the default, gthread with ``WEB_THREADS`` threads of which ``WEB_RUN_SLOTS``
run at once (ADR 0053); ``gthread``, every thread may run; or ``gevent``), with the per-merchant
limits at their defaults, and runs rotating rounds of five cases, each ``--duration`` seconds:
the sandbox answering at once (``instant``), after a normal 300 ms (sd 60) and a normal 1 s
(sd 200) (the sandbox's ``latency`` condition, set through its control API), each with
``--clients`` client threads (the 1 s case ``--slow-clients``: by Little's law a closed loop
of C clients at 1 s serves at most C payments/s) spread over ``--merchants`` merchants; and
``alone``: one merchant with ``--clients`` clients at 300 ms, which honour ``Retry-After`` on
a ``429`` or ``503``; and ``open``: an open loop at 300 ms, Poisson arrivals at
``OPEN_LOAD_SHARE`` (0.8) of the same stack's ``300ms`` throughput in that round, each request
sent when it arrives whatever the answers before it, its latency counted from its arrival
(so a wait on our side counts). A closed-loop case's window opens after ``--warmup`` seconds
of its load (3): a window opened with the load counted the first acquirer latency's silence
(no answer can come sooner) and the concurrency limit's first growth against the slow cases,
about 1 s of an 8 s window at 1 s. Rotating the cases in one run puts another engineer's load on
a shared machine on every case alike, so the ratios mean something even when the absolute
figures move.

Printed per case: payments per second (201s), p50 and p99 of their latency, the peak of
requests the acquirer held in flight (the sandbox's ``requests_in_flight``), the peak of the
service's connections to the database (``pg_stat_activity``, sampled every 100 ms), the web
tier's RSS at that peak divided by the payments in flight, and CPU milliseconds per payment in
the gunicorn processes, and their threads' voluntary context switches per payment (ADR 0053);
then the machine's busy cores and its CPU per payment by group (web, PostgreSQL, the sandbox,
this load generator, the rest), as they share the cores. Then the ratios: 300 ms / instant,
1 s / instant, alone / 300 ms.
Asserted: every case made payments, and every 201 is a succeeded payment in the database.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import psycopg

from bench.common import (
    Database,
    count_rows,
    cpu_seconds_by_group,
    cpu_snapshot,
    database_from_env,
    issue_api_key,
    machine_context,
    percentile,
    post_payment,
    prepare_database,
    print_table,
    ratio,
    service_stack,
    timestamp,
    write_results,
)

#: The sandbox's latency condition per case (None: answers at once); ``alone`` is 300 ms.
LATENCIES: dict[str, dict[str, Any] | None] = {
    "instant": None,
    "300ms": {"distribution": "normal", "mean_ms": 300, "sd_ms": 60},
    "1s": {"distribution": "normal", "mean_ms": 1000, "sd_ms": 200},
    "alone": {"distribution": "normal", "mean_ms": 300, "sd_ms": 60},
    "open": {"distribution": "normal", "mean_ms": 300, "sd_ms": 60},
}
#: The ``open`` case's arrival rate: this share of the same stack's ``300ms`` throughput in the
#: same round (issue 30: an open-loop load at 0.8 of the capacity must not collapse).
OPEN_LOAD_SHARE = 0.8
#: Threads and connections the open loop may use at once: far above what 300 ms needs at the
#: offered rate (Little's law: 100/s x 0.35 s = 35), so a queue, if any, is the service's.
OPEN_LOOP_THREADS = 256
#: The arrivals' random source: the same draws every round, at that round's rate.
OPEN_LOOP_SEED = 30
#: The standard normal's 99th percentile: a latency draw's p99 is mean + this x sd.
NORMAL_P99_Z = 2.326
#: The worker class and its knobs per ``--server``.
SERVERS = {
    "runslots": "config.gunicorn_worker.RunSlotThreadWorker",  # the Procfile's (ADR 0053)
    "gthread": "gthread",  # gunicorn's own pool, every thread may run at once
    "gevent": "gevent",
}
#: The label of ``--versus-before``'s stack, appended to its cases' names.
BEFORE = " (before)"
#: The label of ``--versus-gevent``'s stack.
GEVENT = " (gevent)"
#: The label of ``--versus``'s stack.
VERSUS = " (versus)"
#: The groups of the machine's CPU printed per payment (bench.common.cpu_snapshot's): where a
#: case's CPU went, on the cores the service shares with its acquirer and load generator.
CPU_GROUPS = ("web", "postgres", "postgres (shared processes)", "acquirer (sandbox)",
              "load generator", "other")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=sorted(SERVERS), default="runslots")
    parser.add_argument("--threads", type=int, default=None, help="WEB_THREADS")
    parser.add_argument("--workers", type=int, default=None, help="WEB_CONCURRENCY")
    parser.add_argument("--duration", type=float, default=10, help="seconds per case and round")
    parser.add_argument(
        "--warmup",
        type=float,
        default=3,
        help="seconds of a closed-loop case's load before its window opens (its steady state)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument(
        "--slow-clients", type=int, default=256,
        help="the 1s case's clients (Little's law: a closed loop of C clients at 1 s serves "
        "at most C payments/s)",
    )  # fmt: skip
    parser.add_argument("--merchants", type=int, default=8)
    parser.add_argument(
        "--cases", nargs="+", choices=list(LATENCIES), default=list(LATENCIES),
        help="a subset of the cases (the ratios need instant, 300ms and 1s; alone needs 300ms)",
    )  # fmt: skip
    parser.add_argument(
        "--versus-before", action="store_true",
        help="also a stack with 4 threads and no pool (issue 30's settings off), case by case",
    )  # fmt: skip
    parser.add_argument(
        "--versus-gevent", action="store_true",
        help="also the same settings on gunicorn's gevent worker, case by case",
    )  # fmt: skip
    parser.add_argument(
        "--versus", nargs="+", default=None, metavar="NAME=VALUE",
        help="also a stack with these environment variables changed, case by case (an A/B of "
        "a setting measured in one run)",
    )  # fmt: skip
    parser.add_argument("--database", default=None, help="benchmark database name")
    args = parser.parse_args(argv)
    if args.versus and not all("=" in item for item in args.versus):
        parser.error("--versus takes NAME=VALUE items")
    return args


class Sampler(threading.Thread):
    """Every 100 ms: the service's connections to the benchmark database, the acquirer's
    requests in flight, and the web tier's RSS (bytes) at the in-flight peak."""

    def __init__(
        self, db: Database, sandbox_url: str, web_pids: list[int], application: str
    ) -> None:
        super().__init__(daemon=True)
        self.db, self.sandbox_url, self.web_pids = db, sandbox_url, web_pids
        self.application = application
        self.stop = threading.Event()
        self.peak_connections = 0
        self.peak_in_flight = 0
        self.rss_at_peak = 0

    def run(self) -> None:
        with (
            psycopg.connect(self.db.conninfo(), autocommit=True) as conn,
            httpx.Client(timeout=2) as client,
        ):
            while not self.stop.wait(0.1):
                (connections,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                    "AND application_name = %s AND backend_type = 'client backend'",
                    [self.db.name, self.application],
                ).fetchone()
                self.peak_connections = max(self.peak_connections, connections)
                stats = client.get(f"{self.sandbox_url}/_sandbox/stats").json()
                in_flight = int(stats.get("requests_in_flight", 0))
                if in_flight > self.peak_in_flight:
                    self.peak_in_flight = in_flight
                    self.rss_at_peak = sum(rss_bytes(pid) for pid in self.web_pids)


def application_name(label: str) -> str:
    """The stack's name in its log file and in ``pg_stat_activity``: ``latency-now``,
    ``latency-before`` or ``latency-gevent``."""
    return "latency-" + (label.strip(" ()") or "now")


def application_url(db: Database, name: str) -> str:
    """``db``'s URL with ``application_name`` (libpq's), so ``pg_stat_activity`` tells one
    stack's connections from another's."""
    url = db.url()
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (bytes; 0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def voluntary_switches(pids: list[int]) -> int:
    """Voluntary context switches of every thread of ``pids`` so far (a thread that slept on
    a lock, a socket or the GIL): ADR 0053's measure of threads taking turns."""
    total = 0
    for pid in pids:
        for status in Path(f"/proc/{pid}/task").glob("*/status"):
            try:
                text = status.read_text()
            except OSError:
                continue  # a thread that ended between the listing and the read
            for line in text.splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def load(
    url: str,
    keys: list[str],
    clients: list[httpx.Client],
    duration: float,
    window: Callable[[], None] = lambda: None,
    warmup: float = 0.0,
) -> tuple[list[float], Counter]:
    """A loop of fresh payments per client (made beforehand: an ``httpx.Client`` takes tens of
    milliseconds to make) for ``warmup`` + ``duration`` s, client ``i`` with
    ``keys[i % len(keys)]``; a ``429`` or ``503`` is followed by a wait of its ``Retry-After``
    (capped by the time left). The window is the last ``duration`` s: the loop is in its steady
    state by then (every client has a request in flight, the acquirer client's concurrency
    limit has grown), where a window opened with the load would count the first acquirer
    latency's silence against the slow cases. ``window`` is called when the window opens and
    when it closes (the CPU readings). Returns the latencies (ms) of the 201s answered within
    the window, and the count of each status (``"201 warm-up"``, ``"201 late"``: answered
    before it and after it, the latter the requests then in flight; counted apart)."""
    latencies: list[float] = []
    statuses: Counter = Counter()
    lock = threading.Lock()
    start = threading.Barrier(len(clients))
    opens = end = 0.0

    def loop(index: int) -> None:
        nonlocal opens, end
        client = clients[index]
        if start.wait() == 0:
            opens = time.monotonic() + warmup
            end = opens + duration
            threading.Timer(warmup, window).start()
            threading.Timer(warmup + duration, window).start()
        start.wait()  # everyone sees the end
        while (left := end - time.monotonic()) > 0:
            started = time.perf_counter()
            try:
                answer = post_payment(client, url, keys[index % len(keys)], uuid.uuid4().hex)
                status: int | str = answer.status_code
            except httpx.HTTPError as exc:
                answer, status = None, type(exc).__name__
            elapsed = (time.perf_counter() - started) * 1000
            now = time.monotonic()
            # answered before the window or after it: not in its throughput
            phase = " warm-up" if now < opens else " late" if now > end else ""
            with lock:
                statuses[f"{status}{phase}" if phase else status] += 1
                if status == 201 and not phase:
                    latencies.append(elapsed)
            if answer is not None and status in (429, 503):
                time.sleep(min(left, float(answer.headers.get("Retry-After", "1"))))

    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(loop, range(len(clients))))
    return latencies, statuses


def open_load(
    url: str,
    clients: list[httpx.Client],
    keys: list[str],
    rate: float,
    duration: float,
    window: Callable[[], None],
    rng: random.Random,
) -> tuple[list[float], Counter, int]:
    """Poisson arrivals at ``rate`` per second for ``duration`` s (an open loop: shoppers do not
    wait for each other), each sent on a thread of its own with a client of ``clients`` no
    other request is using (so at most ``len(clients)`` at once), with ``keys`` in turn and a
    fresh idempotency key; ``window`` is called at the first arrival and once every answer is
    in. Returns the latencies (ms, from the arrival, so a request's wait for a thread or a
    connection here or in the service is counted: no coordinated omission) of the 201s, the
    count of each status, and the number of arrivals.

    A client per request in flight, not one shared: 256 threads sharing one client's
    connection pool spent 2-3 ms of this process's CPU per request against 0.7 ms for the
    closed loop's client per thread, on the two cores the service runs on, and the more
    requests waited the more they spent, until the load generator's own contention was the
    queue it measured (docs/benchmarks.md, "the open loop's tail")."""
    arrivals: list[float] = []
    at = rng.expovariate(rate)
    while at < duration:
        arrivals.append(at)
        at += rng.expovariate(rate)
    latencies: list[float] = []
    statuses: Counter = Counter()
    lock = threading.Lock()
    idle: queue.SimpleQueue[httpx.Client] = queue.SimpleQueue()
    for client in clients:
        idle.put(client)
    with ThreadPoolExecutor(len(clients)) as pool:
        start = time.perf_counter()

        def send(index: int, arrival: float) -> None:
            client = idle.get()  # never waits: no more threads than clients
            try:
                answer = post_payment(client, url, keys[index % len(keys)], uuid.uuid4().hex)
                status: int | str = answer.status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            finally:
                idle.put(client)
            elapsed = (time.perf_counter() - start - arrival) * 1000
            with lock:
                statuses[status] += 1
                if status == 201:
                    latencies.append(elapsed)

        window()
        for index, arrival in enumerate(arrivals):
            time.sleep(max(0.0, start + arrival - time.perf_counter()))
            pool.submit(send, index, arrival)
    window()
    return latencies, statuses, len(arrivals)


def run_case(
    case: str,
    stack: tuple[Any, Any],
    db: Database,
    keys: dict[str, list[str]],
    clients: list[httpx.Client],
    args: Any,
    application: str,
    open_rate: float = 0.0,
) -> dict[str, Any]:
    """One case of one round: set the sandbox's latency, load, sample; the case's figures.
    ``open_rate``: the ``open`` case's arrivals per second."""
    sandbox, server = stack
    condition = LATENCIES[case]
    with httpx.Client(timeout=5) as control:
        # Forget the last case's charges (its stats stay small while sampled), then set the case.
        control.post(f"{sandbox.url}/_sandbox/reset").raise_for_status()
        path = f"{sandbox.url}/_sandbox/conditions/latency"
        if condition is None:
            control.delete(path).raise_for_status()
        else:
            control.put(path, json=condition).raise_for_status()
    web_pids = [server.process.pid, *server.worker_pids()]
    sampler = Sampler(db, sandbox.url, web_pids, application)
    sampler.start()
    readings: list[dict] = []
    own = {pid: "web" for pid in web_pids} | {sandbox.process.pid: "acquirer (sandbox)",
                                              os.getpid(): "load generator"}  # fmt: skip
    arrivals = 0
    if case == "open":
        latencies, statuses, arrivals = open_load(
            f"{server.url}/payments",
            clients[:OPEN_LOOP_THREADS],
            keys["many"],
            open_rate,
            args.duration,
            lambda: readings.append(
                {**cpu_snapshot(own, db.name), "switches": voluntary_switches(web_pids)}
            ),
            random.Random(OPEN_LOOP_SEED),
        )
    else:
        latencies, statuses = load(
            f"{server.url}/payments",
            keys["alone"] if case == "alone" else keys["many"],
            clients[: args.slow_clients if case == "1s" else args.clients],
            args.duration,
            lambda: readings.append(
                {**cpu_snapshot(own, db.name), "switches": voluntary_switches(web_pids)}
            ),
            warmup=args.warmup,
        )
    before, after = readings
    sampler.stop.set()
    sampler.join()
    cpu_groups = cpu_seconds_by_group(before, after)  # the web pids are the group "web"
    return {
        "case": case,
        "payments": statuses.get(201, 0),
        "answered_201": sum(statuses.get(key, 0) for key in (201, "201 late", "201 warm-up")),
        "seconds": args.duration,
        "arrivals": arrivals,
        "latencies": latencies,
        "statuses": {str(k): v for k, v in statuses.items()},
        "peak_in_flight": sampler.peak_in_flight,
        "peak_connections": sampler.peak_connections,
        "rss_at_peak": sampler.rss_at_peak,
        "web_cpu_seconds": cpu_groups.get("web", 0.0),
        "cpu_groups": cpu_groups,
        "web_switches": after["switches"] - before["switches"],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rounds of each case added up: throughput, percentiles, peaks, memory and CPU."""
    by_case: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_case[run["case"]].append(run)
    summary = {}
    for case, items in by_case.items():
        latencies = [ms for item in items for ms in item["latencies"]]
        payments = sum(item["payments"] for item in items)
        peak = max(items, key=lambda item: item["peak_in_flight"])
        statuses: Counter = Counter()
        for item in items:
            statuses.update(item["statuses"])
        summary[case] = {
            "payments": payments,
            "per_second": ratio(payments, sum(item["seconds"] for item in items)),
            "per_round": [round(ratio(i["payments"], i["seconds"]), 1) for i in items],
            "p50_ms": percentile(latencies, 50),
            "p99_ms": percentile(latencies, 99),
            "peak_in_flight": peak["peak_in_flight"],
            "peak_connections": max(item["peak_connections"] for item in items),
            "rss_mb": peak["rss_at_peak"] / 2**20,
            "rss_kb_per_in_flight": ratio(peak["rss_at_peak"] / 1024, peak["peak_in_flight"]),
            "cpu_ms_per_payment": 1000
            * ratio(sum(item["web_cpu_seconds"] for item in items), payments),
            "switches_per_payment": ratio(sum(item["web_switches"] for item in items), payments),
            "offered_per_second": ratio(
                sum(item.get("arrivals", 0) for item in items),
                sum(item["seconds"] for item in items),
            ),
            "statuses": dict(statuses),
            "machine_busy_cores": ratio(
                sum(i.get("cpu_groups", {}).get("machine_busy_cores", 0.0) for i in items),
                len(items),
            ),
            "cpu_ms_per_payment_by_group": {
                group: 1000
                * ratio(sum(i.get("cpu_groups", {}).get(group, 0.0) for i in items), payments)
                for group in CPU_GROUPS
            },
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = timestamp()
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    with ThreadPoolExecutor(4) as pool:  # one manage.py each: start them side by side
        names = [f"latency-{i}" for i in range(args.merchants)] + ["latency-alone"]
        issued = list(pool.map(lambda name: issue_api_key(db, name), names))
    keys = {"many": issued[:-1], "alone": issued[-1:]}
    env: dict[str, str | None] = {
        "WEB_WORKER_CLASS": SERVERS[args.server],
        "ACQUIRER_STATE_NAMESPACE": f"bench:latency:{stamp}",
        # The per-merchant limits at their defaults (bench.common turns them off otherwise).
        "MERCHANT_RATE_LIMIT_REQUESTS": None,
        "MERCHANT_CONCURRENT_PAYMENTS": None,
        "LOG_LEVEL": "WARNING",
    }
    if args.threads:
        env["WEB_THREADS"] = str(args.threads)
    if args.workers:
        env["WEB_CONCURRENCY"] = str(args.workers)
    variants = {"": env}
    if args.versus_before:
        # The same code with issue 30's server settings off: 4 threads per worker, a persistent
        # connection per thread, the same limits; rotated with the new one, case by case.
        variants[BEFORE] = {**env, "WEB_THREADS": "4", "DATABASE_POOL": "false",
                            "WEB_WORKER_CLASS": "gthread"}  # fmt: skip
    if args.versus_gevent:
        variants[GEVENT] = {**env, "WEB_WORKER_CLASS": "gevent"}
    if args.versus:
        variants[VERSUS] = {**env, **dict(item.split("=", 1) for item in args.versus)}
    runs: list[dict[str, Any]] = []
    # The closed loops' clients are the first --clients (or --slow-clients) of these, the open
    # loop's the first OPEN_LOOP_THREADS.
    count = max(args.clients, args.slow_clients, OPEN_LOOP_THREADS)
    clients = [httpx.Client(timeout=30) for _ in range(count)]
    with ExitStack() as started:
        stacks = {}
        for label, variant in variants.items():
            name = application_name(label)
            url = application_url(db, name)
            stacks[label] = started.enter_context(
                service_stack(db, name, DATABASE_URL=url, **variant)
            )
        for label, stack in stacks.items():
            for i, client in enumerate(clients[:16]):  # every worker's first requests, untimed
                post_payment(
                    client,
                    f"{stack[1].url}/payments",
                    keys["many"][0],
                    f"warm-{i}-{application_name(label)}",
                )
        for round_number in range(args.rounds):
            for case in args.cases:
                for label, stack in stacks.items():
                    rate = 0.0
                    if case == "open":
                        closed = [r for r in runs if r["case"] == "300ms" + label]
                        if not closed:
                            raise SystemExit("the open case needs the 300ms case before it")
                        rate = OPEN_LOAD_SHARE * ratio(closed[-1]["payments"], args.duration)
                    run = run_case(
                        case, stack, db, keys, clients, args, application_name(label), rate
                    )
                    run["case"] = case + label
                    runs.append(run)
                    shown = {k: v for k, v in run.items() if k != "latencies"}
                    print(f"round {round_number + 1} {json.dumps(shown)}", flush=True)
    for client in clients:
        client.close()
    summary = summarize(runs)
    succeeded = count_rows(db, "SELECT count(*) FROM payments_payment WHERE status = 'succeeded'")
    answered = sum(run["answered_201"] for run in runs) + 16 * len(variants)
    for case, figures in summary.items():
        assert figures["payments"] > 0, f"{case}: no payment made"
    assert succeeded >= answered, f"{answered} answered 201 but {succeeded} succeeded rows"
    print()
    print_table(
        ["case", "payments", "per s", "p50 ms", "p99 ms", "peak in flight", "peak conns",
         "RSS MB", "RSS KB / in flight", "web CPU ms / payment", "web switches / payment",
         "answers"],
        [(case, f["payments"], f["per_second"], f["p50_ms"], f["p99_ms"], f["peak_in_flight"],
          f["peak_connections"], f["rss_mb"], f["rss_kb_per_in_flight"],
          f["cpu_ms_per_payment"], f["switches_per_payment"], f["statuses"])
         for case, f in summary.items()],
    )  # fmt: skip
    print()
    print_table(
        ["case", "machine busy cores", *(f"{group} CPU ms / payment" for group in CPU_GROUPS)],
        [(case, f["machine_busy_cores"], *f["cpu_ms_per_payment_by_group"].values())
         for case, f in summary.items()],
    )  # fmt: skip
    pairs = {
        "300ms / instant": ("300ms", "instant"),
        "1s / instant": ("1s", "instant"),
        "alone / 300ms": ("alone", "300ms"),
        "300ms: before / now": ("300ms" + BEFORE, "300ms"),
        "1s: before / now": ("1s" + BEFORE, "1s"),
        "300ms: gevent / gthread": ("300ms" + GEVENT, "300ms"),
        "1s: gevent / gthread": ("1s" + GEVENT, "1s"),
        "300ms / instant, versus": ("300ms" + VERSUS, "instant" + VERSUS),
        "300ms: versus / now": ("300ms" + VERSUS, "300ms"),
        "1s: versus / now": ("1s" + VERSUS, "1s"),
    }
    ratios = {
        name: ratio(summary[top]["per_second"], summary[bottom]["per_second"])
        for name, (top, bottom) in pairs.items()
        if top in summary and bottom in summary
    }
    if "open" in summary:
        # Served / offered near 1 and a p99 within the bound: no queue grows (no collapse).
        ratios["open: served / offered"] = ratio(
            summary["open"]["per_second"], summary["open"]["offered_per_second"]
        )
    for case in ("300ms", "1s", "open"):
        if case in summary and "instant" in summary:
            # Issue 30's bound: p99 <= 2 x the acquirer's p99 + the instant case's p99 (<= 1).
            condition = LATENCIES[case] or {}
            acquirer_p99 = condition["mean_ms"] + NORMAL_P99_Z * condition["sd_ms"]
            bound = 2 * acquirer_p99 + summary["instant"]["p99_ms"]
            ratios[f"{case} p99 / its bound"] = ratio(summary[case]["p99_ms"], bound)
    for label in (BEFORE, GEVENT, VERSUS):
        if "instant" + label in summary:
            ratios[f"instant CPU per payment: now / {label.strip(' ()')}"] = ratio(
                summary["instant"]["cpu_ms_per_payment"],
                summary["instant" + label]["cpu_ms_per_payment"],
            )
    print("\nratios (one run): " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    print(f"payments: {answered} answered 201, {succeeded} succeeded rows in the database")
    path = write_results(
        f"latency-{args.server}",
        {"machine": machine_context(), "settings": vars(args), "summary": summary,
         "ratios": ratios},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
