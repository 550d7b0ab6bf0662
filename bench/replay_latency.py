"""Benchmark: the latency of a replay against the latency of a fresh payment.

One command (docs/benchmarks.md, "Replay latency")::

    .venv/bin/python bench/replay_latency.py             # 3 rounds, 8 s per measurement
    .venv/bin/python bench/replay_latency.py --duration 3 --rounds 1 --pool 200

It starts the sandbox (answering at once) and gunicorn as the Procfile does, completes
``--pool`` payments with keys ``<prefix>-0 .. <prefix>-<pool-1>``, then alternates wrk runs:
**fresh** (a new key per request: claim, payment, acquirer call, completion) and **replay**
(the pool's keys again, same body: the stored answer, ``Idempotent-Replayed: true``) and
**conflict** (``--pool`` keys held in progress, as by a request still running: every answer a
``409 idempotency_key_in_use``), at each concurrency of ``--concurrency`` (1 connection: the
time of one request on an idle service; 16: under load). Reported: median and p99 latency of
each, and replay/fresh and conflict/fresh ratios (medians of the per-round ratios).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    PAYMENT_BODY,
    database_from_env,
    issue_api_key,
    machine_context,
    median,
    merchant_id,
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


def hold_in_progress(db, prefix: str, pool: int) -> None:
    """Insert ``pool`` keys ``<prefix>-<i>`` in progress, locked for a day (a request that never
    ends), with the fingerprint of the benchmark's body: every request with one is a 409."""
    import psycopg

    from idempotency.fingerprint import request_fingerprint

    fingerprint = request_fingerprint("POST", "/payments", PAYMENT_BODY)
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO idempotency_idempotencykey (merchant_id, key, method, route, "
            "request_fingerprint, status, locked_at, response_headers, created_at, expires_at) "
            "SELECT %s, %s || '-' || i, 'POST', '/payments', %s, 'in_progress', "
            "now() + interval '1 day', '{}', now(), now() + interval '1 day' "
            "FROM generate_series(0, %s - 1) AS i",
            [merchant_id(db), prefix, fingerprint, pool],
        )


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
        hold_in_progress(db, f"held-{stamp}", args.pool)
        run_wrk(url, api_key=api_key, prefix=f"warm-{stamp}", duration=2, connections=4)
        modes = ("fresh", "replay", "conflict")
        for n in range(args.rounds):
            for connections in args.concurrency:
                for mode in modes[n % 3 :] + modes[: n % 3]:  # rotating order
                    key_prefix = {"replay": prefix, "conflict": f"held-{stamp}"}.get(
                        mode, f"f{n}c{connections}-{stamp}"
                    )
                    result = run_wrk(
                        url, api_key=api_key, mode="fresh" if mode == "fresh" else "replay",
                        duration=args.duration, prefix=key_prefix, pool=args.pool,
                        connections=connections, threads=min(2, connections),
                    )  # fmt: skip
                    runs.setdefault((connections, mode), []).append(result.as_dict())
                    print(
                        f"round {n + 1} c={connections:<3d} {mode:6s} {result.rate():7.1f}/s  "
                        f"p50 {result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  "
                        f"statuses {result.statuses}"
                    )

    rows, summary = [], {}
    for connections in args.concurrency:
        fresh = runs[(connections, "fresh")]
        entry = {}
        for mode in ("replay", "conflict"):
            other = runs[(connections, mode)]
            for stat in ("p50_ms", "p99_ms"):
                entry[f"fresh_{stat}"] = median(r[stat] for r in fresh)
                entry[f"{mode}_{stat}"] = median(r[stat] for r in other)
                pairs = zip(fresh, other, strict=True)
                entry[f"{mode}_ratio_{stat}"] = median(ratio(b[stat], a[stat]) for a, b in pairs)
            entry[f"{mode}_rps"] = median(ratio(r["requests"], r["seconds"]) for r in other)
        entry["fresh_rps"] = median(ratio(r["requests"], r["seconds"]) for r in fresh)
        summary[str(connections)] = entry
        for mode in ("replay", "conflict"):
            rows.append((
                connections, mode, entry["fresh_p50_ms"], entry[f"{mode}_p50_ms"],
                entry[f"{mode}_ratio_p50_ms"], entry["fresh_p99_ms"], entry[f"{mode}_p99_ms"],
                entry[f"{mode}_ratio_p99_ms"], ratio(entry[f"{mode}_rps"], entry["fresh_rps"]),
            ))  # fmt: skip
    print()
    print_table(
        ["connections", "mode", "fresh p50 ms", "p50 ms", "/ fresh p50", "fresh p99 ms",
         "p99 ms", "/ fresh p99", "req/s / fresh"],
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
