"""Benchmark: retention of idempotency keys by DELETE (today's purge) or by dropping a day's
partition, on tables of 1M and 10M generated keys (docs/scaling.md, "Retention").

One command::

    .venv/bin/python bench/purge_cost.py                      # 1M and 10M keys, 10 days
    .venv/bin/python bench/purge_cost.py --rows 200000 --days 4

For each ``--rows`` size, in a database of its own (``<BENCH_DATABASE>_purge``, migrated, so the
key table has the service's columns, constraints and indexes), it fills
``idempotency_idempotencykey`` with ``INSERT ... SELECT generate_series`` (keys spread evenly
over ``--days`` days of ``expires_at``, realistic sizes: a 64-character fingerprint, a stored
201 answer of about 450 bytes), then measures, in the same run:

* **DELETE**: the service's own purge, ``idempotency.services.idempotency_keys_purge_expired``
  with the beat task's ``keep`` (keys of unresolved payments are kept) and batch size, deleting
  the oldest day (``rows / days`` keys); then the ``VACUUM`` that makes the space reusable. Time
  and WAL bytes of each.
* **DROP**: the oldest two days' rows copied into a table partitioned by day on
  ``expires_at`` (``PARTITION BY RANGE``, the same indexes per partition, the unique key
  widened by ``expires_at`` as PostgreSQL requires; the other days' partitions are empty, which
  does not change what a drop costs); ``ALTER TABLE ... DETACH PARTITION`` then ``DROP TABLE``
  of the oldest day (the keys the DELETE purges). Time and WAL bytes.

It prints both and their ratio per size. WAL is the server's LSN delta (run it on a quiet
server for clean WAL figures; the times are this run's own). The generated keys have no
payments, so the purge's ``SET NULL`` of ``payments_payment.idempotency_key_id`` (one more row
update per key in production) is not in the DELETE figure: it is a lower bound.
"""

# ruff: noqa: S608 - SQL text built from constants and integers

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    DEFAULT_DATABASE,
    ROOT,
    Database,
    database_from_env,
    django_env,
    print_table,
    ratio,
    write_results,
)

TABLE = "idempotency_idempotencykey"
COPY = "purge_bench_keys_by_day"
#: About the stored answer of a 201 (bench/capacity.py measures the real one).
ANSWER_BYTES = 450


def wal_position(conn) -> int:
    return int(
        conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()[0]
    )


def recreate(db: Database) -> None:
    """Drop and create ``db``, then migrate it (the service's tables and indexes)."""
    import psycopg

    with psycopg.connect(db.conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db.name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env=django_env(db),
        check=True,
    )


def fill(conn, rows: int, days: int) -> float:
    """Insert ``rows`` keys of one merchant, ``expires_at`` spread over ``days`` days ending
    tomorrow (the oldest day expired); return the seconds it took."""
    started = time.monotonic()
    # Faster than maintaining six indexes row by row: drop them, insert, build them again.
    definitions = conn.execute(
        "SELECT c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c"
        " WHERE c.conrelid = %s::regclass AND c.contype = 'u'",
        [TABLE],
    ).fetchall()
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN"
        " (SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
        [TABLE, TABLE],
    ).fetchall()
    for name, _ in definitions:
        conn.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT {name}")
    for name, _ in indexes:
        conn.execute(f"DROP INDEX {name}")
    conn.execute("INSERT INTO merchants_merchant (name, created_at) VALUES ('purge', now())")
    merchant = conn.execute("SELECT id FROM merchants_merchant WHERE name = 'purge'").fetchone()[0]
    span = days * 86400
    conn.execute(
        f"""
        INSERT INTO {TABLE} (key, method, route, request_fingerprint, status, locked_at,
            response_status, response_headers, response_body, created_at, completed_at,
            expires_at, merchant_id)
        SELECT 'order-' || n || '-' || md5(n::text), 'POST', '/payments', md5(n::text) ||
            md5((n + 1)::text), 'completed', NULL, 201,
            '{{"Content-Type": "application/json", "Location": "/payments/pay_x"}}'::jsonb,
            convert_to(repeat('x', {ANSWER_BYTES}), 'UTF8'),
            t - interval '1 day', t - interval '1 day', t, %s
        FROM generate_series(1, %s) AS n,
             LATERAL (SELECT now() - interval '{days - 1} days'
                      + (n::float8 / %s * {span}) * interval '1 second' AS t) AS at
        """,
        [merchant, rows, rows],
    )
    conn.execute("SET maintenance_work_mem = '256MB'")
    for _, definition in indexes:
        conn.execute(definition)
    for name, definition in definitions:
        conn.execute(f"ALTER TABLE {TABLE} ADD CONSTRAINT {name} {definition}")
    conn.execute(f"VACUUM ANALYZE {TABLE}")
    return time.monotonic() - started


def expired_boundary(conn, days: int):
    """The ``expires_at`` below which the oldest day's keys lie."""
    return conn.execute(f"SELECT min(expires_at) + interval '1 day' FROM {TABLE}").fetchone()[0]


def measure_delete(db: Database, boundary) -> dict[str, float]:
    """The service's purge of every key expiring before ``boundary``, in a subprocess with the
    service's settings (its batch size, the beat task's ``keep``); then VACUUM."""
    import psycopg

    code = (
        "import django, sys, time; django.setup()\n"
        "from datetime import datetime\n"
        "from django.conf import settings\n"
        "from idempotency.services import idempotency_keys_purge_expired\n"
        "from payments.reconciliation.tasks import UNRESOLVED_PAYMENT\n"
        "now = datetime.fromisoformat(sys.argv[1]); t = time.monotonic()\n"
        "n = idempotency_keys_purge_expired(now=now, batch_size=settings."
        "IDEMPOTENCY_KEY_PURGE_BATCH_SIZE, keep=UNRESOLVED_PAYMENT)\n"
        "print(n, time.monotonic() - t)\n"
    )
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        wal0 = wal_position(conn)
        done = subprocess.run(  # noqa: S603 - this interpreter, the project's own code
            [sys.executable, "-c", code, boundary.isoformat()],
            cwd=ROOT,
            env=django_env(db, DATABASE_STATEMENT_TIMEOUT_MS="0"),
            check=True,
            capture_output=True,
            text=True,
        )
        deleted, seconds = done.stdout.split()[-2:]
        wal1 = wal_position(conn)
        started = time.monotonic()
        conn.execute(f"VACUUM {TABLE}")
        vacuum = time.monotonic() - started
        wal2 = wal_position(conn)
    return {
        "deleted": int(deleted),
        "delete_seconds": float(seconds),
        "delete_wal_bytes": wal1 - wal0,
        "vacuum_seconds": vacuum,
        "vacuum_wal_bytes": wal2 - wal1,
    }


def build_partitioned(conn, days: int) -> list[str]:
    """A copy of the key table partitioned by day of ``expires_at`` (days counted from the
    oldest key), with the same indexes and the oldest two days' rows; returns the partition
    names, oldest first."""
    conn.execute(f"DROP TABLE IF EXISTS {COPY}")
    conn.execute(
        f"CREATE TABLE {COPY} (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        " PARTITION BY RANGE (expires_at)"
    )
    low = conn.execute(f"SELECT min(expires_at) FROM {TABLE}").fetchone()[0]
    names = []
    for day in range(days + 1):
        name = f"{COPY}_d{day}"
        conn.execute(
            f"CREATE TABLE {name} PARTITION OF {COPY} FOR VALUES FROM"
            f" ('{low.isoformat()}'::timestamptz + interval '{day} days') TO"
            f" ('{low.isoformat()}'::timestamptz + interval '{day + 1} days')"
        )
        names.append(name)
    # Dropping a partition costs the same whatever the others hold: copy the oldest two days.
    conn.execute(
        f"INSERT INTO {COPY} SELECT * FROM {TABLE}"
        f" WHERE expires_at < '{low.isoformat()}'::timestamptz + interval '2 days'"
    )
    for index in (
        "PRIMARY KEY (id, expires_at)",
        "UNIQUE (merchant_id, key, expires_at)",
    ):
        conn.execute(f"ALTER TABLE {COPY} ADD {index}")
    for columns in ("expires_at", "merchant_id", "key", "status, expires_at DESC"):
        conn.execute(f"CREATE INDEX ON {COPY} ({columns})")
    conn.execute(f"VACUUM ANALYZE {COPY}")
    return names


def measure_drop(conn, partition: str) -> dict[str, float]:
    rows = conn.execute(f"SELECT count(*) FROM {partition}").fetchone()[0]
    wal0, started = wal_position(conn), time.monotonic()
    conn.execute(f"ALTER TABLE {COPY} DETACH PARTITION {partition}")
    conn.execute(f"DROP TABLE {partition}")
    seconds = time.monotonic() - started
    return {
        "dropped": int(rows),
        "drop_seconds": seconds,
        "drop_wal_bytes": wal_position(conn) - wal0,
    }


def run_size(db: Database, rows: int, days: int) -> dict[str, float]:
    import psycopg

    recreate(db)
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute("SET statement_timeout = 0")
        fill_seconds = fill(conn, rows, days)
        size = conn.execute(f"SELECT pg_total_relation_size('{TABLE}')").fetchone()[0]
        boundary = expired_boundary(conn, days)
        partitions = build_partitioned(conn, days)
        dropped = measure_drop(conn, partitions[0])  # the keys the DELETE purges
    deleted = measure_delete(db, boundary)
    result = {
        "rows": rows,
        "days": days,
        "fill_seconds": fill_seconds,
        "table_bytes": size,
        **deleted,
        **dropped,
    }
    print(
        f"{rows:,} keys ({size / 2**20:.0f} MiB, filled in {fill_seconds:.0f} s): DELETE of "
        f"{deleted['deleted']:,} in {deleted['delete_seconds']:.1f} s + VACUUM "
        f"{deleted['vacuum_seconds']:.1f} s; DROP of {dropped['dropped']:,} in "
        f"{dropped['drop_seconds'] * 1000:.1f} ms",
        flush=True,
    )
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--days", type=int, default=10, help="days of keys in the table")
    parser.add_argument("--keep-db", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import psycopg

    args = parse_args(argv)
    db = database_from_env(os.environ.get("BENCH_PURGE_DATABASE", f"{DEFAULT_DATABASE}_purge"))
    results = [run_size(db, int(n), args.days) for n in args.rows.split(",")]
    if not args.keep_db:
        with psycopg.connect(db.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
    print()
    print_table(
        [
            "keys in table",
            "keys purged",
            "DELETE s",
            "VACUUM s",
            "DELETE+VACUUM WAL MiB",
            "DROP ms",
            "DROP WAL KiB",
            "DELETE+VACUUM / DROP (time)",
        ],
        [
            [
                f"{r['rows']:,}",
                f"{r['deleted']:,}",
                f"{r['delete_seconds']:.1f}",
                f"{r['vacuum_seconds']:.1f}",
                f"{(r['delete_wal_bytes'] + r['vacuum_wal_bytes']) / 2**20:.0f}",
                f"{r['drop_seconds'] * 1000:.1f}",
                f"{r['drop_wal_bytes'] / 1024:.0f}",
                f"{ratio(r['delete_seconds'] + r['vacuum_seconds'], r['drop_seconds']):,.0f}",
            ]
            for r in results
        ],
    )
    path = write_results("purge_cost", {"days": args.days, "results": results})
    print(f"\nresults: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
