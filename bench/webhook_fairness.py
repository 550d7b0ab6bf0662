"""Benchmark: webhooks out of the payment's transaction, and a merchant's events beside a
neighbour with slow endpoints (issue 26, ADR 0042).

One command (docs/benchmarks.md, "Webhook fan-out and fairness")::

    make bench-webhooks
    .venv/bin/python bench/webhook_fairness.py --payments 40 --slow-seconds 2

It starts the sandbox, gunicorn, the Celery worker and beat as the Procfile does (the worker's
two processes, its three queues), and a receiver in this process (real HTTP on loopback),
then measures, in one run:

1. **Payment latency** of ``--payments`` sequential ``POST /payments`` of one merchant with 0
   webhook endpoints, then with the cap of 16 (``WEBHOOK_MAX_ENDPOINTS``): the phase 2
   transaction writes one outbox row either way; the ratio 16 / 0 is printed. Work asserted:
   every payment 201, and payments x 16 deliveries made.
2. **A neighbour's delay**: merchant B (one endpoint that answers at once) makes ``--events``
   payments, one every ``--spacing`` seconds; each one's delay is from its ``201`` to its
   event's arrival at B's receiver. Alone first, then while merchant A (16 endpoints, each
   answering after ``--slow-seconds``) has just made ``--noisy-payments`` payments (a backlog
   of 16 x that many slow deliveries), and again with the per-merchant cap lifted
   (``WEBHOOK_MERCHANT_CONCURRENCY=1000``, round robin kept: the older FIFO claim no longer
   exists to run). The ratios to B alone are printed. Work asserted: every B event delivered,
   and how many of A's deliveries were made meanwhile.

Redis: ``REDIS_URL`` when set (the broker on database +1 of it), else the embedded Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    PAYMENT_BODY,
    RESULTS,
    count_rows,
    database_from_env,
    issue_api_key,
    machine_context,
    percentile,
    prepare_database,
    print_table,
    procfile_command,
    ratio,
    service_stack,
    timestamp,
    write_results,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=40, help="per latency phase")
    parser.add_argument("--events", type=int, default=10, help="the neighbour's, per phase")
    parser.add_argument("--spacing", type=float, default=0.5, help="seconds between them")
    parser.add_argument("--noisy-payments", type=int, default=10)
    parser.add_argument("--slow-seconds", type=float, default=2.0, help="A's endpoints' answer")
    parser.add_argument("--database", default="payments_bench_webhooks")
    return parser.parse_args(argv)


class Receiver:
    """Every merchant's endpoints: ``/slow/...`` answers after ``slow_seconds``, anything else
    at once; the arrival time (monotonic) of each payment id's first delivery per path
    prefix."""

    def __init__(self, slow_seconds: float) -> None:
        self.slow_seconds = slow_seconds
        self.arrivals: dict[tuple[str, str], float] = {}
        self.count: dict[str, int] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                prefix = self.path.split("/")[1]
                object_id = json.loads(body)["data"]["object"]["id"]
                with receiver.lock:
                    receiver.arrivals.setdefault((prefix, object_id), time.monotonic())
                    receiver.count[prefix] = receiver.count.get(prefix, 0) + 1
                if prefix == "slow":
                    time.sleep(receiver.slow_seconds)
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arrived(self, prefix: str, object_id: str) -> float | None:
        with self.lock:
            return self.arrivals.get((prefix, object_id))


def _pay(client: httpx.Client, key: str) -> tuple[str, float]:
    started = time.perf_counter()
    answer = client.post(
        "/payments", json=PAYMENT_BODY, headers={"idempotency-key": uuid.uuid4().hex}
    )
    elapsed = time.perf_counter() - started
    if answer.status_code != 201:
        raise SystemExit(f"a payment answered {answer.status_code}: {answer.text[:200]}")
    return answer.json()["id"], elapsed


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=30)


def _endpoints(client: httpx.Client, urls: list[str]) -> None:
    for url in urls:
        answer = client.post("/webhook_endpoints", json={"url": url, "enabled_events": ["*"]})
        if answer.status_code != 201:
            raise SystemExit(f"endpoint refused: {answer.status_code} {answer.text[:200]}")


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextmanager
def celery(env: dict[str, str], tag: str) -> Iterator[None]:
    """The Procfile's worker and beat with ``env``; logs in bench/results/."""
    import subprocess

    RESULTS.mkdir(parents=True, exist_ok=True)
    processes = []
    for name in ("worker", "beat"):
        command = procfile_command(name)
        if name == "beat":
            schedule = RESULTS / f"webhook-fairness-beat-{tag}"
            command = [*command[: command.index("--schedule")], "--schedule", str(schedule)]
        log = (RESULTS / f"webhook-fairness-{name}-{tag}-{timestamp()}.log").open("wb")
        root = Path(__file__).resolve().parent.parent
        started = subprocess.Popen(  # noqa: S603 (the Procfile's command)
            command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        processes.append(started)
    try:
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def neighbour_delays(
    url: str, key: str, receiver: Receiver, args: argparse.Namespace
) -> list[float]:
    """B's payments one every ``spacing`` s; each one's 201-to-arrival delay (seconds)."""
    sent: list[tuple[str, float]] = []
    with _client(url, key) as client:
        for _ in range(args.events):
            payment_id, _ = _pay(client, key)
            sent.append((payment_id, time.monotonic()))
            time.sleep(args.spacing)
    delays = []
    for payment_id, at in sent:
        _wait(lambda p=payment_id: receiver.arrived("quiet", p) is not None, 300, "B's event")
        delays.append(receiver.arrived("quiet", payment_id) - at)
    return delays


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    db = database_from_env(args.database)
    prepare_database(db)
    count_rows(db, "SELECT 1")
    import psycopg

    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute(
            "TRUNCATE webhooks_deliveryattempt, webhooks_delivery, webhooks_operatoraction, "
            "webhooks_event, webhooks_webhookendpoint"
        )
    keys = {name: issue_api_key(db, f"bench-webhooks-{name}") for name in ("pay", "a", "b")}
    receiver = Receiver(args.slow_seconds)
    env: dict[str, str] = {"CELERY_DEFAULT_QUEUE": f"bench-webhooks-{uuid.uuid4().hex[:8]}"}
    if os.environ.get("REDIS_URL"):
        base, _, number = os.environ["REDIS_URL"].rpartition("/")
        env["CELERY_BROKER_URL"] = f"{base}/{(int(number or 0) + 1) % 16}"
    results: dict = {"machine": machine_context(), "args": vars(args)}
    with service_stack(db, "webhook-fairness", **env) as (_, server):
        worker_env = {**server.env, **env}
        with celery(worker_env, "capped"):
            time.sleep(3)  # the worker's start-up
            # 1. Payment latency, 0 and 16 endpoints.
            latencies: dict[int, list[float]] = {}
            with _client(server.url, keys["pay"]) as client:
                for n in (0, 16):
                    if n:
                        _endpoints(client, [f"{receiver.url}/pay/{i}" for i in range(n)])
                    _pay(client, keys["pay"])  # warm
                    latencies[n] = [_pay(client, keys["pay"])[1] for _ in range(args.payments)]
            expected = (args.payments + 1) * 16
            _wait(lambda: receiver.count.get("pay", 0) >= expected, 300, "the 16 endpoints")
            results["latency"] = {
                n: {"p50_ms": percentile(v, 50) * 1e3, "p99_ms": percentile(v, 99) * 1e3}
                for n, v in latencies.items()
            }
            results["deliveries_to_16"] = receiver.count["pay"]
            # 2. B alone, then beside A's backlog.
            with _client(server.url, keys["b"]) as client:
                _endpoints(client, [f"{receiver.url}/quiet/0"])
            with _client(server.url, keys["a"]) as client:
                _endpoints(client, [f"{receiver.url}/slow/{i}" for i in range(16)])
            results["alone"] = neighbour_delays(server.url, keys["b"], receiver, args)
            results["beside_a"] = _beside(server.url, keys, receiver, args)
        with celery({**worker_env, "WEBHOOK_MERCHANT_CONCURRENCY": "1000"}, "uncapped"):
            time.sleep(3)
            _wait(lambda: _a_pending(db) == 0, 600, "A's backlog to drain")
            results["beside_a_uncapped"] = _beside(server.url, keys, receiver, args)
    _report(results)
    path = write_results("webhook-fairness", results)
    print(f"\nresults: {path}")
    return 0


def _a_pending(db) -> int:
    return count_rows(
        db,
        "SELECT count(*) FROM webhooks_delivery d JOIN webhooks_webhookendpoint e "
        "ON e.id = d.endpoint_id JOIN merchants_merchant m ON m.id = e.merchant_id "
        "WHERE d.status = 'pending' AND m.name = 'bench-webhooks-a'",
    )


def _beside(url: str, keys: dict[str, str], receiver: Receiver, args) -> dict:
    """A's burst of payments, then B's events; B's delays and A's deliveries meanwhile."""
    with _client(url, keys["a"]) as client:
        for _ in range(args.noisy_payments):
            _pay(client, keys["a"])
    before = receiver.count.get("slow", 0)
    delays = neighbour_delays(url, keys["b"], receiver, args)
    return {"delays": delays, "a_deliveries_meanwhile": receiver.count.get("slow", 0) - before}


def _report(results: dict) -> None:
    latency = results["latency"]
    print("\nPayment latency (sequential POST /payments, ms)")
    print_table(
        ["endpoints", "p50", "p99"],
        [[n, latency[n]["p50_ms"], latency[n]["p99_ms"]] for n in (0, 16)],
    )
    print(
        f"ratio 16 / 0 endpoints: p50 {ratio(latency[16]['p50_ms'], latency[0]['p50_ms']):.2f}, "
        f"p99 {ratio(latency[16]['p99_ms'], latency[0]['p99_ms']):.2f}; "
        f"deliveries made to the 16: {results['deliveries_to_16']}"
    )
    alone = results["alone"]
    rows = [["B alone", percentile(alone, 50), max(alone), "-", "-"]]
    for label, key in (
        ("beside A", "beside_a"),
        ("beside A, no merchant cap", "beside_a_uncapped"),
    ):
        delays = results[key]["delays"]
        rows.append([
            label, percentile(delays, 50), max(delays),
            ratio(percentile(delays, 50), percentile(alone, 50)),
            results[key]["a_deliveries_meanwhile"],
        ])  # fmt: skip
    print("\nMerchant B's event delay, 201 to arrival (s)")
    print_table(["phase", "p50", "max", "p50 / alone", "A's deliveries meanwhile"], rows)


if __name__ == "__main__":
    raise SystemExit(main())
