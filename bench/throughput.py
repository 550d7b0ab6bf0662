"""Benchmark: POST /payments throughput with new keys, against two floors.

One command (docs/benchmarks.md, "Throughput against the floor")::

    .venv/bin/python bench/throughput.py                # 3 rounds of 15 s each side, profile
    .venv/bin/python bench/throughput.py --duration 5 --rounds 1 --profile-seconds 0

It starts the sandbox acquirer (answering at once) and gunicorn exactly as the Procfile does
(``config/gunicorn.conf.py``: 2 workers x 64 threads), then rotates, ``--rounds`` times:

* **the service**: wrk (``bench/lua/payments.lua``) posts payments, each with a new
  Idempotency-Key, for ``--duration`` seconds; counted: 201 answers per second;
* **the same-SQL floor**: pgbench runs the SQL of one such request, exactly the statements
  Django sent for it (captured from its query log, the payment id and key made new on every
  transaction), against the same PostgreSQL for the same time, with as many clients as the
  service has database connections (workers x pool size); counted: scripts per second;
* **the minimal floor**: pgbench runs ``bench/floor/payment.pgbench``, the seven statements an
  idempotent payment cannot avoid (``bench/floor/README.md``), with the same clients.

Both ratios, service/floor, are reported per round and as the median. Before measuring, the
request's statements (kind and table, in order) must be :data:`EXPECTED_FRESH`: if the service's
SQL changed, the benchmark says so and exits 1 without measuring. Then, unless
``--profile-seconds 0``, it profiles the two workers with py-spy under the same load (one with
idle threads: wall time; one only while holding the GIL: Python CPU) and prints where the time
of a request goes, by layer (``bench/profile_stacks.py``). Around every measurement it also
reads each process's CPU time from ``/proc``, so the report says how many CPU milliseconds one
payment costs in gunicorn, PostgreSQL and the sandbox, next to what one pgbench script costs
PostgreSQL.
"""

# ruff: noqa: S603 - benchmarks run their own commands (wrk, pgbench, gunicorn, py-spy)

from __future__ import annotations

import argparse
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

#: The statements of one ``POST /payments`` with a new key, once the process has the API key
#: in its cache (ADR 0026). The benchmark refuses to measure when the service sends others;
#: ``tests/integration/test_hot_path_sql.py`` asserts the same list against real PostgreSQL.
EXPECTED_FRESH = [
    "INSERT idempotency_idempotencykey",  # phase 1: key, payment, event in one statement
    "BEGIN",
    "UPDATE payments_payment",  # phase 2: payment, both events, the key's answer
    "INSERT webhooks_event",  # the outbox event and the merchant's endpoints, one statement
    "COMMIT",
]

FLOOR = Path(__file__).resolve().parent / "floor"


def pgbench_script(
    statements: list[str], payment_id: str, key: str, key_id: int | None = None
) -> str:
    """The SQL of one ``POST /payments`` with a new key (``statements``, as Django's query log
    shows them) as a pgbench script: the request's payment id, idempotency key and webhook
    event id become ``:client_id`` and a random ``:k``, so every script makes a new payment;
    every other literal (the stored answer, the events' data, timestamps) stays as sent.
    ``key_id``: the key row's id, when later statements name it as a literal (the code before
    ADR 0026 did): the statement that inserts the key keeps it in ``:key_id`` (``\\gset``)."""
    unique = "pay_:client_id-:k"
    lines = [r"\set k random(1, 9000000000000000000)"]
    key_inserted = False
    for sql in statements:
        text = " ".join(sql.split()).replace(payment_id, unique)
        text = text.replace(f"'{key}'", "'pgbench-:client_id-:k'")
        text = re.sub(r"\bevt_[0-9a-f]{24}\b", "evt_:client_id-:k", text)  # the outbox event
        if key_id is not None and key_inserted:
            text = re.sub(rf"\b{key_id}\b", ":key_id", text)
        claims_key = text.startswith("INSERT INTO") and "RETURNING" in text
        claims_key = claims_key and "idempotency_idempotencykey" in text.split("(")[0]
        if key_id is not None and not key_inserted and claims_key:
            key_inserted = True
            lines.append(text + r" \gset key_")
            continue
        lines.append(text + ";")
    return "\n".join(lines) + "\n"


_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', re.IGNORECASE)


_FIRST_WRITE = re.compile(r'\(\s*(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+"?(\w+)"?', re.IGNORECASE)


def statement_shape(sql: str) -> str | None:
    """``INSERT payments_payment``, ``SELECT payments_payment FOR NO KEY UPDATE``, ``BEGIN``,
    ...; a ``WITH`` statement is named by its first data-modifying CTE (``WITH claimed_key AS
    (INSERT INTO "idempotency_idempotencykey" ...`` is ``INSERT idempotency_idempotencykey``).
    None for comments and pgbench meta-commands. Django's health check (``SELECT 1``) counts."""
    text = sql.strip().removesuffix(r"\gset").strip().rstrip(";").strip()
    if not text or text.startswith(("--", "\\")):
        return None
    if text.upper() == "SELECT 1":
        return "SELECT 1"
    word = text.split(None, 1)[0].upper()
    if word in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"):
        return word
    if word == "WITH":
        first = _FIRST_WRITE.search(text)
        if first:
            return f"{first.group(1).split()[0].upper()} {first.group(2)}"
    match = _TABLE.search(text)
    shape = f"{word} {match.group(1) if match else '?'}"
    lock = re.search(r"\bFOR (NO KEY UPDATE|UPDATE|SHARE|KEY SHARE)\b", text, re.I)
    return shape + (f" FOR {lock.group(1).upper()}" if lock else "")


def script_shapes(script: str) -> list[str]:
    return [s for s in (statement_shape(line) for line in script.splitlines()) if s]


def captured_shapes(queries: list[str]) -> list[str]:
    return [s for s in (statement_shape(q) for q in queries) if s]


def capture_request_sql(env: dict[str, str], api_key: str) -> dict:
    """The SQL of one ``POST /payments`` with a new key, from Django's query log (in a
    subprocess with the service's settings, against the running sandbox): ``sql`` (the
    statements), ``payment_id`` and ``key`` (the request's, to vary in pgbench)."""
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
    sql = [q["sql"] for q in queries.captured_queries]
    from payments.models import Payment

    payment = Payment.objects.get(pk=answer.json()["id"])
    print(json.dumps({"sql": sql, "payment_id": payment.pk, "key": f"c-{stamp}",
                      "key_id": payment.idempotency_key_id}))  # fmt: skip


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
        help="pgbench clients (default: the service's connections, workers x pool size)",
    )  # fmt: skip
    parser.add_argument("--profile-seconds", type=float, default=10, help="0: no profile")
    parser.add_argument("--database", default=None, help="benchmark database name")
    parser.add_argument(
        "--state-redis-url", default="",
        help="ACQUIRER_STATE_REDIS_URL for the service (default: in-memory, as make run)",
    )  # fmt: skip
    parser.add_argument(
        "--any-sql", action="store_true",
        help="measure even when the request's SQL is not EXPECTED_FRESH (experiments: compare "
        "a change's figures with a run of the code before it, never with the docs)",
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
    load_floor_schema(db)
    api_key = issue_api_key(db)
    RESULTS.mkdir(parents=True, exist_ok=True)

    sandbox = start_sandbox()
    env = django_env(
        db,
        ACQUIRER_BASE_URL=sandbox.url,
        ACQUIRER_API_KEY=SANDBOX_API_KEY,
        ACQUIRER_STATE_REDIS_URL=args.state_redis_url,
    )
    server = Gunicorn(env, RESULTS / f"throughput-gunicorn-{stamp}.log")
    workers = int(env.get("WEB_CONCURRENCY", "2"))
    # The service's database connections: each worker's pool (ADR 0048), not its threads.
    pool = int(env.get("DATABASE_POOL_MAX_SIZE", "8"))
    pg_clients = args.pg_clients or workers * pool
    rounds = []
    try:
        request = capture_request_sql(env, api_key)
        shapes = captured_shapes(request["sql"])
        print(f"request SQL: {len(request['sql'])} statements: {shapes}")
        if shapes != EXPECTED_FRESH and not args.any_sql:
            # The same-SQL floor and every figure below assume these statements: refuse to
            # measure something else (update EXPECTED_FRESH and the docs with the change).
            print(f"  expected {EXPECTED_FRESH}: the service's SQL changed; not measuring")
            return 1
        script = pgbench_script(
            request["sql"], request["payment_id"], request["key"], request["key_id"]
        )
        script_path = RESULTS / f"throughput-payment-{stamp}.sql"
        script_path.write_text(script)
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
            minimal = run_pgbench(
                db, FLOOR / "payment.pgbench", clients=pg_clients, threads=2,
                duration=args.duration, watch=watch,
            )  # fmt: skip
            rounds.append({
                "service": http.as_dict(), "service_rps": http.rate(201),
                "service_cpu_ms_per_payment": per_item_ms(http.cpu, http.rate(201)),
                "floor": vars(floor),
                "floor_cpu_ms_per_payment": per_item_ms(floor.cpu, floor.tps),
                "minimal": vars(minimal),
                "minimal_cpu_ms_per_payment": per_item_ms(minimal.cpu, minimal.tps),
                "ratio": ratio(http.rate(201), floor.tps),
                "minimal_ratio": ratio(http.rate(201), minimal.tps),
            })  # fmt: skip
            print(
                f"round {n + 1}: service {http.rate(201):.1f} payments/s "
                f"(p50 {http.p50_ms:.0f} ms, non-201 {http.requests - http.count(201)}), "
                f"same-SQL floor {floor.tps:.1f}/s (ratio {rounds[-1]['ratio']:.3f}), "
                f"minimal floor {minimal.tps:.1f}/s (ratio {rounds[-1]['minimal_ratio']:.3f})"
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
    minimal_tps = median(r["minimal"]["tps"] for r in rounds)
    result_ratio = median(r["ratio"] for r in rounds)
    minimal_ratio = median(r["minimal_ratio"] for r in rounds)
    service_own = median(own_cpu_ms(r["service_cpu_ms_per_payment"], floor=False) for r in rounds)
    print()
    print_table(
        ["measure", "median of rounds"],
        [
            ("POST /payments, 201 per second (wrk, new keys)", service),
            ("the same SQL in pgbench, per second (the same-SQL floor)", floor_tps),
            ("the minimal write floor (bench/floor), per second", minimal_tps),
            ("service / same-SQL floor", result_ratio),
            ("service / minimal floor (goal >= 0.15)", minimal_ratio),
            ("service CPU ms per payment, gunicorn + PostgreSQL (goal <= 3.5)", service_own),
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
        mini = median(r["minimal_cpu_ms_per_payment"].get(group, 0.0) for r in rounds)
        label = {"postgres": "postgres (backends of the benchmark database)",
                 "other": "other processes (not this benchmark)"}.get(group, group)  # fmt: skip
        cpu_rows.append((label, svc, flo, mini))
    cpu_rows.append((
        f"busy cores (of {os.cpu_count() or 1})",
        *(median(r[f"{side}_cpu_ms_per_payment"]["machine_busy_cores"] for r in rounds)
          for side in ("service", "floor", "minimal")),
    ))  # fmt: skip
    cpu_ratio = median(
        ratio(own_cpu_ms(r["floor_cpu_ms_per_payment"], floor=True),
              own_cpu_ms(r["service_cpu_ms_per_payment"], floor=False))
        for r in rounds
    )  # fmt: skip
    minimal_cpu_ratio = median(
        ratio(own_cpu_ms(r["minimal_cpu_ms_per_payment"], floor=True),
              own_cpu_ms(r["service_cpu_ms_per_payment"], floor=False))
        for r in rounds
    )  # fmt: skip
    cpu_rows.append(("CPU ratio floor / service (see the docs)", "", cpu_ratio, minimal_cpu_ratio))
    print()
    print_table(
        ["CPU ms per payment", "service (wrk)", "same-SQL floor", "minimal floor"], cpu_rows
    )
    path = write_results(
        "throughput",
        {
            "machine": machine_context(),
            "settings": {**vars(args), "pg_clients": pg_clients, "workers": workers,
                         "pool": pool},
            "request_sql": request["sql"],
            "request_shapes": shapes,
            "pgbench_script": str(script_path),
            "rounds": rounds,
            "median": {"service_rps": service, "floor_tps": floor_tps, "ratio": result_ratio,
                       "minimal_tps": minimal_tps, "minimal_ratio": minimal_ratio,
                       "cpu_ratio": cpu_ratio, "minimal_cpu_ratio": minimal_cpu_ratio,
                       "service_cpu_ms": service_own},
            "profile": profile,
        },
    )  # fmt: skip
    print(f"\nresults: {path}")
    return 0


def load_floor_schema(db) -> None:
    """Create the minimal floor's tables (bench/floor/schema.sql) in the benchmark database,
    afresh."""
    import psycopg

    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute((FLOOR / "schema.sql").read_text())


if __name__ == "__main__":
    sys.exit(main())
