"""The benchmarks under bench/ (docs/benchmarks.md) still import, parse their arguments and
compute their figures right. They are never run here: they start servers and take minutes.

The peer comparisons need the ``bench`` extra (django-idempotency-key, tenacity, pybreaker);
without it those checks are skipped.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from bench import (
    capacity,
    client_compare,
    common,
    endpoint_compare,
    hot_path_ab,
    instructions,
    latency,
    noisy_neighbour,
    notifications_time_to_final,
    profile_stacks,
    purge_cost,
    replay_latency,
    retry_storm,
    same_key_storm,
    stack_floor,
    throughput,
    webhook_delivery,
    webhook_fairness,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "module",
    [
        throughput,
        endpoint_compare,
        replay_latency,
        notifications_time_to_final,
        same_key_storm,
        client_compare,
        retry_storm,
        noisy_neighbour,
        capacity,
        purge_cost,
        hot_path_ab,
        instructions,
        stack_floor,
        webhook_fairness,
        webhook_delivery,
        latency,
    ],
)
def test_every_benchmark_parses_its_defaults_and_documents_itself(module):
    args = module.parse_args([])
    assert args is not None
    assert module.__doc__ and "One command" in module.__doc__


def test_arguments_are_parsed():
    assert hot_path_ab.parse_args(["--variants", "input serializer"]).variants == (
        "input serializer"
    )
    assert hot_path_ab.parse_args(["--parts-number", "0"]).parts_number == 0
    assert throughput.parse_args(["--duration", "5", "--rounds", "1"]).rounds == 1
    assert throughput.parse_args([]).profile_seconds > 0
    assert replay_latency.parse_args(["--concurrency", "1", "4"]).concurrency == [1, 4]
    assert same_key_storm.parse_args([]).storm == 20
    assert retry_storm.parse_args([]).clients == 200
    assert retry_storm.parse_args([]).capacity == 60
    assert retry_storm.parse_args(["--max-concurrent", "0"]).max_concurrent == [0]
    with pytest.raises(SystemExit):
        retry_storm.parse_args(["--strategies", "nonsense"])
    assert instructions.parse_args(["--against", "f98b9db"]).against == "f98b9db"


def test_instructions_reads_callgrinds_total_and_refuses_a_child_run_by_hand(monkeypatch):
    assert instructions.COLLECTED.search("==123== Collected : 4889061269\n").group(1) == (
        "4889061269"
    )
    for name in [n for n in os.environ if n.startswith("BENCH_CHILD_")]:
        monkeypatch.delenv(name)
    with pytest.raises(SystemExit, match="not by hand"):
        instructions.main(["--child", "1"])


# -- common ------------------------------------------------------------------------------


def test_percentile_ratio_median():
    values = list(range(1, 101))
    assert common.percentile(values, 50) == 50
    assert common.percentile(values, 99) == 99
    assert common.percentile([7.0], 99) == 7.0
    assert common.ratio(1, 0) != common.ratio(1, 0)  # NaN
    assert common.ratio(3, 4) == 0.75
    assert common.median([3, float("nan"), 1, 2]) == 2


def test_the_webhook_delivery_benchmark_runs_the_procfiles_workers_and_adds_rounds_up():
    """bench/webhook_delivery.py: ``threads`` is the Procfile's webhooks worker (one process),
    ``prefork`` its tasks worker consuming every queue (two); each case's rate is its events
    over its seconds across rounds; the ratio is capped by the per-endpoint concurrency."""
    command, processes = webhook_delivery.worker_command("threads")
    assert command[:2] == ["env", "WORKER_QUEUES=webhooks"] and processes == 1
    assert command[command.index("--pool") + 1] == "threads"
    command, processes = webhook_delivery.worker_command("threads:64")
    assert command[command.index("--concurrency") + 1] == "64" and processes == 1
    command, processes = webhook_delivery.worker_command("prefork:8")
    assert command[:2] == ["env", "WORKER_QUEUES=all"] and processes == 8
    with pytest.raises(SystemExit):
        webhook_delivery.worker_command("gevent")
    rounds = [
        {"case": case, "events": 100, "seconds": seconds, "peak_in_flight": 3,
         "peak_connections": 8, "rss_mb": 130.0, "cpu_ms_per_delivery": 20.0, "delivered": 100}
        for case, seconds in (("instant", 2.0), ("slow", 4.0), ("slow + hang", 5.0),
                              ("instant", 3.0), ("slow", 4.0), ("slow + hang", 5.0))
    ]  # fmt: skip
    args = webhook_delivery.parse_args(["--merchants", "4", "--delay", "0.5"])
    summary = webhook_delivery.summary({"processes": 1, "rounds": rounds}, args, 2)
    assert summary["cases"]["instant"]["per_second"] == 40.0
    assert summary["cap_per_second"] == 16.0  # 4 endpoints x 2 / 0.5 s
    assert summary["slow_over_instant_capped"] == 25.0 / 16.0
    assert summary["hang_over_slow"] == 20.0 / 25.0


def test_the_web_command_is_the_procfiles():
    assert common.procfile_command("web") == [
        sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py",
        "config.wsgi:application",
    ]  # fmt: skip
    assert common.procfile_command("sandbox")[:3] == [sys.executable, "-m", "sandbox_acquirer"]
    assert common.procfile_command("worker")[:5] == [
        "env", "WORKER_QUEUES=tasks", sys.executable, "-m", "celery",
    ]  # fmt: skip


def test_database_from_the_url(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://bob:s%40cret@db.local:6543/app")
    db = common.database_from_env("payments_bench")
    assert (db.host, db.port, db.user, db.password, db.name) == (
        "db.local", 6543, "bob", "s@cret", "payments_bench",
    )  # fmt: skip
    assert db.url() == "postgresql://bob:s%40cret@db.local:6543/payments_bench"
    assert db.pg_env()["PGDATABASE"] == "payments_bench"
    assert "dbname='postgres'" in db.conninfo("postgres")
    socket_db = common.Database("/tmp/pg", None, "postgres", "", "x")
    assert socket_db.url() == "postgresql://postgres@/x?host=/tmp/pg"


def test_wrk_command_and_its_output():
    command = common.wrk_command(
        "http://127.0.0.1:1/payments", api_key="sk", mode="replay", prefix="p", pool=10,
        duration=3, connections=4, threads=2,
    ) if common.shutil.which("wrk") else None  # fmt: skip
    if command is not None:
        assert command[-6:] == ["--", "sk", "replay", "p", "10", "tok_visa"]
        assert str(common.LUA / "payments.lua") in command
    script = (common.LUA / "payments.lua").read_text()
    assert "BENCH_JSON" in script and "Idempotency-Key" in script
    line = common.WRK_MARKER + json.dumps(
        {"requests": 30, "duration_us": 2_000_000, "statuses": {"201": 29, "409": 1},
         "errors": {"connect": 0, "read": 0, "write": 0, "status": 1, "timeout": 0},
         "p50_us": 1500, "p90_us": 3000, "p99_us": 9000, "max_us": 12000, "mean_us": 2000}
    )  # fmt: skip
    result = common.parse_wrk_output("Running 2s test\n" + line + "\n")
    assert result.rate(201) == 14.5
    assert result.rate() == 15
    assert (result.p50_ms, result.p99_ms) == (1.5, 9.0)
    with pytest.raises(ValueError, match=r"^no BENCH_JSON line in wrk's output"):
        common.parse_wrk_output("no marker")


def test_pgbench_output():
    out = """transaction type: payment.sql
number of transactions actually processed: 8734/8734
number of failed transactions: 0 (0.000%)
latency average = 9.162 ms
initial connection time = 12.702 ms
tps = 873.102367 (without initial connection time)
"""
    result = common.parse_pgbench_output(out)
    assert (result.transactions, result.tps, result.latency_ms, result.failed) == (
        8734, 873.102367, 9.162, 0,
    )  # fmt: skip


def test_cpu_accounting():
    group = common.process_group
    assert group("postgres: 15/main: postgres bench 127.0.0.1(5) idle", "bench") == "postgres"
    assert group("postgres: postgres other_db [local] idle", "bench") == "other"
    assert group("postgres: 15/main: walwriter ", "bench") == "postgres (shared processes)"
    assert group("/usr/lib/postgresql/15/bin/postgres -D /x", "bench").startswith("postgres (")
    assert group("python -m gunicorn -c x", "bench") == "other"  # someone else's gunicorn
    before = {"procs": {1: ("gunicorn", 100), 2: ("postgres", 50)}, "busy": 0, "total": 0,
              "at": 0.0}  # fmt: skip
    after = {"procs": {1: ("gunicorn", 300), 2: ("postgres", 60), 3: ("postgres", 40)},
             "busy": 100, "total": 200, "at": 2.0}  # fmt: skip
    seconds = common.cpu_seconds_by_group(before, after)
    ticks = common._TICKS
    assert seconds["gunicorn"] == pytest.approx(200 / ticks)
    assert seconds["postgres"] == pytest.approx(50 / ticks)  # pid 3 started in between
    assert seconds["machine_busy_cores"] == pytest.approx(0.5 * (common.os.cpu_count() or 1))
    per_payment = throughput.per_item_ms({**seconds, "gunicorn": 1.0}, per_second=250)
    assert per_payment["gunicorn"] == pytest.approx(2.0)  # 1 CPU s over 2 s x 250/s
    service = {"gunicorn worker 1": 8.0, "gunicorn worker 2": 2.0, "postgres": 4.0,
               "sandbox": 1.0, "load generator": 0.1, "other": 9.0}  # fmt: skip
    assert throughput.own_cpu_ms(service, floor=False) == 14.0
    assert throughput.own_cpu_ms({"postgres": 2.0, "load generator": 0.5}, floor=True) == 2.5
    snapshot = common.cpu_snapshot({common.os.getpid(): "load generator"}, "bench")
    assert snapshot["procs"][common.os.getpid()][0] == "load generator"
    assert snapshot["total"] >= snapshot["busy"] > 0


# -- throughput: the pgbench script is the request's SQL -------------------------------------


def test_pgbench_script_makes_every_transaction_a_new_payment():
    """The captured SQL of a request becomes the script: the payment id, the idempotency key and
    the outbox event id vary per transaction; a key id named as a literal (the ORM's claim
    before ADR 0026) is kept from its INSERT with \\gset."""
    pay, key = "pay_" + "ab" * 12, "c-20261201T000000Z"
    sql = [
        "SELECT 1",
        f'INSERT INTO "idempotency_idempotencykey" ("key") VALUES (\'{key}\') RETURNING id',
        'UPDATE "idempotency_idempotencykey" SET x = 1 WHERE id = 4242',
        "BEGIN",
        f'INSERT INTO "payments_payment" ("id", "k") VALUES (\'{pay}\', \'authorize-{pay}\')',
        f'INSERT INTO "webhooks_event" ("id") VALUES (\'evt_{"cd" * 12}\')',
        "COMMIT",
    ]
    script = throughput.pgbench_script(sql, pay, key, key_id=4242)
    assert throughput.script_shapes(script) == [
        "SELECT 1",
        "INSERT idempotency_idempotencykey",
        "UPDATE idempotency_idempotencykey",
        "BEGIN",
        "INSERT payments_payment",
        "INSERT webhooks_event",
        "COMMIT",
    ]
    assert pay not in script and key not in script and "evt_cd" not in script
    assert r"RETURNING id \gset key_" in script and "WHERE id = :key_id;" in script
    assert "'authorize-pay_:client_id-:k'" in script and "'pgbench-:client_id-:k'" in script


def test_the_expected_fresh_payment_names_phase_1_and_phase_2():
    assert throughput.EXPECTED_FRESH[0] == "INSERT idempotency_idempotencykey"
    assert throughput.EXPECTED_FRESH[1:3] == ["BEGIN", "UPDATE payments_payment"]


def test_statement_shapes_of_django_sql():
    shape = throughput.statement_shape
    assert shape('SAVEPOINT "s1403_x2"') == "SAVEPOINT"
    assert shape('ROLLBACK TO SAVEPOINT "s1"') == "ROLLBACK"
    assert shape('UPDATE "payments_payment" SET "status" = 1 WHERE id = 2') == (
        "UPDATE payments_payment"
    )
    assert shape('SELECT "a"."id" FROM "payments_payment" WHERE x LIMIT 21 FOR UPDATE') == (
        "SELECT payments_payment FOR UPDATE"
    )
    # The payment row lock (payments/core/payment_states.py) is told apart from a plain FOR UPDATE.
    assert shape('SELECT "a"."id" FROM "payments_payment" WHERE x FOR NO KEY UPDATE') == (
        "SELECT payments_payment FOR NO KEY UPDATE"
    )
    assert shape("SELECT 1") == "SELECT 1"  # Django's health check counts (ADR 0026)
    assert shape(r"\set k random(1, 10)") is None
    # A statement of data-modifying CTEs is named by its first write.
    assert shape(
        'WITH k AS (INSERT INTO "idempotency_idempotencykey" (a) VALUES (1)) SELECT 1'
    ) == ("INSERT idempotency_idempotencykey")
    assert shape(
        'WITH p AS (UPDATE "payments_payment" SET a = 1 RETURNING id) SELECT id FROM p'
    ) == ("UPDATE payments_payment")


# -- profile summaries -------------------------------------------------------------------


def test_profile_layers():
    request = "handle (gunicorn/workers/gthread.py);handle_request (gunicorn/workers/gthread.py)"
    drf = "dispatch (rest_framework/views.py)"
    lines = [
        f"{request};post (payments/api/views.py);execute (psycopg/cursor.py) 60",
        f"{request};post (payments/api/views.py);as_sql (django/db/models/sql/compiler.py) 25",
        f"{request};post (payments/api/views.py);send (httpx/_client.py) 10",
        f"{request};post (payments/api/views.py) 5",
        f"{request};{drf};post (payments/api/views.py);asdict (dataclasses.py) 7",
        f"{request};{drf};render (rest_framework/renderers.py) 3",
        "run (gunicorn/workers/gthread.py);select (selectors.py) 300",
        "garbage line",
    ]
    stacks = profile_stacks.parse_collapsed(lines)
    summary = profile_stacks.summarize(stacks)
    assert summary["samples_in_requests"] == 110
    assert summary["samples_outside_requests"] == 300
    shares = {row["layer"]: row["share"] for row in summary["layers"]}
    assert shares[profile_stacks.LAYERS[0][0]] == 60 / 110
    assert shares["Django ORM (building SQL, model instances)"] == 25 / 110
    # Beneath DRF's dispatch, the innermost layer's frame names the code running.
    assert shares["service code (payments, idempotency, merchants)"] == 12 / 110
    assert shares["DRF (request parsing, serializers, renderers)"] == 3 / 110
    top = {"function": "post (payments/api/views.py)", "share": 107 / 110}
    assert summary["top_functions"][0] == top
    assert "54.5%" in profile_stacks.format_summary("t", summary)


# -- comparisons ---------------------------------------------------------------------------


def test_endpoint_rotation():
    names = list(endpoint_compare.ENDPOINTS)
    assert endpoint_compare.rotation(names, 0) == names
    assert endpoint_compare.rotation(names, 1) == names[1:] + names[:1]
    assert {endpoint_compare.rotation(names, i)[0] for i in range(3)} == set(names)


def test_endpoint_cpu_per_payment():
    cpu = {"gunicorn": 1.0, "postgres": 0.4, "postgres (shared processes)": 0.1, "other": 5.0,
           "seconds": 5.0}  # fmt: skip
    assert endpoint_compare.service_cpu_ms(cpu, per_second=100) == pytest.approx(3.0)


def test_stack_floor_cpu_per_payment():
    cpu = {"service": 1.2, "stack floor": 0.3, "postgres": 0.4, "postgres (shared processes)": 0.1,
           "load generator": 0.05, "sandbox": 9.0, "seconds": 5.0}  # fmt: skip
    # 100 payments/s over 5 s: 500 payments; the side's own web group and PostgreSQL only.
    assert stack_floor.cpu_ms(cpu, 100, "service") == pytest.approx(
        {"web": 2.4, "postgres": 1.0, "total": 3.4}
    )
    assert stack_floor.cpu_ms(cpu, 100, None) == pytest.approx(  # pgbench: its own client
        {"web": 0.1, "postgres": 1.0, "total": 1.1}
    )
    assert stack_floor.cpu_ms(cpu, 0, "service") == {"web": 0.0, "postgres": 0.0, "total": 0.0}


def test_stack_floor_rotation_puts_each_side_first_once():
    assert stack_floor.rotation(0) == list(stack_floor.SIDES)
    assert {stack_floor.rotation(n)[0] for n in range(3)} == set(stack_floor.SIDES)
    assert all(sorted(stack_floor.rotation(n)) == sorted(stack_floor.SIDES) for n in range(5))


def test_stack_floor_summary_takes_each_rounds_ratio_then_the_median():
    def run(per_second, total):
        return {"per_second": per_second, "cpu": {"web": total / 2, "postgres": total / 2,
                                                  "total": total}}  # fmt: skip

    runs = {
        "service": [run(200, 8.0), run(300, 6.0), run(100, 9.0)],
        "stack floor": [run(400, 4.0), run(400, 3.0), run(400, 3.6)],
        "minimal floor": [run(2000, 1.0), run(2000, 1.0), run(1000, 1.0)],
    }
    runs["service"][1]["cpu"]["web"] = 5.0  # the parts come from one round: they add up
    result = stack_floor.summarise(runs)
    assert result["sides"]["service"]["per_second"] == 200
    assert result["sides"]["stack floor"]["total"] == pytest.approx(3.6)
    assert result["sides"]["service"] == {"per_second": 200, "web": 4.0, "postgres": 4.0,
                                          "total": 8.0}  # fmt: skip
    assert stack_floor.summarise({side: rounds[:2] for side, rounds in runs.items()})[
        "sides"]["service"]["total"] == 6.0  # of two rounds, the lower  # fmt: skip
    assert result["stack_over_minimal"] == pytest.approx(0.2)  # 0.2, 0.2, 0.4
    assert result["service_over_minimal"] == pytest.approx(0.1)  # 0.1, 0.15, 0.1
    assert result["service_over_stack"] == pytest.approx(0.5)  # 0.5, 0.75, 0.25
    assert result["service_over_stack_by_cpu"] == pytest.approx(0.5)  # 0.5, 0.5, 0.4


def test_duplicate_counting():
    assert same_key_storm.duplicates(Counter({"a": 1, "b": 3, "c": 2})) == (3, 2)
    assert same_key_storm.duplicates(Counter()) == (0, 0)


def test_payment_schedule():
    assert client_compare.schedule(10, 1) == [i / 10 for i in range(10)]
    assert len(client_compare.schedule(20, 3.5)) == 70


# -- the live retry storm --------------------------------------------------------------------


def test_arrival_series_and_storm_metrics():
    started = 1000.05  # epoch seconds: the storm begins in bucket 1000000 ms
    buckets = {"999900": 4, "1000000": 100, "1000100": 20, "1000500": 6, "1001200": 1}
    series = retry_storm.arrivals_series(buckets, started)
    assert series[:3] == [100, 20, 0] and series[5] == 6 and series[12] == 1 and len(series) == 13
    metrics = retry_storm.storm_metrics([100, 20] + [0] * 8 + [5] * 20, capacity=60, clients=200)
    assert metrics["peak_per_second"] == 120
    assert metrics["peak_ratio"] == 2.0
    assert metrics["retry_peak_per_second"] == 50  # windows starting at 1 s
    assert metrics["recovery_seconds"] == 1.0  # the end of the last overloaded window, 0-1 s
    assert metrics["ideal_drain_seconds"] == pytest.approx(200 / 60)
    assert retry_storm.storm_metrics([], 60, 200)["recovery_seconds"] == 0.0


def test_storm_strategies_use_the_gateway_backoff(tmp_path):
    args = retry_storm.parse_args([])
    rng = retry_storm.random.Random(1)
    assert retry_storm.delay_function("fixed", args, rng)(5) == args.fixed_interval
    no_jitter = retry_storm.delay_function("no-jitter", args, rng)
    assert [no_jitter(n) for n in range(5)] == [0.2, 0.4, 0.8, 1.6, 2.0]
    jitter = retry_storm.delay_function("full-jitter+budget", args, rng)
    assert all(0 <= jitter(n) <= min(2.0, 0.2 * 2**n) for n in range(10))
    result = {"strategy": "fixed", "series_per_100ms": [5, 0, 7], "outcomes": {"succeeded": 3},
              "requests": 12, "recovery_seconds": 0.3}  # fmt: skip
    pytest.importorskip("matplotlib")
    path = tmp_path / "storm.png"
    retry_storm.plot([result, {**result, "strategy": "no-jitter"}], 60, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert retry_storm.plot_name(0) == "bench_retry_storm_rate.png"
    runs = [{**result, "peak_ratio": x, "retry_peak_ratio": 0, "recovery_ratio": 1,
             "seconds_until_all_done": 1, "outcomes": {"succeeded": x, "gave up (budget)": 1}}
            for x in (1, 5, 3)]  # fmt: skip
    combined = retry_storm.combine(runs)
    assert (combined["peak_ratio"], combined["succeeded"], combined["gave_up"]) == (3, 3, 1)


# -- the peers ------------------------------------------------------------------------------


def test_peer_client_retries_then_its_breaker_opens():
    pytest.importorskip("tenacity")
    pytest.importorskip("pybreaker")
    from bench.peers import tenacity_client

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Idempotency-Key"])
        if len(seen) < 3:
            return httpx.Response(503)
        return httpx.Response(201, json={"id": "ch_1", "status": "approved"})

    client = tenacity_client.PeerClient(
        "http://acquirer.test", "sk", transport=httpx.MockTransport(handler)
    )
    fast = client._retrying.retry_with(wait=lambda _state: 0)  # no sleeping in a unit test
    result = fast({"amount": 1, "currency": "EUR", "payment_method": "tok_visa",
                   "reference": "r", "idempotency_key": "k-1"})  # fmt: skip
    assert result.approved and seen == ["k-1", "k-1", "k-1"]  # same key on every attempt

    always_down = tenacity_client.PeerClient(
        "http://acquirer.test", "sk", transport=httpx.MockTransport(lambda r: httpx.Response(503))
    )
    attempt = always_down._retrying.retry_with(wait=lambda _state: 0)
    request = {"amount": 1, "currency": "EUR", "payment_method": "tok_visa", "reference": "r",
               "idempotency_key": "k-2"}  # fmt: skip
    import pybreaker

    errors = []
    for _ in range(3):
        try:
            attempt(request)
        except (tenacity_client.TransientStatusError, pybreaker.CircuitBreakerError) as exc:
            errors.append(type(exc).__name__)
    # 5 failed attempts open the breaker (fail_max=5); then calls are refused without sending.
    assert errors[-1] == "CircuitBreakerError"
    assert always_down.breaker.current_state == "open"


def test_bench_routes_resolve():
    pytest.importorskip("idempotency_key")
    pytest.importorskip("django_redis")
    from django.urls import resolve

    from bench.peers.views import PlainPaymentCreateApi

    plain = resolve("/bench/plain/payments", urlconf="bench.peers.urls")
    peer = resolve("/bench/peer/payments", urlconf="bench.peers.urls")
    service = resolve("/payments", urlconf="bench.peers.urls")
    assert plain.func.view_class is PlainPaymentCreateApi
    assert getattr(peer.func, "idempotency_key", False) is True
    assert service.url_name == "payments"


# pg_waldump lines, without their lsn and prev fields.
WALDUMP = "\n".join(
    [
        "rmgr: Heap len (rec/tot):     59/  7331, tx:        901, desc: INSERT off 3,"
        " blkref #0: rel 1663/16384/16390 blk 0 FPW",
        "rmgr: Btree len (rec/tot):     64/    64, tx:        901, desc: INSERT_LEAF off 2,"
        " blkref #0: rel 1663/16384/16395 blk 1",
        "rmgr: Heap len (rec/tot):     54/   182, tx:        902, desc: INSERT off 9,"
        " blkref #0: rel 1663/5/2619 blk 7",
        "rmgr: Transaction len (rec/tot):     34/    34, tx:        901, desc: COMMIT",
        "rmgr: Transaction len (rec/tot):     34/    34, tx:        902, desc: COMMIT",
        "rmgr: Heap2 len (rec/tot):     60/    60, tx:          0, desc: PRUNE latestRemovedXid 0,"
        " blkref #0: rel 1663/16384/16390 blk 0",
        "rmgr: Standby len (rec/tot):     50/    50, tx:          0, desc: RUNNING_XACTS",
    ]
)


def test_the_wal_of_one_database_is_told_apart_from_the_servers():
    # Database 16384: transaction 901 (two records and its commit) and a prune; not database
    # 5's transaction 902, not the server's RUNNING_XACTS.
    assert capacity.wal_of_database(WALDUMP, 16384) == (7331 + 64 + 34 + 60, 1)
    assert capacity.wal_of_database(WALDUMP, 5) == (182 + 34, 1)


def test_index_entries_count_every_insert_and_every_update_that_is_not_hot():
    def counters(ins, upd, hot, size):
        row = {"inserted": ins, "updated": upd, "hot_updated": hot, "deleted": 0,
               "indexes": 3, "rows": ins, "bytes": size}  # fmt: skip
        return dict.fromkeys(capacity.TABLES, row)

    writes = capacity.per_payment_writes(counters(0, 0, 0, 8192), counters(10, 10, 4, 18192), 10)
    table = writes["payments_payment"]
    assert table["index_entries"] == (10 + 10 - 4) * 3 / 10
    assert table["bytes_kept"] == 1000


def test_the_fuzz_campaign_counts_every_request_once(tmp_path):
    """Each request in the web log once: its request line, or gunicorn's access line for a
    request the request line does not cover (ADR 0028); plain and JSON lines. The successful
    captures, refunds and rotations are counted apart (only a link's id makes one succeed)."""
    from campaigns.fuzz import _access_statuses

    log = tmp_path / "web.log"
    log.write_text(
        "2026-12-01T18:49:11Z [info     ] request POST /payments 201     [payments.request]\n"
        '{"event": "request GET (no route) 404", "logger": "payments.request"}\n'
        '{"event": "127.0.0.1 \\"GET /x HTTP/1.1\\" 500 12 3ms", "logger": "gunicorn.access"}\n'
        '{"event": "request POST /payments/<str:payment_id>/capture 503", "status": 503}\n'
        '{"event": "request POST /payments/<str:payment_id>/refunds 201", "status": 201}\n'
    )
    counts, linked, end = _access_statuses(log, 0)
    assert counts == {"201": 2, "404": 1, "500": 1, "503": 1}
    assert linked == {"capture": 0, "refund": 1, "rotate": 0}
    assert end == log.stat().st_size


def test_the_latency_benchmark_adds_its_rounds_up_per_case():
    """bench/latency.py: throughput over every round of a case, the percentiles over all its
    latencies, memory per payment in flight at the case's peak, web CPU and context switches
    per payment, and the machine's CPU per payment by group."""
    run = {"case": "300ms", "seconds": 10.0, "statuses": {"201": 100}, "peak_connections": 9,
           "latencies": [300.0] * 95 + [900.0] * 5, "web_cpu_seconds": 1.0,
           "web_switches": 6000, "cpu_groups": {"web": 1.0, "acquirer (sandbox)": 0.4,
                                                "machine_busy_cores": 1.5}}  # fmt: skip
    runs = [
        {**run, "payments": 100, "peak_in_flight": 20, "rss_at_peak": 200 * 2**20},
        {**run, "payments": 300, "peak_in_flight": 40, "rss_at_peak": 210 * 2**20},
    ]
    figures = latency.summarize(runs)["300ms"]
    assert figures["payments"] == 400 and figures["per_second"] == 20
    assert figures["p50_ms"] == 300 and figures["p99_ms"] > 300
    assert figures["peak_in_flight"] == 40 and figures["peak_connections"] == 9
    assert figures["rss_kb_per_in_flight"] == 210 * 1024 / 40
    assert figures["cpu_ms_per_payment"] == 5
    assert figures["switches_per_payment"] == 30
    assert figures["statuses"] == {"201": 200}
    assert figures["machine_busy_cores"] == 1.5
    by_group = figures["cpu_ms_per_payment_by_group"]
    assert (by_group["web"], by_group["acquirer (sandbox)"], by_group["other"]) == (5, 2, 0)
    assert latency.parse_args(["--cases", "instant"]).cases == ["instant"]
    assert latency.parse_args(["--versus", "WEB_RUN_SLOTS=8"]).versus == ["WEB_RUN_SLOTS=8"]
    with pytest.raises(SystemExit):
        latency.parse_args(["--versus", "WEB_RUN_SLOTS"])  # not NAME=VALUE


def test_the_latency_benchmarks_open_loop_sends_every_arrival_and_times_it_from_its_arrival():
    """bench/latency.py's ``open`` case: Poisson arrivals at the rate for the duration, each
    sent whatever the answers before it, every one answered (here by a local server taking
    30 ms), each latency counted from the arrival; the CPU window opened and closed once."""
    import random
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    keys_seen: Counter = Counter()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            keys_seen[self.headers["Authorization"]] += 1
            time.sleep(0.03)
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        # socketserver's listen backlog is 5: a burst of arrivals on a loaded machine found it
        # full and two connections were reset (ReadError), which is this stand-in's limit, not
        # the benchmark's.
        request_queue_size = 256

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    windows: list[float] = []
    clients = [httpx.Client(timeout=10) for _ in range(8)]
    try:
        latencies, statuses, arrivals = latency.open_load(
            f"http://127.0.0.1:{server.server_port}/payments", clients, ["a", "b"], 200.0, 0.5,
            lambda: windows.append(time.monotonic()), random.Random(30),
        )  # fmt: skip
    finally:
        server.shutdown()
        for client in clients:
            client.close()
    assert 60 <= arrivals <= 140  # 100 expected: Poisson at 200/s for 0.5 s
    assert statuses == {201: arrivals} and len(latencies) == arrivals
    assert min(latencies) >= 30
    assert keys_seen == {"Bearer a": (arrivals + 1) // 2, "Bearer b": arrivals // 2}
    assert len(windows) == 2


def test_the_latency_benchmarks_closed_loop_opens_its_window_after_the_warm_up():
    """bench/latency.py's closed loop: the answers of the first ``warmup`` seconds (the loop
    filling up) are counted apart as ``warm-up``, the window (its CPU readings) opens after
    them, and every answer the server gave is counted once, in one of the three phases."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answered: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(0.03)
            answered.append(time.monotonic())
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    windows: list[float] = []
    clients = [httpx.Client(timeout=10) for _ in range(4)]
    try:
        latencies, statuses = latency.load(
            f"http://127.0.0.1:{server.server_port}/payments", ["a"], clients, 0.3,
            lambda: windows.append(time.monotonic()), warmup=0.5,
        )  # fmt: skip
    finally:
        server.shutdown()
        for client in clients:
            client.close()
    assert set(statuses) <= {201, "201 warm-up", "201 late"}
    assert statuses["201 warm-up"] > 0 and statuses[201] > 0
    assert sum(statuses.values()) == len(answered) and len(latencies) == statuses[201]
    assert len(windows) == 2 and min(answered) < windows[0]
