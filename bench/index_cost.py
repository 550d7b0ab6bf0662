"""Benchmark: what the indexes of the tables one payment writes cost PostgreSQL (ADR 0030).

Two commands (see docs/benchmarks.md)::

    .venv/bin/python bench/index_cost.py                 # writes: CPU, WAL, index entries
    .venv/bin/python bench/index_cost.py plans --sql bench/results/sql-capture.jsonl \\
        --old payments_admin_bench_old --new payments_admin_bench

**writes** (the default): migrates ``<BENCH_DATABASE>_idx`` (default ``payments_bench_idx``)
to the current index set, gives its merchant a webhook endpoint for every event type, captures
the SQL of one ``POST /payments`` with a new key (``bench/throughput.py``'s capture, checked
against :data:`~bench.throughput.EXPECTED_FRESH`) and turns it into a pgbench script, then
copies the database to ``<...>_idx_old`` and migrates the copy back to the index set before ADR
0030 (:data:`OLD_INDEX_SET`). Then it alternates the two (``--rounds`` rounds, the order
swapped every round) running the same script for ``--duration`` seconds with ``--clients``
pgbench clients, and reads around each run the CPU time of the database's backends
(``/proc``), its WAL (``pg_waldump`` over the run's LSN range, this database's records and
transactions only: ``bench/capacity.py``'s reading), the tables' and indexes' growth, and the
updates that were HOT. Index entries written per payment are counted exactly, not estimated:
the script runs once more in a transaction that is rolled back, and each index's predicate is
evaluated on the rows as phase 1 left them and as phase 2 left them (a partial index is written
only when its predicate holds; a HOT update writes no entry). It prints the medians and the
ratios new / old: the same machine, the same minutes, the same SQL.

**plans**: EXPLAINs every distinct statement captured from the tests (``bench/sql_capture.py``)
on two databases holding the same data under the two index sets (``bench/admin_scale.py``
fills one; copy it with ``CREATE DATABASE ... TEMPLATE`` and migrate the copy back), and prints
which statements read each index the new set lacks, what they read instead, and every
statement whose plan became more expensive or reads a table sequentially. Exit 1 if any did.
Results go to ``bench/results/index_cost-<timestamp>.json`` (not committed).
"""

# ruff: noqa: S603, S608 - benchmarks run their own commands and SQL on their own databases

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.capacity import pg_waldump_binary
from bench.common import (
    RESULTS,
    ROOT,
    SANDBOX_API_KEY,
    CpuWatch,
    Database,
    database_from_env,
    django_env,
    issue_api_key,
    machine_context,
    median,
    prepare_database,
    print_table,
    ratio,
    run_pgbench,
    start_sandbox,
    timestamp,
    write_results,
)
from bench.sql_capture import TABLES
from bench.throughput import EXPECTED_FRESH, capture_request_sql, captured_shapes, pgbench_script

#: The last migration of each app before ADR 0030's: ``migrate`` back to these gives the old
#: index set (every index the migrations after them dropped, rebuilt under its old name).
OLD_INDEX_SET = [
    ("payments", "0011_deferred"),
    ("idempotency", "0002_admin_indexes"),
    ("webhooks", "0002_console_roles"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="writes", choices=("writes", "plans"))
    parser.add_argument("--rounds", type=int, default=5, help="writes: old/new pairs")
    parser.add_argument("--duration", type=float, default=10, help="writes: seconds per run")
    parser.add_argument("--clients", type=int, default=8, help="writes: pgbench clients")
    parser.add_argument(
        "--synchronous-commit", default="on", choices=("on", "off"),
        help="writes: off takes the WAL flush wait out (CPU-bound runs, a steadier CPU ratio)",
    )  # fmt: skip
    parser.add_argument("--sql", help="plans: the JSON lines of bench/sql_capture.py")
    parser.add_argument("--old", help="plans: the database with the old index set")
    parser.add_argument("--new", help="plans: the same data with the current index set")
    parser.add_argument("--show", type=int, default=3, help="plans: statements shown per index")
    parser.add_argument("--add-endpoint", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.add_endpoint:
        _add_endpoint()
        return 0
    if args.command == "plans":
        if not (args.sql and args.old and args.new):
            raise SystemExit("plans needs --sql, --old and --new")
        return plans(args)
    return writes(args)


# -- writes: the same payment SQL under both index sets ---------------------------------------


def _add_endpoint() -> None:
    """(In a subprocess with the service's settings.) One webhook endpoint of the bench
    merchant for every event type, so a payment writes its outbox delivery row too."""
    import warnings

    import django

    warnings.filterwarnings("ignore")
    django.setup()
    from django.conf import settings
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]
    answer = Client().post(
        "/webhook_endpoints",
        json.dumps({"url": "http://127.0.0.1:9/webhooks", "enabled_events": ["*"]}),
        "application/json",
        HTTP_AUTHORIZATION=f"Bearer {os.environ['BENCH_API_KEY']}",
    )
    assert answer.status_code == 201, answer.content


def _psql(db: Database, sql: str, params: list[Any] | None = None) -> list[tuple]:
    import psycopg

    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        cursor = conn.execute(sql, params or [])
        return cursor.fetchall() if cursor.description else []


def build_databases(base: str) -> tuple[Database, Database, Path]:
    """The current index set's database, its copy with the old index set, and the pgbench
    script of one fresh payment (see the module's docstring)."""
    new = database_from_env(f"{base}_idx")
    old = database_from_env(f"{base}_idx_old")
    prepare_database(new)
    _psql(new, "TRUNCATE webhooks_event, webhooks_webhookendpoint CASCADE")
    api_key = issue_api_key(new)
    sandbox = start_sandbox()
    try:
        env = django_env(new, ACQUIRER_BASE_URL=sandbox.url, ACQUIRER_API_KEY=SANDBOX_API_KEY)
        subprocess.run(
            [sys.executable, __file__, "--add-endpoint"],
            env={**env, "BENCH_API_KEY": api_key},
            cwd=ROOT,
            check=True,
        )
        request = capture_request_sql(env, api_key)
    finally:
        sandbox.stop()
    shapes = captured_shapes(request["sql"])
    expected = [*EXPECTED_FRESH[:-1], "INSERT webhooks_delivery", EXPECTED_FRESH[-1]]
    if shapes != expected:  # the merchant's endpoint adds its delivery row
        raise SystemExit(f"the service's SQL changed: {shapes}, expected {expected}")
    script = pgbench_script(request["sql"], request["payment_id"], request["key"], None)
    if r"\gset" in script:
        raise SystemExit("the script reads a row id back (\\gset): not supported here")
    path = RESULTS / f"index_cost-payment-{timestamp()}.sql"
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    _psql(
        new,
        "TRUNCATE payments_paymentevent, payments_payment, idempotency_idempotencykey, "
        "webhooks_event CASCADE",
    )
    postgres = Database(new.host, new.port, new.user, new.password, "postgres")
    _psql(postgres, f'DROP DATABASE IF EXISTS "{old.name}" WITH (FORCE)')
    for attempt in range(10):  # an autovacuum worker in the source database refuses the copy
        try:
            _psql(postgres, f'CREATE DATABASE "{old.name}" TEMPLATE "{new.name}"')
            break
        except Exception:  # psycopg's ObjectInUse; the last attempt re-raises
            if attempt == 9:
                raise
            time.sleep(1)
    for app, migration in OLD_INDEX_SET:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", app, migration, "--verbosity", "0"],
            cwd=ROOT,
            env=django_env(old),
            check=True,
        )
    return new, old, path


def index_definitions(db: Database) -> dict[str, list[tuple[str, str]]]:
    """Per table of :data:`TABLES`: (index name, predicate SQL or ``true``) of its indexes."""
    rows = _psql(
        db,
        "SELECT c.relname, i.relname, COALESCE(pg_get_expr(x.indpred, x.indrelid), 'true') "
        "FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid "
        "JOIN pg_class i ON i.oid = x.indexrelid WHERE c.relname = ANY(%s) ORDER BY 1, 2",
        [list(TABLES)],
    )
    found: dict[str, list[tuple[str, str]]] = {table: [] for table in TABLES}
    for table, index, predicate in rows:
        found[table].append((index, predicate))
    return found


def _script_statements(script: str, k: int) -> list[str]:
    statements = []
    for line in script.splitlines():
        text = line.strip().rstrip(";")
        if not text or text.startswith("\\") or text.upper() in ("BEGIN", "COMMIT"):
            continue
        statements.append(text.replace(":client_id", "0").replace(":k", str(k)))
    return statements


#: The rows of the payment ``%(p)s`` (with key ``%(key)s``) in each table.
_ROWS_OF_PAYMENT = {
    "payments_payment": "id = %(p)s",
    "payments_paymentevent": "payment_id = %(p)s",
    "idempotency_idempotencykey": "key = %(key)s",
    "webhooks_event": "object_id = %(p)s",
    "webhooks_delivery": "event_id IN (SELECT id FROM webhooks_event WHERE object_id = %(p)s)",
}
#: The tables a payment UPDATEs in phase 2 (each row once): their final rows are new versions.
_UPDATED = ("payments_payment", "idempotency_idempotencykey")


def index_entries(db: Database, script: str) -> dict[str, dict[str, float]]:
    """Per table: the index entries one payment's INSERTs write, and those its phase-2 UPDATE
    writes if it is not HOT (see the module's docstring), from the script run once in a
    transaction that is rolled back."""
    import psycopg

    definitions = index_definitions(db)
    k = random.randrange(1, 10**18)
    rows = {"p": f"pay_0-{k}", "key": f"pgbench-0-{k}"}
    statements = _script_statements(script, k)

    def count(conn: Any) -> dict[str, int]:
        found = {}
        for table, indexes in definitions.items():
            where = _ROWS_OF_PAYMENT[table]
            found[table] = sum(
                conn.execute(
                    f"SELECT count(*) FROM {table} WHERE {where} AND ({pred})", rows
                ).fetchone()[0]
                for _, pred in indexes
            )
        return found

    with psycopg.connect(db.conninfo()) as conn:
        conn.execute(statements[0])  # phase 1: the key, the payment, its first event
        phase1 = count(conn)
        for sql in statements[1:]:
            conn.execute(sql)
        final = count(conn)
        conn.rollback()
    result = {}
    for table in TABLES:
        if table in _UPDATED:
            result[table] = {"insert": phase1[table], "update": final[table]}
        else:
            result[table] = {"insert": final[table], "update": 0}
    return result


def table_state(db: Database) -> dict[str, dict[str, int]]:
    """Per table of :data:`TABLES`: updates, HOT updates, heap and index bytes."""
    rows = _psql(
        db,
        "SELECT relname, n_tup_upd, n_tup_hot_upd, pg_table_size(relid), pg_indexes_size(relid)"
        " FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        [list(TABLES)],
    )
    return {
        name: {"updated": upd, "hot": hot, "heap_bytes": heap, "index_bytes": idx}
        for name, upd, hot, heap, idx in rows
    }


_WAL_LINE = re.compile(r"len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+),")


def wal_of_run(db: Database, waldump: tuple[str, Path], start: str, end: str) -> dict[str, int]:
    """WAL bytes between LSNs ``start`` and ``end`` of database ``db``'s records and of the
    transactions that wrote them (``bench/capacity.py``'s rule): ``total`` (full-page images
    included) and ``records`` (without them: what the changes themselves log)."""
    oid = int(_psql(db, "SELECT oid FROM pg_database WHERE datname = %s", [db.name])[0][0])
    binary, wal_dir = waldump
    dump = subprocess.run(
        [binary, "-p", str(wal_dir), "-s", start, "-e", end],
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    marker, lines, ours = f"/{oid}/", [], set()
    for line in dump.splitlines():
        match = _WAL_LINE.search(line)
        if match:
            mine = marker in line
            lines.append((int(match.group(1)), int(match.group(2)), match.group(3), mine))
            if mine and match.group(3) != "0":
                ours.add(match.group(3))
    kept = [(rec, tot) for rec, tot, tx, mine in lines if mine or tx in ours]
    return {"records": sum(rec for rec, _ in kept), "total": sum(tot for _, tot in kept)}


def _lsn(db: Database) -> str:
    return str(_psql(db, "SELECT pg_current_wal_lsn()")[0][0])


def measure_run(db: Database, script: Path, args: argparse.Namespace, waldump) -> dict[str, Any]:
    """One pgbench run of ``script`` on ``db``: per payment, the backends' CPU ms, WAL bytes,
    heap and index bytes grown, and the share of phase-2 updates that were HOT."""
    before, start = table_state(db), _lsn(db)
    result = run_pgbench(
        db, script, clients=args.clients, threads=2, duration=args.duration,
        watch=CpuWatch({}, db.name),
    )  # fmt: skip
    end, after = _lsn(db), table_state(db)
    payments = max(1, result.transactions)
    cpu = result.cpu or {}
    in_window = max(1e-9, result.tps * cpu.get("seconds", 0.0))
    wal = wal_of_run(db, waldump, start, end) if waldump else {"records": -1, "total": -1}
    updated = sum(after[t]["updated"] - before[t]["updated"] for t in _UPDATED)
    hot = sum(after[t]["hot"] - before[t]["hot"] for t in _UPDATED)
    grown = {
        kind: sum(after[t][kind] - before[t][kind] for t in TABLES) / payments
        for kind in ("heap_bytes", "index_bytes")
    }
    return {
        "tps": result.tps,
        "payments": result.transactions,
        "failed": result.failed,
        "pg_cpu_ms": 1000 * cpu.get("postgres", 0.0) / in_window,
        "pg_shared_cpu_ms": 1000 * cpu.get("postgres (shared processes)", 0.0) / in_window,
        "wal_bytes": wal["total"] / payments,
        "wal_record_bytes": wal["records"] / payments,
        "hot_share": ratio(hot, updated),
        **grown,
    }


def writes(args: argparse.Namespace) -> int:
    """The ``writes`` command (the module's docstring)."""
    base = os.environ.get("BENCH_DATABASE", "payments_bench")
    # pgbench's sessions (run_pgbench passes this process's environment on).
    os.environ["PGOPTIONS"] = f"-c synchronous_commit={args.synchronous_commit}"
    new, old, script_path = build_databases(base)
    script = script_path.read_text()
    waldump = pg_waldump_binary(new)
    if waldump is None:
        print("pg_waldump or pg_wal not readable here: WAL not measured")
    sides = {"old": old, "new": new}
    counts = {side: index_definitions(db) for side, db in sides.items()}
    entries = {side: index_entries(db, script) for side, db in sides.items()}
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for db in sides.values():  # warm-up: caches, and tables that are not empty
        measure_run(db, script_path, argparse.Namespace(**{**vars(args), "duration": 3}), None)
    for n in range(args.rounds):
        for side in ("old", "new") if n % 2 == 0 else ("new", "old"):
            runs[side].append(measure_run(sides[side], script_path, args, waldump))
            r = runs[side][-1]
            print(f"round {n + 1} {side}: {r['tps']:.0f} payments/s, PostgreSQL "
                  f"{r['pg_cpu_ms']:.2f} ms CPU, WAL {r['wal_bytes']:.0f} B, "
                  f"HOT {r['hot_share']:.2f}", flush=True)  # fmt: skip
    hot = {side: median(r["hot_share"] for r in runs[side]) for side in sides}
    written = {
        side: sum(e["insert"] + e["update"] * (1 - hot[side]) for e in entries[side].values())
        for side in sides
    }
    rows = []
    for table in TABLES:
        o, n = entries["old"][table], entries["new"][table]
        rows.append((
            f"indexes / entries per payment: {table}",
            f"{len(counts['old'][table])} / {o['insert'] + o['update'] * (1 - hot['old']):.0f}",
            f"{len(counts['new'][table])} / {n['insert'] + n['update'] * (1 - hot['new']):.0f}",
            "",
        ))  # fmt: skip
    rows.append(("index entries written per payment", written["old"], written["new"],
                 ratio(written["new"], written["old"])))  # fmt: skip
    for key, label in (
        ("pg_cpu_ms", "PostgreSQL backend CPU ms per payment"),
        ("pg_shared_cpu_ms", "  WAL writer, checkpointer, ... (shared with others) ms"),
        ("wal_bytes", "WAL bytes per payment (full-page images included)"),
        ("wal_record_bytes", "WAL bytes per payment without full-page images"),
        ("index_bytes", "index bytes grown per payment"),
        ("heap_bytes", "heap bytes grown per payment"),
        ("tps", "payments per second (pgbench)"),
        ("hot_share", "phase-2 updates that were HOT"),
    ):
        a = median(r[key] for r in runs["old"])
        b = median(r[key] for r in runs["new"])
        rows.append((label, a, b, ratio(b, a)))
    pairs = [
        ratio(b["pg_cpu_ms"], a["pg_cpu_ms"]) for a, b in zip(runs["old"], runs["new"], strict=True)
    ]
    rows.append(("CPU ratio new / old, median of the rounds' pairs", "", "", median(pairs)))
    print()
    print(f"{args.rounds} rounds of {args.duration:g} s, {args.clients} pgbench clients, "
          f"synchronous_commit {args.synchronous_commit}, "
          f"the SQL of one POST /payments ({script_path.relative_to(ROOT)})")  # fmt: skip
    print_table(["per payment", "old index set", "new index set", "new / old"], rows)
    path = write_results("index_cost", {
        "machine": machine_context(), "settings": vars(args), "script": str(script_path),
        "indexes": counts, "entries": entries, "runs": runs,
    })  # fmt: skip
    print(f"\nresults: {path}")
    return 0


# -- plans: every captured query under both index sets ----------------------------------------

_LITERAL = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")


def statement_shape_of(sql: str) -> str:
    """``sql`` with its literals replaced by ``?`` (so one test's ids and another's compare)."""
    return " ".join(_LITERAL.sub("?", sql).split())


def plan_summary(plan: dict) -> dict[str, Any]:
    """From EXPLAIN (FORMAT JSON)'s plan: its total cost, the indexes it reads, and the tables
    of :data:`TABLES` it reads by a sequential scan."""
    indexes: set[str] = set()
    seq: set[str] = set()

    def walk(node: dict) -> None:
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in TABLES:
            seq.add(node["Relation Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return {"cost": plan["Plan"]["Total Cost"], "indexes": sorted(indexes), "seq": sorted(seq)}


def explain_all(conninfo: str, statements: list[str]) -> list[dict[str, Any] | None]:
    """EXPLAIN (not ANALYZE: nothing runs) each statement, in a transaction rolled back; None
    for a statement the database refuses (one that names a row or table of the test's own)."""
    import psycopg

    found: list[dict[str, Any] | None] = []
    with psycopg.connect(conninfo) as conn:
        for sql in statements:
            try:
                with conn.transaction():
                    (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + sql).fetchone()[0]
                    found.append(plan_summary(plan))
                    raise psycopg.Rollback()
            except psycopg.Error:
                found.append(None)
    return found


def plans(args: argparse.Namespace) -> int:
    """Compare the plan of every distinct captured statement in ``--old`` and ``--new`` (the same
    data under the two index sets); print, for every index, the statements that use it, and
    every statement whose plan got more expensive or reads one of :data:`TABLES`
    sequentially where it did not. Exit 1 on any such statement."""
    lines = [json.loads(line) for line in Path(args.sql).read_text().splitlines() if line]
    by_shape: dict[str, tuple[str, str]] = {}
    for line in lines:
        sql = " ".join(line["sql"].split())
        head = sql.split(" ", 1)[0].upper()
        if head not in ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH"):
            continue
        by_shape.setdefault(statement_shape_of(sql), (sql, line["test"]))
    shapes = list(by_shape)
    statements = [by_shape[s][0] for s in shapes]
    old_db, new_db = database_from_env(args.old), database_from_env(args.new)
    old = explain_all(old_db.conninfo(), statements)
    new = explain_all(new_db.conninfo(), statements)
    uses: dict[str, list[int]] = {}
    worse = []
    for n, (a, b) in enumerate(zip(old, new, strict=True)):
        if a is None or b is None:
            continue
        for index in a["indexes"]:
            uses.setdefault(index, []).append(n)
        if b["cost"] > a["cost"] * 1.2 + 1 or set(b["seq"]) - set(a["seq"]):
            worse.append(n)
    explained = sum(1 for a, b in zip(old, new, strict=True) if a and b)
    print(f"{len(lines)} captured statements, {len(shapes)} distinct, {explained} explained "
          f"on both (200k-row data: {args.old} / {args.new})\n")  # fmt: skip
    dropped = sorted(set(index_names(old_db)) - set(index_names(new_db)))
    print("indexes of the old set that the new one lacks, and the statements that read them:")
    for index in dropped:
        print(f"  {index}: {len(uses.get(index, []))} statements")
        for n in uses.get(index, [])[: args.show]:
            print(f"      old {old[n]['cost']:>10.1f} {','.join(old[n]['indexes'])}")
            print(f"      new {new[n]['cost']:>10.1f} {','.join(new[n]['indexes'])}")
            print(f"      {statements[n][:300]}")
    print("\nstatements per index (old set):")
    for index, found in sorted(uses.items(), key=lambda item: -len(item[1])):
        print(f"  {len(found):>4}  {index}")
    print(f"\nstatements whose plan costs more (> 1.2x + 1) or scans sequentially: {len(worse)}")
    for n in worse:
        print(
            f"  old {old[n]}\n  new {new[n]}\n  {by_shape[shapes[n]][1]}\n  {statements[n][:400]}"
        )
    return 1 if worse else 0


def index_names(db: Database) -> list[str]:
    """The names of the indexes of :data:`TABLES` in ``db``."""
    import psycopg

    with psycopg.connect(db.conninfo()) as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = ANY(%s)", [list(TABLES)]
        ).fetchall()
    return sorted(name for (name,) in rows)


if __name__ == "__main__":
    sys.exit(main())
