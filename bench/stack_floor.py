"""Benchmark: the service against the stack floor, the cheapest ``POST /payments`` this stack
can serve, and both against the minimal write floor, in one run.

One command (docs/benchmarks.md, "The stack floor")::

    .venv/bin/python bench/stack_floor.py                  # 3 rounds x 3 sides x 10 s
    .venv/bin/python bench/stack_floor.py --duration 5 --rounds 1

Issue 18 set two absolute goals for a fresh payment: at most 3.5 ms of CPU in the service's own
processes (gunicorn and PostgreSQL backends), and at least 0.15 of the minimal write floor's
payments per second. This benchmark asks how much of either the stack itself takes. It starts
the sandbox (answering at once) and two gunicorns as the Procfile runs them (2 workers x 64
threads, the same environment), and measures three sides in rotating order, ``--rounds``
times:

* ``service``: ``POST /payments`` of the service, new keys, through wrk (16 connections), the
  acquirer state in memory as in ``bench/throughput.py`` (``--state-redis-url`` for Redis);
* ``stack floor``: ``POST /bench/floor/payments`` (``bench/peers/floor_views.py``) through wrk
  the same way: gunicorn, Django's request handling with no middleware, the minimal floor's
  six writes in two prepared statements (one per phase, as the service's hot path sends its
  phases) on Django's psycopg connection, and one ``POST /charges`` to the sandbox on httpx's
  transport between them. No authentication, validation, retry policy, breaker, log line
  (gunicorn's access line included), outbox or metrics;
* ``minimal floor``: pgbench running ``bench/floor/payment.pgbench`` with as many clients as
  the web processes have database connections (8), as ``bench/throughput.py`` does.

Reported per side: the median of the rounds' payments per second; CPU ms per payment in the
web workers and in PostgreSQL (backends of the benchmark database and PostgreSQL's shared
processes; pgbench itself for the minimal floor), from the round whose total is the median, so
that the parts add up; and the ratios stack floor / minimal floor and
service / stack floor, by throughput and by CPU. The sandbox stands in for an acquirer
elsewhere and is not counted, nor is wrk.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    RESULTS,
    SANDBOX_API_KEY,
    CpuWatch,
    Gunicorn,
    database_from_env,
    django_env,
    issue_api_key,
    machine_context,
    median,
    post_payment,
    prepare_database,
    print_table,
    ratio,
    run_pgbench,
    run_wrk,
    start_sandbox,
    timestamp,
    write_results,
)
from bench.throughput import FLOOR, load_floor_schema

SIDES = ("service", "stack floor", "minimal floor")
PARTS = ("web", "postgres", "total")
PATHS = {"service": "/payments", "stack floor": "/bench/floor/payments"}
FLOOR_SETTINGS = "bench.peers.floor_settings"


def cpu_ms(cpu: dict[str, float], per_second: float, web: str | None) -> dict[str, float]:
    """CPU ms per payment of one side: ``web`` (the group of that side's gunicorn; ``None``
    for pgbench, whose own CPU is counted as the SQL client's), ``postgres`` (the benchmark
    database's backends and PostgreSQL's shared processes) and their ``total``."""
    items = per_second * cpu["seconds"]
    if items <= 0:
        return {"web": 0.0, "postgres": 0.0, "total": 0.0}
    client = cpu.get(web, 0.0) if web else cpu.get("load generator", 0.0)
    postgres = cpu.get("postgres", 0.0) + cpu.get("postgres (shared processes)", 0.0)
    return {
        "web": 1000 * client / items,
        "postgres": 1000 * postgres / items,
        "total": 1000 * (client + postgres) / items,
    }


def rotation(round_index: int) -> list[str]:
    """The order of the sides in round ``round_index`` (rotated, so none is always first)."""
    shift = round_index % len(SIDES)
    return [*SIDES[shift:], *SIDES[:shift]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=3, help="seconds of wrk per endpoint")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--database", default=None, help="benchmark database name")
    parser.add_argument(
        "--state-redis-url", default="",
        help="ACQUIRER_STATE_REDIS_URL for the service (default: in-memory, as throughput.py)",
    )  # fmt: skip
    return parser.parse_args(argv)


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per side, and the ratios of each round (then their median)."""

    def per_round(a: str, b: str, key: str) -> float:
        return median(ratio(x[key], y[key]) for x, y in zip(runs[a], runs[b], strict=True))

    def cpu_round(a: str, b: str) -> float:  # b's CPU over a's: a's throughput share by CPU
        return median(
            ratio(y["cpu"]["total"], x["cpu"]["total"])
            for x, y in zip(runs[a], runs[b], strict=True)
        )

    def middle(rounds: list[dict[str, Any]]) -> dict[str, float]:
        """The CPU parts of the round whose total is the median (the lower one of two)."""
        ordered = sorted(rounds, key=lambda r: r["cpu"]["total"])
        return {part: ordered[(len(ordered) - 1) // 2]["cpu"][part] for part in PARTS}

    sides = {
        side: {"per_second": median(r["per_second"] for r in runs[side]), **middle(runs[side])}
        for side in SIDES
    }
    return {
        "sides": sides,
        "stack_over_minimal": per_round("stack floor", "minimal floor", "per_second"),
        "service_over_minimal": per_round("service", "minimal floor", "per_second"),
        "service_over_stack": per_round("service", "stack floor", "per_second"),
        "service_over_stack_by_cpu": cpu_round("service", "stack floor"),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = timestamp()
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    load_floor_schema(db)
    api_key = issue_api_key(db)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    where = "a Unix socket (the embedded server)" if db.host.startswith("/") else db.host
    print(f"database {db.name} on {where}")
    sandbox = start_sandbox()
    try:
        env = django_env(
            db, ACQUIRER_BASE_URL=sandbox.url, ACQUIRER_API_KEY=SANDBOX_API_KEY,
            ACQUIRER_STATE_REDIS_URL=args.state_redis_url,
        )  # fmt: skip
        servers = {
            "service": Gunicorn(env, RESULTS / f"stack_floor-service-{stamp}.log"),
            "stack floor": Gunicorn(  # its master logs as the service's does
                {
                    **env,
                    "DJANGO_SETTINGS_MODULE": FLOOR_SETTINGS,
                    "LOG_FORMAT": env.get("LOG_FORMAT") or "console",
                },
                RESULTS / f"stack_floor-floor-{stamp}.log",
            ),
        }
        try:
            for server in servers.values():
                server.start()
            own = {sandbox.process.pid: "sandbox"}
            for side, server in servers.items():
                assert server.process is not None
                own[server.process.pid] = f"{side} master"
                own.update(dict.fromkeys(server.worker_pids(), side))
            watch = CpuWatch(own, db.name)
            with httpx.Client(timeout=10) as client:
                for side, path in PATHS.items():
                    answer = post_payment(
                        client, servers[side].url + path, api_key, f"check-{stamp}-{side[:5]}"
                    )
                    if answer.status_code != 201:
                        raise SystemExit(f"{path} answered {answer.status_code}: {answer.text}")
            for side, path in PATHS.items():
                run_wrk(servers[side].url + path, api_key=api_key, prefix=f"w{side[:5]}{stamp}",
                        duration=args.warmup, connections=args.connections)  # fmt: skip
            # pgbench's clients: the service's database connections, its pool per worker
            # (DATABASE_POOL_MAX_SIZE, config/database.py; ADR 0048), not its threads.
            pool = int(env.get("DATABASE_POOL_MAX_SIZE", "8"))
            clients = int(env.get("WEB_CONCURRENCY", "2")) * pool
            for n in range(args.rounds):
                for side in rotation(n):
                    if side == "minimal floor":
                        pg = run_pgbench(
                            db, FLOOR / "payment.pgbench", clients=clients, threads=2,
                            duration=args.duration, watch=watch,
                        )  # fmt: skip
                        per_second, cpu, other = pg.tps, pg.cpu, {"failed": pg.failed}
                        spent = cpu_ms(cpu, per_second, None)
                    else:
                        http = run_wrk(
                            servers[side].url + PATHS[side], api_key=api_key,
                            prefix=f"r{n}{side[:5]}{stamp}", duration=args.duration,
                            connections=args.connections, watch=watch,
                        )  # fmt: skip
                        per_second, cpu, other = http.rate(201), http.cpu, http.as_dict()
                        spent = cpu_ms(cpu, per_second, side)
                    assert cpu is not None
                    runs[side].append({"per_second": per_second, "cpu": spent, "raw_cpu": cpu,
                                       "run": other})  # fmt: skip
                    client = "pgbench" if side == "minimal floor" else "web"
                    print(
                        f"round {n + 1} {side:14s} {per_second:8.1f}/s  CPU ms per payment: "
                        f"{client} {spent['web']:.2f}, PostgreSQL {spent['postgres']:.2f}, "
                        f"total {spent['total']:.2f}"
                    )
        finally:
            for server in servers.values():
                server.stop()
    finally:
        sandbox.stop()

    result = summarise(runs)
    rows = [
        (side, f"{s['per_second']:,.0f}", f"{s['web']:.2f}", f"{s['postgres']:.2f}",
         f"{s['total']:.2f}")
        for side, s in result["sides"].items()
    ]  # fmt: skip
    print_table(
        ["side", "payments per second", "CPU ms: web (pgbench: the client)", "CPU ms: PostgreSQL",
         "CPU ms per payment"],
        rows,
    )  # fmt: skip
    print_table(
        ["ratio (median of rounds)", "value"],
        [
            ("stack floor / minimal floor, by throughput", f"{result['stack_over_minimal']:.3f}"),
            ("service / minimal floor, by throughput (goal >= 0.15)",
             f"{result['service_over_minimal']:.3f}"),
            ("service / stack floor, by throughput", f"{result['service_over_stack']:.3f}"),
            ("service / stack floor, by CPU (the stack floor's CPU over the service's)",
             f"{result['service_over_stack_by_cpu']:.3f}"),
        ],
    )  # fmt: skip
    path = write_results(
        "stack_floor",
        {"machine": machine_context(), "args": vars(args), "runs": runs, "summary": result},
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
