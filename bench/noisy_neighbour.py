"""Benchmark: a well-behaved merchant's latency beside a noisy neighbour, with and without the
per-merchant in-flight cap (payments/api/limits.py, ADR 0018).

One command (docs/benchmarks.md, "Noisy neighbour")::

    .venv/bin/python bench/noisy_neighbour.py                 # 10 s per phase
    .venv/bin/python bench/noisy_neighbour.py --duration 5 --noisy-clients 24

It starts the sandbox and gunicorn as the Procfile does (2 workers x 128 threads), twice: with the
default cap (``MERCHANT_CONCURRENT_PAYMENTS``, 64: the settings' default unless ``--cap``) and
without one (``0``); the request rate limit is off in both, so only the cap differs. The noisy
merchant's clients (320) outnumber the web tier's threads (256), as a flood must. Each stack runs
two phases of ``--duration`` seconds: **quiet**, the good merchant alone (``--good-clients`` clients
in a loop of ``tok_visa`` payments), and **noisy**, the same while a second merchant floods the
service with ``--noisy-clients`` clients sending slow payments (``tok_slow_<ms>``, ``--slow-ms``;
each answer, a 201 or a 429, is followed at once by the next request). Reported per stack: the good
merchant's p50 and p99 in both phases, the noisy/quiet p99 ratio, and the noisy merchant's answers.
The slots live in the acquirer state store: ``REDIS_URL`` when set, else the embedded Redis.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    PAYMENT_BODY,
    database_from_env,
    issue_api_key,
    machine_context,
    percentile,
    post_payment,
    prepare_database,
    print_table,
    ratio,
    service_stack,
    timestamp,
    write_results,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per phase")
    parser.add_argument("--good-clients", type=int, default=2)
    parser.add_argument("--noisy-clients", type=int, default=320)
    parser.add_argument("--slow-ms", type=int, default=2000, help="the noisy payments' delay")
    parser.add_argument(
        "--cap", type=int, default=None, help="MERCHANT_CONCURRENT_PAYMENTS (default: settings')"
    )
    parser.add_argument("--database", default=None, help="benchmark database name")
    return parser.parse_args(argv)


def load(
    url: str, api_key: str, body: dict, clients: int, stop: threading.Event
) -> tuple[list[float], Counter]:
    """``clients`` loops of payments until ``stop``; returns the latencies (ms) of the answers
    and the count of each status."""
    latencies: list[float] = []
    statuses: Counter = Counter()
    lock = threading.Lock()

    def loop() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    status = post_payment(client, url, api_key, uuid.uuid4().hex, body).status_code
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                elapsed = (time.perf_counter() - started) * 1000
                with lock:
                    latencies.append(elapsed)
                    statuses[status] += 1

    with ThreadPoolExecutor(clients) as pool:
        for _ in range(clients):
            pool.submit(loop)
        stop.wait()
    return latencies, statuses


def phase(url: str, good_key: str, noisy_key: str | None, args: argparse.Namespace) -> dict:
    """One phase: the good merchant measured for ``duration`` s, the noisy one flooding if
    ``noisy_key`` is given (started first, so the flood is on before the measurement)."""
    stop_noisy, stop_good = threading.Event(), threading.Event()
    noisy_body = {**PAYMENT_BODY, "payment_method": f"tok_slow_{args.slow_ms}"}
    with ThreadPoolExecutor(2) as runner:
        noisy = None
        if noisy_key is not None:
            noisy = runner.submit(load, url, noisy_key, noisy_body, args.noisy_clients, stop_noisy)
            time.sleep(1.0)
        good = runner.submit(load, url, good_key, PAYMENT_BODY, args.good_clients, stop_good)
        time.sleep(args.duration)
        stop_good.set()
        latencies, statuses = good.result()
        stop_noisy.set()
        noisy_statuses = noisy.result()[1] if noisy is not None else Counter()
    return {
        "requests": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "statuses": {str(k): v for k, v in statuses.items()},
        "noisy_statuses": {str(k): v for k, v in noisy_statuses.items()},
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = timestamp()
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    good_key, noisy_key = issue_api_key(db, "good-merchant"), issue_api_key(db, "noisy-merchant")
    state = {"ACQUIRER_STATE_NAMESPACE": f"bench:noisy:{stamp}"}
    if os.environ.get("REDIS_URL"):
        state["ACQUIRER_STATE_REDIS_URL"] = os.environ["REDIS_URL"]
    results = {}
    for label, cap in (("with the cap", args.cap), ("without a cap", 0)):
        overrides = {**state, "MERCHANT_RATE_LIMIT_REQUESTS": "0",
                     "MERCHANT_CONCURRENT_PAYMENTS": None if cap is None else str(cap)}  # fmt: skip
        name = f"noisy-{'default' if cap is None else cap}"
        with service_stack(db, name, **overrides) as (_sandbox, server):
            url = f"{server.url}/payments"
            with httpx.Client(timeout=10) as client:  # warm both workers' connections
                for _ in range(8):
                    post_payment(client, url, good_key, uuid.uuid4().hex)
            quiet = phase(url, good_key, None, args)
            noisy = phase(url, good_key, noisy_key, args)
        results[label] = {"cap": cap, "quiet": quiet, "noisy": noisy,
                          "ratio_p99": ratio(noisy["p99_ms"], quiet["p99_ms"])}  # fmt: skip
        print(f"{label}: quiet {quiet}\n{label}: noisy {noisy}")
    print()
    print_table(
        ["stack", "quiet p50 ms", "quiet p99 ms", "noisy p50 ms", "noisy p99 ms",
         "noisy/quiet p99", "noisy merchant's answers"],
        [(label, r["quiet"]["p50_ms"], r["quiet"]["p99_ms"], r["noisy"]["p50_ms"],
          r["noisy"]["p99_ms"], r["ratio_p99"], r["noisy"]["noisy_statuses"])
         for label, r in results.items()],
    )  # fmt: skip
    path = write_results(
        "noisy_neighbour",
        {"machine": machine_context(), "settings": vars(args), "results": results},
    )
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
