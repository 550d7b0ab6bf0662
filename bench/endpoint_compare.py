"""Benchmark: the cost of the idempotency layer, and the django-idempotency-key peer.

One command (docs/benchmarks.md, "Cost of the idempotency layer, and a peer")::

    .venv/bin/python bench/endpoint_compare.py               # 3 rounds x 3 endpoints x 10 s
    .venv/bin/python bench/endpoint_compare.py --duration 5 --rounds 1

It starts the sandbox (answering at once) and gunicorn as the Procfile does, with the bench-only
settings ``bench.peers.settings`` (the service's settings plus two routes), and drives three
endpoints with wrk, new keys on every request, in rotating order for ``--rounds`` rounds:

* ``/payments``: the service, with its idempotency layer;
* ``/bench/plain/payments``: the same endpoint without it (``bench/peers/views.py``);
* ``/bench/peer/payments``: that plain endpoint behind the django-idempotency-key middleware,
  in the configuration its README documents for several processes (responses in a Django
  cache on Redis, a Redis lock; ``--peer-storage memory`` for the package's defaults).

Reported per endpoint (medians over rounds): 201 answers per second, other answers, median and
p99 latency, and the CPU milliseconds (gunicorn and PostgreSQL, read from ``/proc``) per 201;
and the ratios service/plain (what the layer leaves of the plain throughput), peer/plain and
service/peer, measured both ways: by throughput, and by CPU per payment (the inverse ratio of
CPU costs, which other tenants of a shared machine do not move).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    CpuWatch,
    database_from_env,
    issue_api_key,
    machine_context,
    median,
    post_payment,
    prepare_database,
    print_table,
    ratio,
    run_wrk,
    service_stack,
    timestamp,
    write_results,
)

ENDPOINTS = {
    "service": "/payments",
    "plain": "/bench/plain/payments",
    "peer": "/bench/peer/payments",
}
LABELS = {
    "service": "service (idempotency layer)",
    "plain": "same endpoint, no idempotency layer",
    "peer": "plain endpoint + django-idempotency-key",
}


def service_cpu_ms(cpu: dict[str, float], per_second: float) -> float:
    """CPU ms of gunicorn and of the benchmark database's PostgreSQL backends per 201 answer
    (robust to other tenants of a shared machine, unlike the throughput)."""
    used = cpu.get("gunicorn", 0.0) + cpu.get("postgres", 0.0)
    used += cpu.get("postgres (shared processes)", 0.0)
    return ratio(1000 * used, per_second * cpu["seconds"])


def rotation(names: list[str], round_index: int) -> list[str]:
    """The order of the endpoints in round ``round_index`` (rotated, so none is always first)."""
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per endpoint run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=3, help="seconds per endpoint")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--peer-storage", choices=("redis", "memory"), default="redis")
    parser.add_argument("--peer-redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--database", default=None, help="benchmark database name")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = timestamp()
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    runs: dict[str, list[dict]] = {name: [] for name in ENDPOINTS}
    with service_stack(
        db,
        "endpoints",
        settings_module="bench.peers.settings",
        BENCH_PEER_STORAGE=args.peer_storage,
        BENCH_PEER_REDIS_URL=args.peer_redis_url,
    ) as (sandbox, server):
        own = {server.process.pid: "gunicorn", sandbox.process.pid: "sandbox"}
        own.update(dict.fromkeys(server.worker_pids(), "gunicorn"))
        watch = CpuWatch(own, db.name)
        with httpx.Client(timeout=10) as client:
            for name, path in ENDPOINTS.items():
                answer = post_payment(client, server.url + path, api_key, f"check-{stamp}-{name}")
                if answer.status_code != 201:
                    raise SystemExit(f"{path} answered {answer.status_code}: {answer.text[:300]}")
        for name, path in ENDPOINTS.items():
            run_wrk(server.url + path, api_key=api_key, prefix=f"warm-{name}-{stamp}",
                    duration=args.warmup, connections=args.connections)  # fmt: skip
        for n in range(args.rounds):
            for name in rotation(list(ENDPOINTS), n):
                result = run_wrk(
                    server.url + ENDPOINTS[name], api_key=api_key, prefix=f"{name}{n}-{stamp}",
                    duration=args.duration, connections=args.connections, watch=watch,
                )  # fmt: skip
                runs[name].append({
                    **result.as_dict(), "rps_201": result.rate(201),
                    "cpu_ms_per_201": service_cpu_ms(result.cpu, result.rate(201)),
                })  # fmt: skip
                print(
                    f"round {n + 1} {name:8s} {result.rate(201):7.1f} 201/s  "
                    f"p50 {result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  "
                    f"statuses {result.statuses}"
                )

    def per_round_cpu_ratio(a: str, b: str) -> float:
        """b's CPU per payment over a's: a throughput ratio that other tenants do not move."""
        pairs = zip(runs[a], runs[b], strict=True)
        return median(ratio(y["cpu_ms_per_201"], x["cpu_ms_per_201"]) for x, y in pairs)

    def per_round_ratio(a: str, b: str) -> float:
        return median(
            ratio(x["rps_201"], y["rps_201"]) for x, y in zip(runs[a], runs[b], strict=True)
        )

    summary = {
        name: {
            "rps_201": median(r["rps_201"] for r in rs),
            "p50_ms": median(r["p50_ms"] for r in rs),
            "p99_ms": median(r["p99_ms"] for r in rs),
            "cpu_ms_per_201": median(r["cpu_ms_per_201"] for r in rs),
            "non_201_share": median(
                ratio(r["requests"] - r["statuses"].get("201", 0), r["requests"]) for r in rs
            ),
        }
        for name, rs in runs.items()
    }
    ratios = {
        "service/plain": per_round_ratio("service", "plain"),
        "peer/plain": per_round_ratio("peer", "plain"),
        "service/peer": per_round_ratio("service", "peer"),
        "cpu: service/plain": per_round_cpu_ratio("service", "plain"),
        "cpu: peer/plain": per_round_cpu_ratio("peer", "plain"),
        "cpu: service/peer": per_round_cpu_ratio("service", "peer"),
    }
    print()
    print_table(
        ["endpoint", "201/s", "other answers", "p50 ms", "p99 ms", "CPU ms per 201"],
        [
            (
                LABELS[n],
                s["rps_201"],
                f"{s['non_201_share']:.1%}",
                s["p50_ms"],
                s["p99_ms"],
                s["cpu_ms_per_201"],
            )
            for n, s in summary.items()
        ],
    )
    print()
    print_table(["ratio (median of per-round ratios)", "value"], list(ratios.items()))
    path = write_results(
        "endpoint_compare",
        {"machine": machine_context(), "settings": vars(args), "runs": runs,
         "summary": summary, "ratios": ratios},
    )  # fmt: skip
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
