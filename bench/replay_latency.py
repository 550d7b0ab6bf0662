"""Benchmark: the latency of a replay against the latency of a fresh payment.

One command (docs/benchmarks.md, "Replay latency")::

    .venv/bin/python bench/replay_latency.py             # 3 rounds, 8 s per measurement
    .venv/bin/python bench/replay_latency.py --duration 3 --rounds 1 --pool 200

It starts the sandbox (answering at once) and gunicorn as the Procfile does, completes
``--pool`` payments with keys ``<prefix>-0 .. <prefix>-<pool-1>``, then alternates wrk runs:
**fresh** (a new key per request: claim, payment, acquirer call, completion) and **replay**
(the pool's keys again, same body: the stored answer, ``Idempotent-Replayed: true``), at each
concurrency of ``--concurrency`` (1 connection: the time of one request on an idle service;
16: under load). Reported: median and p99 latency of each, and replay/fresh ratios (medians of
the per-round ratios).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
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


def prefill(url: str, api_key: str, prefix: str, pool: int, workers: int = 8) -> dict[int, int]:
    """Complete ``pool`` payments under keys ``<prefix>-<i>``; returns answers per status."""
    statuses: dict[int, int] = {}

    def one(start: int) -> None:
        with httpx.Client(timeout=30) as client:
            for i in range(start, pool, workers):
                status = post_payment(client, url, api_key, f"{prefix}-{i}").status_code
                statuses[status] = statuses.get(status, 0) + 1

    with ThreadPoolExecutor(workers) as executor:
        list(executor.map(one, range(workers)))
    return statuses


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=8, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", type=int, default=600, help="completed keys to replay")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 16], help="wrk connections"
    )
    parser.add_argument("--database", default=None, help="benchmark database name")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = timestamp()
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    prefix = f"replay-{stamp}"
    runs: dict[tuple[int, str], list[dict]] = {}
    with service_stack(db, "replay") as (_sandbox, server):
        url = f"{server.url}/payments"
        filled = prefill(url, api_key, prefix, args.pool)
        if filled != {201: args.pool}:
            raise SystemExit(f"prefill answered {filled}")
        with httpx.Client(timeout=10) as client:
            again = post_payment(client, url, api_key, f"{prefix}-0")
            assert again.headers.get("Idempotent-Replayed") == "true", again.headers
        run_wrk(url, api_key=api_key, prefix=f"warm-{stamp}", duration=2, connections=4)
        for n in range(args.rounds):
            for connections in args.concurrency:
                for mode in ("fresh", "replay") if n % 2 == 0 else ("replay", "fresh"):
                    result = run_wrk(
                        url, api_key=api_key, mode=mode, duration=args.duration,
                        prefix=prefix if mode == "replay" else f"f{n}c{connections}-{stamp}",
                        pool=args.pool, connections=connections, threads=min(2, connections),
                    )  # fmt: skip
                    runs.setdefault((connections, mode), []).append(result.as_dict())
                    print(
                        f"round {n + 1} c={connections:<3d} {mode:6s} {result.rate():7.1f}/s  "
                        f"p50 {result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  "
                        f"statuses {result.statuses}"
                    )

    rows, summary = [], {}
    for connections in args.concurrency:
        fresh, replay = runs[(connections, "fresh")], runs[(connections, "replay")]
        entry = {}
        for stat in ("p50_ms", "p99_ms"):
            entry[f"fresh_{stat}"] = median(r[stat] for r in fresh)
            entry[f"replay_{stat}"] = median(r[stat] for r in replay)
            pairs = zip(fresh, replay, strict=True)
            entry[f"ratio_{stat}"] = median(ratio(b[stat], a[stat]) for a, b in pairs)
        entry["fresh_rps"] = median(ratio(r["requests"], r["seconds"]) for r in fresh)
        entry["replay_rps"] = median(ratio(r["requests"], r["seconds"]) for r in replay)
        summary[str(connections)] = entry
        rows.append((
            connections, entry["fresh_p50_ms"], entry["replay_p50_ms"], entry["ratio_p50_ms"],
            entry["fresh_p99_ms"], entry["replay_p99_ms"], entry["ratio_p99_ms"],
            ratio(entry["replay_rps"], entry["fresh_rps"]),
        ))  # fmt: skip
    print()
    print_table(
        ["connections", "fresh p50 ms", "replay p50 ms", "replay/fresh p50", "fresh p99 ms",
         "replay p99 ms", "replay/fresh p99", "replay/fresh req/s"],
        rows,
    )  # fmt: skip
    path = write_results(
        "replay_latency",
        {"machine": machine_context(), "settings": vars(args), "summary": summary,
         "runs": {f"c{c}-{m}": v for (c, m), v in runs.items()}},
    )  # fmt: skip
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
