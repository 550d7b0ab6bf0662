"""Benchmark: what one fresh payment costs, measured, for the capacity model of docs/scaling.md.

One command (docs/scaling.md, "Measured per-payment costs")::

    .venv/bin/python bench/capacity.py                   # 3 rounds of 600 payments
    .venv/bin/python bench/capacity.py --payments 200 --rounds 1

It starts the sandbox acquirer (answering at once) and gunicorn as the Procfile does, against
the benchmark database (``BENCH_DATABASE``, emptied) and a private Redis (a Valkey server of its
own, no TCP port) that is both the Celery broker and the acquirer state, so every Redis command
and every Celery message counted is the service's. The merchant limits are on (set so high that
they never refuse: their Redis scripts run as in production), the bench merchant has one webhook
endpoint for every event type, and no Celery worker runs (the messages stay in the broker, where
they are counted). Then, per round of ``--payments`` ``POST /payments`` with new keys from
``--concurrency`` client threads, it reads before and after:

* the SQL statements of one request (Django's query log, as bench/throughput.py does);
* WAL bytes (``pg_current_wal_lsn()``; the server's, so another database's writes on a shared
  machine add to it: the smallest round is reported, next to the idle rate measured before);
* commits of the benchmark database (``pg_stat_database.xact_commit``), each an fsync of the WAL;
* Redis commands by name (``INFO commandstats``) and Celery messages (the broker's lists);
* CPU milliseconds per payment in the gunicorn workers and the database's backends (``/proc``).

After the stack stops (its backends exit and flush their statistics) it reads the rows
inserted, updated (HOT or not) and deleted per table (``pg_stat_user_tables``) and turns them
into index entries written (an insert or a non-HOT update adds one to each index of the table),
and the bytes kept per payment in each table (``pg_total_relation_size`` / rows, indexes and
TOAST included). It prints the commit it measured (``git rev-parse``) and writes everything to
``bench/results/capacity-<timestamp>.json``. No figure is asserted anywhere: the numbers feed
the model, and another run after a change of the request's SQL gives the new ones.
"""

# ruff: noqa: S603, S607 - benchmarks run their own commands (git, gunicorn)
# ruff: noqa: S608 - SQL text built from constants (table names)

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    ROOT,
    CpuWatch,
    Database,
    cpu_seconds_by_group,
    cpu_snapshot,
    database_from_env,
    issue_api_key,
    machine_context,
    median,
    post_payment,
    prepare_database,
    print_table,
    service_stack,
    timestamp,
    write_results,
)
from bench.throughput import capture_request_sql, captured_shapes

#: The tables a payment writes to, and whose size per payment is kept.
TABLES = (
    "idempotency_idempotencykey",
    "payments_payment",
    "payments_paymentevent",
    "payments_paymentoperation",
    "webhooks_event",
    "webhooks_delivery",
    "merchants_apikey",
)
#: Limits as high as they go in practice: every request runs the limit scripts, none is refused.
UNREFUSING_LIMITS = {
    "MERCHANT_RATE_LIMIT_REQUESTS": "100000000",
    "MERCHANT_CONCURRENT_PAYMENTS": "100000",
}


def commit_measured() -> str:
    """``git rev-parse --short HEAD``, with ``+changes`` when the work tree differs."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def empty_tables(db: Database) -> None:
    """Empty the webhook tables too (bench.common.truncate_payments empties the payment ones)."""
    import psycopg

    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute("TRUNCATE webhooks_deliveryattempt, webhooks_delivery, webhooks_event CASCADE")
        conn.execute("DELETE FROM webhooks_webhookendpoint")


def database_counters(db: Database) -> dict[str, Any]:
    """The server's WAL position (bytes and LSN text) and the database's commits so far."""
    import psycopg

    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        wal, lsn, commits = conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, pg_current_wal_lsn(),"
            " xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return {"wal_bytes": int(wal), "lsn": str(lsn), "commits": int(commits)}


def pg_waldump_binary(db: Database) -> tuple[str, Path] | None:
    """pg_waldump of the server's version and the server's ``pg_wal`` directory, when this
    machine runs the server and may read it (else None: only the server-wide LSN delta)."""
    import psycopg

    try:
        with psycopg.connect(db.conninfo(), autocommit=True) as conn:
            version = conn.execute("SHOW server_version_num").fetchone()[0]
            wal_dir = Path(conn.execute("SHOW data_directory").fetchone()[0]) / "pg_wal"
    except psycopg.Error:  # not a superuser: data_directory is hidden
        return None
    binary = Path(f"/usr/lib/postgresql/{int(version) // 10000}/bin/pg_waldump")
    if not binary.exists() or not os.access(wal_dir, os.R_OK):
        return None
    return str(binary), wal_dir


_WAL_RECORD = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+),")


def wal_bytes_of_database(
    waldump: tuple[str, Path], start: str, end: str, oid: int
) -> tuple[int, int]:
    """WAL bytes between LSNs ``start`` and ``end`` that belong to database ``oid``: records
    touching one of its relations (``rel <tablespace>/<oid>/...``, full-page images included)
    and every record of a transaction that did (its commit record among them), read with
    pg_waldump, so other databases' writes on a shared server are not counted. Returns the
    bytes and the number of those transactions that committed (each a WAL flush)."""
    binary, wal_dir = waldump
    done = subprocess.run(
        [binary, "-p", str(wal_dir), "-s", start, "-e", end],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 and "could not find file" in done.stderr:
        # The server recycled the round's first segments (another database wrote more than
        # max_wal_size meanwhile): no figure rather than a wrong one.
        print(f"pg_waldump could not read {start}..{end}: {done.stderr.strip()[:200]}")
        return -1, -1
    return wal_of_database(done.stdout, oid)


def wal_of_database(dump: str, oid: int) -> tuple[int, int]:
    """From pg_waldump's text ``dump``: the bytes of the records of database ``oid`` and of its
    transactions, and how many of those transactions committed (see
    :func:`wal_bytes_of_database`)."""
    records = []
    ours: set[str] = set()
    commits: set[str] = set()
    marker = f"/{oid}/"
    for line in dump.splitlines():
        match = _WAL_RECORD.search(line)
        if not match:
            continue
        mine = marker in line
        records.append((int(match.group(1)), match.group(2), mine))
        if mine and match.group(2) != "0":
            ours.add(match.group(2))
        if "rmgr: Transaction" in line and "desc: COMMIT" in line:
            commits.add(match.group(2))
    return sum(size for size, tx, mine in records if mine or tx in ours), len(ours & commits)


def database_oid(db: Database) -> int:
    import psycopg

    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        return int(
            conn.execute(
                "SELECT oid FROM pg_database WHERE datname = current_database()"
            ).fetchone()[0]
        )


def table_counters(db: Database) -> dict[str, dict[str, int]]:
    """Per table of :data:`TABLES`: rows inserted, updated, HOT-updated, deleted (statistics
    flushed so far), its number of indexes, its rows now and its total size in bytes."""
    import psycopg

    result: dict[str, dict[str, int]] = {}
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        for table in TABLES:
            ins, upd, hot, dele = conn.execute(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables"
                " WHERE relname = %s",
                [table],
            ).fetchone()
            indexes = conn.execute(
                "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", [table]
            ).fetchone()[0]
            rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            size = conn.execute("SELECT pg_total_relation_size(%s)", [table]).fetchone()[0]
            result[table] = {
                "inserted": ins,
                "updated": upd,
                "hot_updated": hot,
                "deleted": dele,
                "indexes": indexes,
                "rows": rows,
                "bytes": size,
            }
    return result


def redis_counters(client: Any) -> dict[str, Any]:
    """Calls per Redis command so far, the broker's queued messages (every list's length), the
    keys and the memory the server holds."""
    stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    queued = sum(client.llen(key) for key in client.scan_iter() if client.type(key) == b"list")
    memory = client.info("memory")
    return {
        "calls": calls,
        "queued_messages": queued,
        "keys": client.dbsize(),
        "used_memory": int(memory["used_memory"]),
    }


def send_payments(url: str, api_key: str, prefix: str, count: int, concurrency: int) -> Counter:
    """``count`` POST /payments with keys ``<prefix>-<n>`` from ``concurrency`` threads;
    returns the answers' status codes."""
    per_thread = [range(t, count, concurrency) for t in range(concurrency)]

    def run(numbers: range) -> list[int]:
        with httpx.Client(timeout=30) as client:
            return [
                post_payment(client, url, api_key, f"{prefix}-{n}").status_code for n in numbers
            ]

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return Counter(code for codes in pool.map(run, per_thread) for code in codes)


def add_webhook_endpoint(base_url: str, api_key: str) -> None:
    """One endpoint of the bench merchant for every event type (never reached: no worker)."""
    answer = httpx.post(
        f"{base_url}/webhook_endpoints",
        timeout=10,
        headers={"Authorization": f"Bearer {api_key}"},
        json={"url": "http://127.0.0.1:9/webhooks", "enabled_events": ["*"]},
    )
    answer.raise_for_status()


def redis_round_trips(redis_server: Any, url: str, api_key: str, prefix: str, count: int) -> dict:
    """Commands sent to Redis by clients (not those run inside scripts) during ``count``
    payments sent one after the other, from ``MONITOR``: per payment, by command."""
    seen: Counter = Counter()
    end = f"{prefix}-monitor-end"
    ready = threading.Event()

    def watch() -> None:
        with redis_server.client().monitor() as monitor:
            ready.set()
            while True:
                command = monitor.next_command()
                if end in command["command"]:
                    return
                if command.get("client_type") != "lua":
                    seen[command["command"].split()[0].lower()] += 1

    thread = threading.Thread(target=watch)
    thread.start()
    ready.wait(10)
    time.sleep(0.2)
    with httpx.Client(timeout=30) as client:
        for n in range(count):
            post_payment(client, url, api_key, f"{prefix}-{n}")
    redis_server.client().echo(end)
    thread.join(30)
    return {name: calls / count for name, calls in seen.most_common()}


def idle_wal_rate(db: Database, seconds: float) -> float:
    """WAL bytes per second the server writes while this benchmark sends nothing."""
    before = database_counters(db)["wal_bytes"]
    time.sleep(seconds)
    return (database_counters(db)["wal_bytes"] - before) / seconds


def measure_round(ctx: dict[str, Any], n: int) -> dict[str, Any]:
    """One round: ``ctx["payments"]`` payments and the counters' deltas per payment."""
    db, redis_client, server, watch = ctx["db"], ctx["redis"], ctx["server"], ctx["watch"]
    count = ctx["payments"]
    db0, redis0, cpu0 = (
        database_counters(db),
        redis_counters(redis_client),
        cpu_snapshot(watch.own, watch.database),
    )
    started = time.monotonic()
    statuses = send_payments(
        f"{server.url}/payments", ctx["api_key"], f"r{n}-{ctx['stamp']}", count, ctx["concurrency"]
    )
    elapsed = time.monotonic() - started
    cpu = cpu_seconds_by_group(cpu0, cpu_snapshot(watch.own, watch.database))
    db1, redis1 = database_counters(db), redis_counters(redis_client)
    calls = {k: v - redis0["calls"].get(k, 0) for k, v in redis1["calls"].items()}
    calls = {k: v / count for k, v in calls.items() if v and k != "info" and k != "scan"}
    for k in ("llen", "type", "dbsize"):  # this benchmark's own reads
        calls.pop(k, None)
    workers = sum(v for k, v in cpu.items() if k.startswith("gunicorn worker"))
    server_wal = (db1["wal_bytes"] - db0["wal_bytes"]) / count
    wal, flushes = server_wal, math.nan
    if ctx["waldump"] is not None:
        wal_bytes, commits = wal_bytes_of_database(
            ctx["waldump"], db0["lsn"], db1["lsn"], ctx["oid"]
        )
        if wal_bytes >= 0:
            wal, flushes = wal_bytes / count, commits / count
        else:
            wal = math.nan
    return {
        "statuses": dict(statuses),
        "payments_per_second": count / elapsed,
        "wal_bytes_per_payment": wal,
        "server_wal_bytes_per_payment": server_wal,
        "commits_per_payment": (db1["commits"] - db0["commits"]) / count,
        "writing_commits_per_payment": flushes,
        "redis_calls_per_payment": calls,
        "redis_round_trips_per_payment": sum(calls.values()),
        "celery_messages_per_payment": (redis1["queued_messages"] - redis0["queued_messages"])
        / count,
        "cpu_ms_per_payment": {
            "gunicorn workers": 1000 * workers / count,
            "postgres backends": 1000 * cpu.get("postgres", 0.0) / count,
            "sandbox": 1000 * cpu.get("sandbox", 0.0) / count,
        },
        "redis_keys": redis1["keys"],
        "redis_used_memory": redis1["used_memory"],
    }


def per_payment_writes(before: dict, after: dict, payments: int) -> dict[str, dict[str, float]]:
    """Rows and index entries written per payment, per table, between two :func:`table_counters`."""
    result = {}
    for table in TABLES:
        b, a = before[table], after[table]
        ins, upd = a["inserted"] - b["inserted"], a["updated"] - b["updated"]
        hot, dele = a["hot_updated"] - b["hot_updated"], a["deleted"] - b["deleted"]
        result[table] = {
            "inserted": ins / payments,
            "updated": upd / payments,
            "hot_updated": hot / payments,
            "deleted": dele / payments,
            "index_entries": (ins + upd - hot) * a["indexes"] / payments,
            "bytes_kept": (a["bytes"] - b["bytes"]) / payments,
            "bytes_per_row": a["bytes"] / a["rows"] if a["rows"] else 0.0,
        }
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=600, help="payments per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="client threads")
    parser.add_argument("--database", default=None, help="default: BENCH_DATABASE")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tests.support.private_redis import PrivateRedis

    stamp, commit = timestamp(), commit_measured()
    print(f"capacity benchmark at commit {commit}")
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    empty_tables(db)
    api_key = issue_api_key(db)
    with (
        tempfile.TemporaryDirectory(prefix="capacity-redis-") as directory,
        PrivateRedis(Path(directory)) as redis_server,
    ):
        env = {
            "ACQUIRER_STATE_REDIS_URL": redis_server.url,
            "CELERY_BROKER_URL": redis_server.broker_url,
            **UNREFUSING_LIMITS,
        }
        with service_stack(db, "capacity", **env) as (sandbox, server):
            from bench.common import SANDBOX_API_KEY, django_env

            add_webhook_endpoint(server.url, api_key)  # before the SQL is captured
            request_sql = capture_request_sql(
                django_env(
                    db, ACQUIRER_BASE_URL=sandbox.url, ACQUIRER_API_KEY=SANDBOX_API_KEY, **env
                ),
                api_key,
            )["sql"]
            send_payments(f"{server.url}/payments", api_key, f"warm-{stamp}", 50, 4)
            trips = redis_round_trips(
                redis_server, f"{server.url}/payments", api_key, f"mon-{stamp}", 20
            )
            # 11 s: idle backends flush their statistics within 10 s (PostgreSQL 15 and later).
            idle = idle_wal_rate(db, 11.0)
            own = {server.process.pid: "gunicorn master", sandbox.process.pid: "sandbox"}
            own.update({pid: f"gunicorn worker {i}" for i, pid in enumerate(server.worker_pids())})
            ctx = {
                "db": db,
                "redis": redis_server.client(),
                "server": server,
                "api_key": api_key,
                "watch": CpuWatch(own, db.name),
                "payments": args.payments,
                "concurrency": args.concurrency,
                "stamp": stamp,
                "waldump": pg_waldump_binary(db),
                "oid": database_oid(db),
            }
            tables_before = table_counters(db)
            payments_before = tables_before["payments_payment"]["rows"]
            rounds = [measure_round(ctx, n) for n in range(args.rounds)]
        time.sleep(1.0)  # the backends exited with the stack: their statistics are flushed
        tables_after = table_counters(db)
    payments = tables_after["payments_payment"]["rows"] - payments_before
    writes = per_payment_writes(tables_before, tables_after, payments)
    report(request_sql, rounds, writes, idle, trips)
    path = write_results(
        "capacity",
        {
            "commit": commit,
            "machine": machine_context(),
            "args": vars(args),
            "request_sql": request_sql,
            "idle_wal_bytes_per_second": idle,
            "rounds": rounds,
            "redis_round_trips_per_payment": trips,
            "writes_per_payment": writes,
        },
    )
    print(f"\nresults: {path.relative_to(ROOT)} (commit {commit})")
    return 0


def report(
    request_sql: list[str], rounds: list[dict], writes: dict, idle: float, trips: dict
) -> None:
    shapes = captured_shapes(request_sql)
    print(
        f"\nSQL statements of one fresh payment: {len(request_sql)} ({len(shapes)} without "
        f"the health check)"
    )
    for shape, count in Counter(shapes).items():
        print(f"  {count} x {shape}")
    print()
    rows = [
        [
            "payments/s (this machine, with the client)",
            *(f"{r['payments_per_second']:.1f}" for r in rounds),
        ],
        [
            "WAL bytes (this database, pg_waldump)",
            *(f"{r['wal_bytes_per_payment']:.0f}" for r in rounds),
        ],
        [
            "WAL bytes (server, LSN delta)",
            *(f"{r['server_wal_bytes_per_payment']:.0f}" for r in rounds),
        ],
        ["transactions committed", *(f"{r['commits_per_payment']:.2f}" for r in rounds)],
        [
            "of which wrote WAL (a WAL flush each)",
            *(f"{r['writing_commits_per_payment']:.2f}" for r in rounds),
        ],
        [
            "Redis commands (scripts' included)",
            *(f"{r['redis_round_trips_per_payment']:.2f}" for r in rounds),
        ],
        ["Celery messages", *(f"{r['celery_messages_per_payment']:.2f}" for r in rounds)],
        [
            "CPU ms gunicorn workers",
            *(f"{r['cpu_ms_per_payment']['gunicorn workers']:.2f}" for r in rounds),
        ],
        [
            "CPU ms postgres backends",
            *(f"{r['cpu_ms_per_payment']['postgres backends']:.2f}" for r in rounds),
        ],
        ["answers", *(str(r["statuses"]) for r in rounds)],
    ]
    print_table(["per payment", *(f"round {i + 1}" for i in range(len(rounds)))], rows)
    read = [
        r["wal_bytes_per_payment"] for r in rounds if not math.isnan(r["wal_bytes_per_payment"])
    ]
    print(
        f"\nWAL of this database: median {median(read) if read else math.nan:.0f}"
        f" bytes per payment ({len(read)} of {len(rounds)} rounds read); the whole server"
        f" wrote {idle:.0f} bytes/s while this benchmark was idle"
    )
    print(
        f"Redis round trips per payment (MONITOR, one at a time): {sum(trips.values()):.2f}: "
        + ", ".join(f"{k} {v:.2f}" for k, v in trips.items())
    )
    commands = Counter()
    for r in rounds:
        commands.update(r["redis_calls_per_payment"])
    print(
        "Redis commands per payment, scripts' included (median of rounds): "
        + ", ".join(
            f"{k} {median(r['redis_calls_per_payment'].get(k, 0) for r in rounds):.2f}"
            for k, _ in commands.most_common()
        )
    )
    print(
        f"Redis holds {rounds[-1]['redis_keys']} keys, {rounds[-1]['redis_used_memory']} bytes "
        "(the broker's undelivered messages included)"
    )
    print()
    print_table(
        [
            "table",
            "inserted",
            "updated (HOT)",
            "deleted",
            "index entries",
            "bytes/row",
            "bytes kept/payment",
        ],
        [
            [
                t,
                f"{w['inserted']:.2f}",
                f"{w['updated']:.2f} ({w['hot_updated']:.2f})",
                f"{w['deleted']:.2f}",
                f"{w['index_entries']:.2f}",
                f"{w['bytes_per_row']:.0f}",
                f"{w['bytes_kept']:.0f}",
            ]
            for t, w in writes.items()
        ],
    )
    total = {
        k: sum(w[k] for w in writes.values())
        for k in ("inserted", "updated", "index_entries", "bytes_kept")
    }
    print(
        f"total per payment: {total['inserted']:.2f} rows inserted, {total['updated']:.2f} "
        f"updated, {total['index_entries']:.2f} index entries, {total['bytes_kept']:.0f} bytes "
        "kept"
    )


if __name__ == "__main__":
    sys.exit(main())
