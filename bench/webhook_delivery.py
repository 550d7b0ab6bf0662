"""Benchmark: webhook deliveries per second per worker process, merchant endpoints answering at
once and in 500 ms, and a hanging endpoint beside them (issue 30, ADR 0050).

One command (docs/benchmarks.md, "Webhook deliveries to slow endpoints")::

    make bench-webhook-delivery
    .venv/bin/python bench/webhook_delivery.py --workers threads prefork --rounds 2

For each worker model of ``--workers`` it starts that worker and the Procfile's beat against a
database of its own, and a receiver in this process (real HTTP on loopback, every endpoint of
``--merchants`` merchants, one endpoint each), then runs rotating rounds of three cases:

* ``instant``: the endpoints answer at once;
* ``slow``: they answer after ``--delay`` seconds (500 ms);
* ``slow + hang``: the same, while one more merchant's endpoint holds every request open
  (longer than ``WEBHOOK_TIMEOUT_SECONDS``) and has ``--hang-events`` events due first.

A round writes ``--events`` events, round robin over the merchants, in one transaction, so
their tasks are enqueued together on commit as the outbox does (``webhooks.outbox``), and
waits until the receiver has every one. Printed per model and case: deliveries per second
(events / time from the commit to the last arrival) and per worker process; the peak of
requests the receiver held at once; the peak of the worker's database connections
(``pg_stat_activity``, its ``application_name``, sampled every 50 ms); the worker's RSS and
its CPU milliseconds per delivery. Then the ratios: slow / min(instant, the cap that the
per-endpoint concurrency sets: merchants x ``WEBHOOK_ENDPOINT_CONCURRENCY`` / delay), and
slow + hang / slow. Asserted: every round delivered every event it wrote (> 0), each counted at
the receiver and ``delivered`` in the database. Worker models:

* ``threads``: the Procfile's ``webhooks`` (Celery's threads pool, the webhook queues only,
  connections from the psycopg pool); ``threads:64`` with 64 threads;
* ``prefork``: the Procfile's ``worker`` consuming every queue, as before ADR 0050 (two
  processes); ``prefork:8`` with eight.

Redis: ``REDIS_URL`` when set (the broker on database +1 of it), else the embedded Redis.
"""

# ruff: noqa: S603 - the benchmark runs the Procfile's commands

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from bench.common import (
    RESULTS,
    ROOT,
    Database,
    database_from_env,
    django_env,
    machine_context,
    prepare_database,
    print_table,
    procfile_command,
    ratio,
    timestamp,
    write_results,
)

CASES = ("instant", "slow", "slow + hang")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", nargs="+", default=["threads", "prefork"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--events", type=int, default=240, help="per round")
    parser.add_argument("--merchants", type=int, default=32, help="one endpoint each")
    parser.add_argument("--delay", type=float, default=0.5, help="the slow endpoints' answer")
    parser.add_argument("--hang-events", type=int, default=8)
    parser.add_argument("--database", default="payments_bench_webhook_delivery")
    return parser.parse_args(argv)


def worker_command(model: str) -> tuple[list[str], int]:
    """The command of ``model`` (``threads[:N]`` or ``prefork[:N]``) and its processes that run
    tasks."""
    kind, _, count = model.partition(":")
    if kind == "threads":
        command = procfile_command("webhooks")
        if count:
            command[command.index("--concurrency") + 1] = count
        return command, 1
    if kind == "prefork":  # consuming every queue, as the Procfile's worker did before
        command = [w if w != "WORKER_QUEUES=tasks" else "WORKER_QUEUES=all"
                   for w in procfile_command("worker")]  # fmt: skip
        if count:
            command[command.index("--concurrency") + 1] = count
        return command, int(command[command.index("--concurrency") + 1])
    raise SystemExit(f"unknown worker model {model!r}: threads[:N] or prefork[:N]")


class Receiver:
    """Every endpoint: ``/m/<n>`` answers after ``delay`` seconds, ``/hang/<n>`` holds the
    request for ``hang_seconds``; the first arrival of each webhook-id, and the peak of
    requests held at once."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.hang_seconds = 30.0
        self.arrived: dict[str, float] = {}
        self.held = 0
        self.peak = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver.lock:
                    receiver.held += 1
                    receiver.peak = max(receiver.peak, receiver.held)
                try:
                    hang = self.path.startswith("/hang/")
                    time.sleep(receiver.hang_seconds if hang else receiver.delay)
                    with receiver.lock:
                        receiver.arrived.setdefault(self.headers["webhook-id"], time.monotonic())
                    self.send_response(200)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                except OSError:  # the worker gave up on a hanging request (its timeout)
                    self.close_connection = True
                finally:
                    with receiver.lock:
                        receiver.held -= 1

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.request_queue_size = 256
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = self.held

    def count(self, event_ids: set[str]) -> tuple[int, float]:
        """How many of ``event_ids`` arrived, and the last arrival (monotonic)."""
        with self.lock:
            times = [self.arrived[i] for i in event_ids if i in self.arrived]
        return len(times), max(times, default=0.0)


def _django(db: Database, env: dict[str, str]) -> None:
    os.environ.update(django_env(db, **env))
    import django

    django.setup()


def _merchants(count: int, receiver: Receiver, prefix: str) -> list[int]:
    from merchants.models import Merchant
    from webhooks.services import endpoint_create

    ids = []
    for n in range(count):
        merchant = Merchant.objects.create(
            name=f"bench-webhooks-{prefix}-{n}-{uuid.uuid4().hex[:6]}"
        )
        endpoint_create(merchant=merchant, url=f"{receiver.url}/{prefix}/{n}", enabled_events=["*"])
        ids.append(merchant.pk)
    return ids


def _events(merchant_ids: list[int], count: int) -> list[str]:
    """``count`` events round robin over the merchants, in one transaction: their tasks are
    enqueued together when it commits."""
    from django.db import transaction
    from django.utils import timezone

    from webhooks.outbox import event_record

    with transaction.atomic():
        return [
            event_record(
                merchant_id=merchant_ids[n % len(merchant_ids)], event_type="payment.succeeded",
                object_id=f"pay_{uuid.uuid4().hex[:16]}", obj={"object": "payment"},
                now=timezone.now(),
            ).id
            for n in range(count)
        ]  # fmt: skip


def _group_pids(leader: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == leader:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _cpu_and_rss(leader: int) -> tuple[float, float]:
    """CPU seconds so far and RSS (MB) of the worker's process group."""
    ticks, rss = 0, 0
    for pid in _group_pids(leader):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])
            rss += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
    return ticks / os.sysconf("SC_CLK_TCK"), rss / 1e6


@contextmanager
def _process(command: list[str], env: dict[str, str], log_name: str) -> Iterator[int]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = (RESULTS / f"{log_name}-{timestamp()}.log").open("wb")
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()


class Sampler:
    """The peak of the worker's connections to the database, sampled every 50 ms."""

    def __init__(self, db: Database, application_name: str) -> None:
        self.db, self.name = db, application_name
        self.peak = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.db.conninfo(), autocommit=True) as conn:
            while not self.stop.wait(0.05):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    [self.name],
                ).fetchone()
                self.peak = max(self.peak, int(row[0]))

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _delivered_in_database(event_ids: list[str]) -> int:
    from webhooks.models import Delivery

    return Delivery.objects.filter(event_id__in=event_ids, status="delivered").count()


def one_round(case: str, leader: int, db: Database, app_name: str, ctx: dict[str, Any]) -> dict:
    receiver: Receiver = ctx["receiver"]
    args = ctx["args"]
    receiver.delay = 0.0 if case == "instant" else args.delay
    if case == "slow + hang":
        hanging = _merchants(1, receiver, "hang")
        _events(hanging, args.hang_events)  # due first, on the hanging endpoint's slots
    receiver.reset_peak()
    cpu_before, _ = _cpu_and_rss(leader)
    with Sampler(db, app_name) as sampler:
        started = time.monotonic()
        event_ids = _events(ctx["merchant_ids"], args.events)
        wanted = set(event_ids)
        deadline = started + 600
        while (arrived := receiver.count(wanted))[0] < len(wanted):
            if time.monotonic() > deadline:
                raise SystemExit(f"{case}: {arrived[0]} of {len(wanted)} events arrived in 600 s")
            time.sleep(0.02)
    cpu_after, rss = _cpu_and_rss(leader)
    elapsed = arrived[1] - started
    while (delivered := _delivered_in_database(event_ids)) < len(event_ids):
        if time.monotonic() > deadline:  # each is recorded a moment after its answer
            raise SystemExit(f"{case}: {delivered} of {len(event_ids)} recorded delivered")
        time.sleep(0.05)
    assert delivered == len(event_ids) > 0, (case, delivered, len(event_ids))
    if case == "slow + hang":
        from webhooks.models import WebhookEndpoint

        # Out of the next rounds' way: its deliveries wait while it is disabled.
        WebhookEndpoint.objects.filter(merchant_id__in=hanging).update(status="disabled")
    return {
        "case": case, "events": len(event_ids), "delivered": delivered, "seconds": elapsed,
        "per_second": len(event_ids) / elapsed, "peak_in_flight": receiver.peak,
        "peak_connections": sampler.peak, "rss_mb": rss,
        "cpu_ms_per_delivery": (cpu_after - cpu_before) * 1e3 / len(event_ids),
    }  # fmt: skip


def run_model(model: str, db: Database, env: dict[str, str], ctx: dict[str, Any]) -> dict:
    command, processes = worker_command(model)
    app_name = f"bench-webhooks-{model.replace(':', '-')}"
    worker_env = {**django_env(db, **env), "PGAPPNAME": app_name}
    beat = procfile_command("beat")
    schedule = RESULTS / f"webhook-delivery-beat-{uuid.uuid4().hex[:6]}"
    beat = [*beat[: beat.index("--schedule")], "--schedule", str(schedule)]
    rounds = []
    with (
        _process(command, worker_env, f"webhook-delivery-{app_name}") as leader,
        _process(beat, django_env(db, **env), "webhook-delivery-beat"),
    ):
        time.sleep(5)  # the worker's start-up
        for number in range(ctx["args"].rounds):
            for case in CASES:
                result = one_round(case, leader, db, app_name, ctx)
                result["round"] = number + 1
                rounds.append(result)
                print(f"  {model} round {number + 1} {case}: {result['per_second']:.1f}/s, "
                      f"in flight {result['peak_in_flight']}, "
                      f"connections {result['peak_connections']}", flush=True)  # fmt: skip
    return {"model": model, "processes": processes, "rounds": rounds}


def summary(result: dict, args: argparse.Namespace, endpoint_cap: int) -> dict[str, Any]:
    """Per case: deliveries/s over all its rounds (events / seconds), and the peaks; the
    ratios of the module's docstring."""
    cases: dict[str, dict[str, Any]] = {}
    for case in CASES:
        rounds = [r for r in result["rounds"] if r["case"] == case]
        rate = sum(r["events"] for r in rounds) / sum(r["seconds"] for r in rounds)
        cases[case] = {
            "per_second": rate, "per_process": rate / result["processes"],
            "peak_in_flight": max(r["peak_in_flight"] for r in rounds),
            "peak_connections": max(r["peak_connections"] for r in rounds),
            "rss_mb": max(r["rss_mb"] for r in rounds),
            "cpu_ms_per_delivery": sum(r["cpu_ms_per_delivery"] for r in rounds) / len(rounds),
            "delivered": sum(r["delivered"] for r in rounds),
        }  # fmt: skip
    cap = args.merchants * endpoint_cap / args.delay
    instant, slow = cases["instant"]["per_second"], cases["slow"]["per_second"]
    return {
        "cases": cases, "cap_per_second": cap,
        "slow_over_instant_capped": ratio(slow, min(instant, cap)),
        "hang_over_slow": ratio(cases["slow + hang"]["per_second"], slow),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    db = database_from_env(args.database)
    prepare_database(db)
    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute(
            "TRUNCATE webhooks_deliveryattempt, webhooks_delivery, webhooks_operatoraction, "
            "webhooks_event, webhooks_webhookendpoint"
        )
    env: dict[str, str] = {
        "CELERY_DEFAULT_QUEUE": f"bench-webhook-delivery-{uuid.uuid4().hex[:8]}",
        "WEBHOOK_STATE_NAMESPACE": f"bench-webhook-delivery-{uuid.uuid4().hex[:8]}",
        "WEBHOOK_ALLOW_LOCAL_URLS": "true",
    }
    if os.environ.get("REDIS_URL"):
        base, _, number = os.environ["REDIS_URL"].rpartition("/")
        env["CELERY_BROKER_URL"] = f"{base}/{(int(number or 0) + 1) % 16}"
        env["ACQUIRER_STATE_REDIS_URL"] = os.environ["REDIS_URL"]
    _django(db, env)
    from django.conf import settings

    receiver = Receiver()
    receiver.hang_seconds = settings.WEBHOOK_TIMEOUT_SECONDS + 5
    ctx = {"args": args, "receiver": receiver,
           "merchant_ids": _merchants(args.merchants, receiver, "m")}  # fmt: skip
    results: dict[str, Any] = {"machine": machine_context(), "args": vars(args), "models": []}
    for model in args.workers:
        print(f"== {model}", flush=True)
        result = run_model(model, db, env, ctx)
        result["summary"] = summary(result, args, settings.WEBHOOK_ENDPOINT_CONCURRENCY)
        results["models"].append(result)
    results["machine_after"] = machine_context()
    report(results)
    path = write_results("webhook-delivery", results)
    print(f"\nresults: {path}")
    return 0


def report(results: dict) -> None:
    print(f"\nload average (1 min): {results['machine']['loadavg_1m']:.1f} at the start, "
          f"{results['machine_after']['loadavg_1m']:.1f} at the end")  # fmt: skip
    rows = []
    for model in results["models"]:
        for case, c in model["summary"]["cases"].items():
            rows.append([
                model["model"], model["processes"], case, c["per_second"], c["per_process"],
                c["delivered"], c["peak_in_flight"], c["peak_connections"], c["rss_mb"],
                c["cpu_ms_per_delivery"],
            ])  # fmt: skip
    print("\nWebhook deliveries (events delivered / time from the commit to the last arrival)")
    print_table(
        ["worker", "processes", "case", "per s", "per s per process", "delivered",
         "peak in flight", "peak db connections", "RSS MB", "CPU ms / delivery"],
        rows,
    )  # fmt: skip
    for model in results["models"]:
        s = model["summary"]
        print(f"{model['model']}: slow / min(instant, cap {s['cap_per_second']:.0f}/s) = "
              f"{s['slow_over_instant_capped']:.2f} (goal >= 0.8); "
              f"slow + hang / slow = {s['hang_over_slow']:.2f}")  # fmt: skip
    print(json.dumps({m["model"]: m["summary"]["slow_over_instant_capped"]
                      for m in results["models"]}))  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
