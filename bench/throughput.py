"""Benchmark: POST /payments throughput with new keys, against the floor of its own SQL.

One command (docs/benchmarks.md, "Throughput against the floor")::

    .venv/bin/python bench/throughput.py                # 3 rounds of 15 s each side, profile
    .venv/bin/python bench/throughput.py --duration 5 --rounds 1 --profile-seconds 0

It starts the sandbox acquirer (answering at once) and gunicorn exactly as the Procfile does
(``config/gunicorn.conf.py``: 2 workers x 4 threads), then alternates, ``--rounds`` times:

* **the service**: wrk (``bench/lua/payments.lua``) posts payments, each with a new
  Idempotency-Key, for ``--duration`` seconds; counted: 201 answers per second;
* **the floor**: pgbench runs the SQL of one such request, the same statements in the same
  two transactions (plus the authentication read and Django's connection health check),
  against the same PostgreSQL for the same time, with as many clients as the service has
  database connections (workers x threads); counted: scripts per second.

The ratio service/floor is reported per round and as the median. Before measuring, it runs one
real request through Django with the query log on and checks that the pgbench script has the
same statements (kind and table, in order) as the request: if the service's SQL changes, the
benchmark says so. Then, unless ``--profile-seconds 0``, it profiles the two workers with
py-spy under the same load (one with idle threads: wall time; one only while holding the GIL:
Python CPU) and prints where the time of a request goes, by layer (``bench/profile_stacks.py``).
Around every measurement it also reads each process's CPU time from ``/proc``, so the report
says how many CPU milliseconds one payment costs in gunicorn, PostgreSQL and the sandbox, next
to what one pgbench script costs PostgreSQL.
"""

# ruff: noqa: S603 - benchmarks run their own commands (wrk, pgbench, gunicorn, py-spy)
# ruff: noqa: S608 - the pgbench script is SQL text built from constants

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import profile_stacks
from bench.common import (
    PAYMENT_BODY,
    RESULTS,
    SANDBOX_API_KEY,
    CpuWatch,
    Gunicorn,
    database_from_env,
    django_env,
    issue_api_key,
    machine_context,
    median,
    merchant_id,
    prepare_database,
    print_table,
    ratio,
    run_pgbench,
    run_wrk,
    start_sandbox,
    timestamp,
    write_results,
    wrk_command,
)

# A stored answer and an attempt event of realistic size (what phase 2 writes).
_ANSWER = json.dumps(
    {
        "id": "pay_1c094558b2be670a790ae815", "object": "payment", "status": "succeeded",
        "amount": 1999, "currency": "EUR", "payment_method": "tok_visa", "reference": None,
        "description": None, "decline_code": None, "failure_code": None,
        "acquirer_reference": "ch_ZeSxCblyC4WcUwd5hc0tFUh6",
        "created_at": "2026-11-29T17:58:44.281941Z", "updated_at": "2026-11-29T17:58:44.288723Z",
    }
).encode()  # fmt: skip
_ATTEMPT = (
    '{"operation": "authorize", "outcome": "approved", "status_code": 201, '
    '"acquirer_reference": "ch_ZeSxCblyC4WcUwd5hc0tFUh6", "replayed": false, "attempts": 1, '
    '"elapsed_seconds": 0.002}'
)
_PAYMENT_COLUMNS = (
    '"payments_payment"."id", "payments_payment"."merchant_id", '
    '"payments_payment"."idempotency_key_id", "payments_payment"."amount", '
    '"payments_payment"."currency", "payments_payment"."payment_method", '
    '"payments_payment"."reference", "payments_payment"."description", '
    '"payments_payment"."status", "payments_payment"."capture_method", '
    '"payments_payment"."amount_captured", "payments_payment"."amount_refunded", '
    '"payments_payment"."decline_code", "payments_payment"."failure_code", '
    '"payments_payment"."acquirer_reference", '
    '"payments_payment"."acquirer_idempotency_key", "payments_payment"."created_at", '
    '"payments_payment"."updated_at", "payments_payment"."next_check_at", '
    '"payments_payment"."reconciliation_attempts", "payments_payment"."reconciliation_lease_until"'
)
_KEY_COLUMNS = ", ".join(
    f'"idempotency_idempotencykey"."{c}"'
    for c in (
        "id", "merchant_id", "key", "method", "route", "request_fingerprint", "status",
        "locked_at", "response_status", "response_headers", "response_body", "created_at",
        "completed_at", "expires_at",
    )
)  # fmt: skip


def pgbench_script(merchant: int, key_hash: str) -> str:
    """The SQL of one ``POST /payments`` with a new key, as Django sends it (pgbench syntax).

    Values the service computes in Python (ids, the fingerprint, the answer) are literals of
    the same size; ``:client_id`` and a random ``:k`` make every key and payment id unique.
    """
    pay = "pay_:client_id-:k"
    fingerprint = hashlib.sha256(b"bench").hexdigest()
    answer_hex = _ANSWER.hex()
    headers = '{"Content-Type": "application/json", "Location": "/payments/' + pay + '"}'
    lines = [
        r"\set k random(1, 9000000000000000000)",
        "-- Django's connection health check (CONN_HEALTH_CHECKS), once per request",
        "SELECT 1;",
        "-- authentication: the API key and its merchant",
        'SELECT "merchants_apikey"."id", "merchants_apikey"."merchant_id", '
        '"merchants_apikey"."prefix", "merchants_apikey"."key_hash", '
        '"merchants_apikey"."created_at", "merchants_apikey"."revoked_at", '
        '"merchants_merchant"."id", "merchants_merchant"."name", '
        '"merchants_merchant"."created_at" FROM "merchants_apikey" INNER JOIN '
        '"merchants_merchant" ON ("merchants_apikey"."merchant_id" = "merchants_merchant"."id") '
        f'WHERE ("merchants_apikey"."key_hash" = \'{key_hash}\' AND '
        '"merchants_apikey"."revoked_at" IS NULL) ORDER BY "merchants_apikey"."id" ASC LIMIT 1;',
        "-- phase 1: claim the key, create the payment processing",
        "BEGIN;",
        'INSERT INTO "idempotency_idempotencykey" ("merchant_id", "key", "method", "route", '
        '"request_fingerprint", "status", "locked_at", "response_status", "response_headers", '
        '"response_body", "created_at", "completed_at", "expires_at") VALUES '
        f"({merchant}, 'pgbench-:client_id-:k', 'POST', '/payments', '{fingerprint}', "
        "'in_progress', now(), NULL, '{}'::jsonb, NULL, now(), NULL, now() + interval '1 day') "
        r"ON CONFLICT (merchant_id, key) DO NOTHING RETURNING id AS kid \gset",
        f'SELECT {_PAYMENT_COLUMNS} FROM "payments_payment" WHERE '
        '"payments_payment"."idempotency_key_id" = :kid ORDER BY '
        '"payments_payment"."created_at" DESC, "payments_payment"."id" DESC LIMIT 1;',
        'INSERT INTO "payments_payment" ("id", "merchant_id", "idempotency_key_id", "amount", '
        '"currency", "payment_method", "reference", "description", "status", "capture_method", '
        '"amount_captured", "amount_refunded", "decline_code", "failure_code", '
        '"acquirer_reference", "acquirer_idempotency_key", "created_at", "updated_at", '
        '"next_check_at", "reconciliation_attempts", "reconciliation_lease_until") VALUES '
        f"('{pay}', {merchant}, :kid, 1999, 'EUR', 'tok_visa', NULL, NULL, 'processing', "
        f"'automatic', 0, 0, NULL, NULL, NULL, 'authorize-{pay}', now(), "
        "now(), now() + interval '60 seconds', 0, NULL);",
        'INSERT INTO "payments_paymentevent" ("payment_id", "type", "from_status", "to_status", '
        f"\"data\", \"created_at\") VALUES ('{pay}', 'payment_created', 'processing', "
        "'processing', '{}'::jsonb, now()) RETURNING \"payments_paymentevent\".\"id\";",
        "COMMIT;",
        "-- (the acquirer call happens here, outside any transaction)",
        "-- phase 2: record the outcome, store the answer, complete the key",
        "BEGIN;",
        f'SELECT {_PAYMENT_COLUMNS} FROM "payments_payment" WHERE '
        f'"payments_payment"."id" = \'{pay}\' LIMIT 21 FOR NO KEY UPDATE;',
        f'SELECT {_KEY_COLUMNS} FROM "idempotency_idempotencykey" WHERE '
        '"idempotency_idempotencykey"."id" = :kid LIMIT 21 FOR UPDATE;',
        'INSERT INTO "payments_paymentevent" ("payment_id", "type", "from_status", "to_status", '
        f"\"data\", \"created_at\") VALUES ('{pay}', 'acquirer_attempt', 'processing', "
        f"'processing', '{_ATTEMPT}'::jsonb, now()) RETURNING \"payments_paymentevent\".\"id\";",
        'UPDATE "payments_payment" SET "status" = \'succeeded\', "acquirer_reference" = '
        '\'ch_ZeSxCblyC4WcUwd5hc0tFUh6\', "amount_captured" = 1999, "updated_at" = now(), '
        f'"next_check_at" = NULL WHERE "payments_payment"."id" = \'{pay}\';',
        'INSERT INTO "payments_paymentevent" ("payment_id", "type", "from_status", "to_status", '
        f"\"data\", \"created_at\") VALUES ('{pay}', 'authorization_approved', 'processing', "
        "'succeeded', '{}'::jsonb, now()) RETURNING \"payments_paymentevent\".\"id\";",
        'UPDATE "idempotency_idempotencykey" SET "status" = \'completed\', "locked_at" = NULL, '
        f'"response_status" = 201, "response_headers" = \'{headers}\'::jsonb, '
        f'"response_body" = \'\\x{answer_hex}\'::bytea, "completed_at" = now() '
        'WHERE "idempotency_idempotencykey"."id" = :kid;',
        "COMMIT;",
    ]
    return "\n".join(lines) + "\n"


_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', re.IGNORECASE)


def statement_shape(sql: str) -> str | None:
    """``INSERT payments_payment``, ``SELECT payments_payment FOR NO KEY UPDATE``, ``BEGIN``,
    ...; None for what is not compared (comments, pgbench meta-commands, the health check)."""
    text = sql.strip().removesuffix(r"\gset").strip().rstrip(";").strip()
    if not text or text.startswith(("--", "\\")) or text.upper() == "SELECT 1":
        return None
    word = text.split(None, 1)[0].upper()
    if word in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"):
        return word
    match = _TABLE.search(text)
    shape = f"{word} {match.group(1) if match else '?'}"
    lock = re.search(r"\bFOR (NO KEY UPDATE|UPDATE|SHARE|KEY SHARE)\b", text, re.I)
    return shape + (f" FOR {lock.group(1).upper()}" if lock else "")


def script_shapes(script: str) -> list[str]:
    return [s for s in (statement_shape(line) for line in script.splitlines()) if s]


def captured_shapes(queries: list[str]) -> list[str]:
    return [s for s in (statement_shape(q) for q in queries) if s]


def capture_request_sql(env: dict[str, str], api_key: str) -> list[str]:
    """The SQL of one ``POST /payments`` with a new key, from Django's query log (in a
    subprocess with the service's settings, against the running sandbox)."""
    done = subprocess.run(
        [sys.executable, __file__, "--print-request-sql"],
        env={**env, "BENCH_API_KEY": api_key},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_request_sql() -> None:
    import warnings

    import django

    warnings.filterwarnings("ignore")
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    settings.ALLOWED_HOSTS = ["*"]
    client, key = Client(), os.environ["BENCH_API_KEY"]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    body = json.dumps(PAYMENT_BODY)
    stamp = timestamp()
    client.post("/payments", body, "application/json", HTTP_IDEMPOTENCY_KEY=f"w-{stamp}", **headers)
    with CaptureQueriesContext(connection) as queries:
        answer = client.post(
            "/payments", body, "application/json", HTTP_IDEMPOTENCY_KEY=f"c-{stamp}", **headers
        )
    assert answer.status_code == 201, answer.content
    print(json.dumps([q["sql"] for q in queries.captured_queries]))


def per_item_ms(cpu: dict[str, float], per_second: float) -> dict[str, float]:
    """CPU milliseconds per payment (or pgbench script) per process group, from CPU seconds
    over ``cpu["seconds"]`` at ``per_second`` payments per second; ``machine_busy_cores`` is
    passed through."""
    items = per_second * cpu["seconds"]
    result = {
        k: 1000 * v / items
        for k, v in cpu.items()
        if k not in ("machine_busy_cores", "seconds") and items
    }
    result["machine_busy_cores"] = cpu["machine_busy_cores"]
    return result


def own_cpu_ms(per_payment: dict[str, float], *, floor: bool) -> float:
    """CPU ms of one payment in the processes that do its work: PostgreSQL and, for the
    service, gunicorn; for the floor, pgbench (the SQL client). Not counted: wrk, the sandbox
    (the acquirer, elsewhere in production) and other tenants of the machine."""
    total = per_payment.get("postgres", 0.0) + per_payment.get("postgres (shared processes)", 0.0)
    if floor:
        return total + per_payment.get("load generator", 0.0)
    return total + sum(v for k, v in per_payment.items() if k.startswith("gunicorn"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=15, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="service/floor pairs")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of wrk before measuring")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument("--wrk-threads", type=int, default=2)
    parser.add_argument(
        "--pg-clients", type=int, default=None,
        help="pgbench clients (default: the service's connections, workers x threads)",
    )  # fmt: skip
    parser.add_argument("--profile-seconds", type=float, default=10, help="0: no profile")
    parser.add_argument("--database", default=None, help="benchmark database name")
    parser.add_argument(
        "--state-redis-url", default="",
        help="ACQUIRER_STATE_REDIS_URL for the service (default: in-memory, as make run)",
    )  # fmt: skip
    parser.add_argument("--print-request-sql", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def profile_workers(
    server: Gunicorn, url: str, api_key: str, seconds: float, stamp: str, connections: int
) -> dict[str, object]:
    """py-spy on every worker under wrk load, twice at once: with idle threads (wall time) and
    only while holding the GIL (Python CPU). The workers' stacks are summed (wrk's kept-alive
    connections may all land on one worker). Returns both summaries and the raw profiles."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.access(py_spy, os.X_OK):
        print("py-spy not installed: no profile (pip install py-spy)")
        return {}
    load = subprocess.Popen(
        wrk_command(url, api_key=api_key, prefix=f"prof-{stamp}", duration=seconds + 3,
                    connections=connections),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    time.sleep(1.0)
    spies: list[tuple[str, Path, subprocess.Popen]] = []
    for n, pid in enumerate(server.worker_pids()):
        for kind, extra in (("wall", "--idle"), ("gil", "--gil")):
            path = RESULTS / f"throughput-{kind}-worker{n + 1}-{stamp}.txt"
            command = [
                py_spy, "record", "--pid", str(pid), "--format", "raw", "--nolineno",
                "--nonblocking", "--rate", "100", "--duration", str(round(seconds)),
                "--output", str(path), extra,
            ]  # fmt: skip
            spy = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            spies.append((kind, path, spy))
    failed = False
    for _, _, spy in spies:
        _, err = spy.communicate()
        if spy.returncode != 0:
            print(f"py-spy failed: {err.strip()[-500:]}")
            failed = True
    load.communicate()
    if failed:
        return {}
    result: dict[str, object] = {}
    for kind in ("wall", "gil"):
        stacks: Counter = Counter()
        paths = [path for k, path, _ in spies if k == kind]
        for path in paths:
            stacks += profile_stacks.parse_collapsed(path.read_text().splitlines())
        summary = profile_stacks.summarize(stacks)
        result[kind] = {**summary, "raw_profiles": [str(p) for p in paths]}
        title = "wall time (waiting included)" if kind == "wall" else "holding the GIL (Python CPU)"
        print(profile_stacks.format_summary(f"\nworkers' profile, {title}", summary))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.print_request_sql:
        _print_request_sql()
        return 0
    stamp = timestamp()
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    key_hash = hashlib.sha256(api_key.encode()).hexdigest()
    script = pgbench_script(merchant_id(db), key_hash)
    script_path = RESULTS / f"throughput-payment-{stamp}.sql"
    script_path.parent.mkdir(parents=True, exist_ok=True)
    script_path.write_text(script)

    sandbox = start_sandbox()
    env = django_env(
        db,
        ACQUIRER_BASE_URL=sandbox.url,
        ACQUIRER_API_KEY=SANDBOX_API_KEY,
        ACQUIRER_STATE_REDIS_URL=args.state_redis_url,
    )
    server = Gunicorn(env, RESULTS / f"throughput-gunicorn-{stamp}.log")
    workers = int(env.get("WEB_CONCURRENCY", "2"))
    threads = int(env.get("WEB_THREADS", "4"))
    pg_clients = args.pg_clients or workers * threads
    rounds = []
    try:
        captured = capture_request_sql(env, api_key)
        same_sql = captured_shapes(captured) == script_shapes(script)
        print(f"request SQL: {len(captured)} statements; pgbench script matches: {same_sql}")
        if not same_sql:
            print("  request:", captured_shapes(captured))
            print("  pgbench:", script_shapes(script))
        server.start()
        url = f"{server.url}/payments"
        run_wrk(url, api_key=api_key, prefix=f"warm-{stamp}", duration=args.warmup,
                connections=args.connections, threads=args.wrk_threads)  # fmt: skip
        own = {server.process.pid: "gunicorn master", sandbox.process.pid: "sandbox"}
        for n, pid in enumerate(server.worker_pids()):
            own[pid] = f"gunicorn worker {n + 1}"
        watch = CpuWatch(own, db.name)
        for n in range(args.rounds):
            http = run_wrk(
                url, api_key=api_key, prefix=f"r{n}-{stamp}", duration=args.duration,
                connections=args.connections, threads=args.wrk_threads, watch=watch,
            )  # fmt: skip
            floor = run_pgbench(
                db, script_path, clients=pg_clients, threads=2, duration=args.duration,
                watch=watch,
            )  # fmt: skip
            rounds.append({
                "service": http.as_dict(), "service_rps": http.rate(201),
                "service_cpu_ms_per_payment": per_item_ms(http.cpu, http.rate(201)),
                "floor": vars(floor),
                "floor_cpu_ms_per_payment": per_item_ms(floor.cpu, floor.tps),
                "ratio": ratio(http.rate(201), floor.tps),
            })  # fmt: skip
            print(
                f"round {n + 1}: service {http.rate(201):.1f} payments/s "
                f"(p50 {http.p50_ms:.0f} ms, non-201 {http.requests - http.count(201)}), "
                f"floor {floor.tps:.1f}/s, ratio {rounds[-1]['ratio']:.3f}"
            )
        profile = (
            profile_workers(server, url, api_key, args.profile_seconds, stamp, args.connections)
            if args.profile_seconds > 0
            else {}
        )
    finally:
        server.stop()
        sandbox.stop()

    service = median(r["service_rps"] for r in rounds)
    floor_tps = median(r["floor"]["tps"] for r in rounds)
    result_ratio = median(r["ratio"] for r in rounds)
    print()
    print_table(
        ["measure", "median of rounds"],
        [
            ("POST /payments, 201 per second (wrk, new keys)", service),
            ("the same SQL in pgbench, per second (the floor)", floor_tps),
            ("service / floor", result_ratio),
        ],
    )
    workers_seen = sorted({g for r in rounds for g in r["service_cpu_ms_per_payment"]
                           if g.startswith("gunicorn")})  # fmt: skip
    groups = (*workers_seen, "sandbox", "postgres", "postgres (shared processes)",
              "load generator", "other")  # fmt: skip
    cpu_rows = []
    for group in groups:
        svc = median(r["service_cpu_ms_per_payment"].get(group, 0.0) for r in rounds)
        flo = median(r["floor_cpu_ms_per_payment"].get(group, 0.0) for r in rounds)
        label = {"postgres": "postgres (backends of the benchmark database)",
                 "other": "other processes (not this benchmark)"}.get(group, group)  # fmt: skip
        cpu_rows.append((label, svc, flo))
    cpu_rows.append((
        f"busy cores (of {os.cpu_count() or 1})",
        median(r["service_cpu_ms_per_payment"]["machine_busy_cores"] for r in rounds),
        median(r["floor_cpu_ms_per_payment"]["machine_busy_cores"] for r in rounds),
    ))  # fmt: skip
    cpu_ratio = median(
        ratio(own_cpu_ms(r["floor_cpu_ms_per_payment"], floor=True),
              own_cpu_ms(r["service_cpu_ms_per_payment"], floor=False))
        for r in rounds
    )  # fmt: skip
    cpu_rows.append(("CPU ratio floor / service (see the docs)", cpu_ratio, ""))
    print()
    print_table(["CPU ms per payment", "service (wrk)", "floor (pgbench)"], cpu_rows)
    path = write_results(
        "throughput",
        {
            "machine": machine_context(),
            "settings": {**vars(args), "pg_clients": pg_clients, "workers": workers,
                         "threads": threads},
            "request_sql_statements": len(captured),
            "pgbench_script_matches_request": same_sql,
            "pgbench_script": str(script_path),
            "rounds": rounds,
            "median": {"service_rps": service, "floor_tps": floor_tps, "ratio": result_ratio,
                       "cpu_ratio": cpu_ratio},
            "profile": profile,
        },
    )  # fmt: skip
    print(f"\nresults: {path}")
    return 0 if same_sql else 1


if __name__ == "__main__":
    sys.exit(main())
