"""Benchmark: gateway_client against a client assembled from tenacity + pybreaker + httpx.

One command (docs/benchmarks.md, "Acquirer client: gateway_client and tenacity + pybreaker")::

    .venv/bin/python bench/client_compare.py                  # outage runs + healthy overhead
    .venv/bin/python bench/client_compare.py --rate 10 --outage-seconds 4 --after-seconds 4 \
        --calls 200

Both parts talk to a real sandbox acquirer process over loopback.

**Outage.** For each client, on a freshly reset sandbox: the acquirer answers every charge 503
(no Retry-After) for ``--outage-seconds``, then recovers; logical payments start at ``--rate``
per second (each on its own thread, with its own acquirer idempotency key) for the outage and
``--after-seconds`` more. Counted from the sandbox (``requests_by_idempotency_key``): requests
sent per logical payment during the outage; and, for payments started after the recovery, the
share that succeeded (an open breaker keeps failing them). Clients:

* ``gateway_client``: ``AcquirerClient`` as shipped: its default policy, retry budget and
  circuit breaker (one process, in-memory state);
* ``tenacity+pybreaker``: ``bench/peers/tenacity_client.py`` with the libraries' documented
  settings (3 attempts, ``wait_random_exponential(1, 60)``, ``CircuitBreaker(5, 60)``);
* ``tenacity``: the same without the breaker, to tell the breaker's part from tenacity's.

**Healthy overhead.** ``--calls`` sequential authorisations per client against the healthy
sandbox, in alternating blocks, next to a bare ``httpx.Client.post`` of the same request:
median and p99 time per call, and each client's overhead over the bare POST.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    SANDBOX_API_KEY,
    machine_context,
    median,
    percentile,
    print_table,
    ratio,
    start_sandbox,
    timestamp,
    write_results,
)
from gateway_client import AcquirerClient, AcquirerConfig, AuthorizationRequest

CLIENTS = ("gateway_client", "tenacity+pybreaker", "tenacity")


def make_client(name: str, url: str) -> tuple[Callable[[str, str], object], Callable[[], None]]:
    """(authorize(reference, idempotency_key), close) for client ``name``."""
    if name == "gateway_client":
        client = AcquirerClient(
            AcquirerConfig(base_url=url, api_key=SANDBOX_API_KEY, name="sandbox")
        )

        def authorize(reference: str, key: str) -> object:
            return client.authorize(
                AuthorizationRequest(amount=1999, currency="EUR", payment_method="tok_visa",
                                     payment_reference=reference, idempotency_key=key)
            )  # fmt: skip

        return authorize, client.close
    if name == "httpx":
        http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {SANDBOX_API_KEY}"})

        def post(reference: str, key: str) -> object:
            response = http.post(
                "/charges",
                json={"amount": 1999, "currency": "EUR", "payment_method": "tok_visa",
                      "reference": reference},
                headers={"Idempotency-Key": key},
            )  # fmt: skip
            response.raise_for_status()
            return response.json()

        return post, http.close
    from bench.peers.tenacity_client import PeerClient  # the bench extra: tenacity, pybreaker

    peer = PeerClient(url, SANDBOX_API_KEY, use_breaker=(name == "tenacity+pybreaker"))

    def peer_authorize(reference: str, key: str) -> object:
        return peer.authorize(amount=1999, currency="EUR", payment_method="tok_visa",
                              reference=reference, idempotency_key=key)  # fmt: skip

    return peer_authorize, peer.close


def schedule(rate: float, seconds: float) -> list[float]:
    """Start offsets (seconds) of the logical payments: ``rate`` per second for ``seconds``."""
    return [i / rate for i in range(int(rate * seconds))]


def outage_run(sandbox, name: str, args: argparse.Namespace, stamp: str) -> dict:
    sandbox.reset()
    sandbox.clear_conditions()
    authorize, close = make_client(name, sandbox.url)
    starts = schedule(args.rate, args.outage_seconds + args.after_seconds)
    records: list[dict] = []
    lock = threading.Lock()
    sandbox.set_condition("outage", duration_seconds=args.outage_seconds, failure=503)
    t0 = time.monotonic()

    def payment(i: int) -> None:
        delay = t0 + starts[i] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        key = f"cmp-{stamp}-{name}-{i}"
        began = time.monotonic()
        try:
            authorize(f"ref-{key}", key)
            outcome = "succeeded"
        except Exception as exc:  # noqa: BLE001 - every client has its own error tree
            outcome = type(exc).__name__
        with lock:
            records.append({"i": i, "key": key, "start": began - t0, "outcome": outcome,
                            "seconds": time.monotonic() - began})  # fmt: skip

    try:
        with ThreadPoolExecutor(max_workers=200) as executor:
            list(executor.map(payment, range(len(starts))))
    finally:
        close()
    sent = sandbox.stats()["requests_by_idempotency_key"]
    during = [r for r in records if r["start"] < args.outage_seconds]
    after = [r for r in records if r["start"] >= args.outage_seconds + 0.5]
    requests_during = sum(sent.get(r["key"], 0) for r in during)
    first_ok = min((r["start"] for r in after if r["outcome"] == "succeeded"), default=None)
    return {
        "client": name,
        "payments_during_outage": len(during),
        "requests_during_outage": requests_during,
        "requests_per_payment_during_outage": ratio(requests_during, len(during)),
        "outcomes_during_outage": dict(Counter(r["outcome"] for r in during)),
        "median_answer_seconds_during_outage": median(r["seconds"] for r in during),
        "payments_after_recovery": len(after),
        "succeeded_after_recovery": sum(r["outcome"] == "succeeded" for r in after),
        "outcomes_after_recovery": dict(Counter(r["outcome"] for r in after)),
        "first_success_after_recovery_seconds": (
            None if first_ok is None else first_ok - args.outage_seconds
        ),
        "requests_total": sum(sent.get(r["key"], 0) for r in records),
    }


def healthy_overhead(sandbox, args: argparse.Namespace, stamp: str) -> dict:
    sandbox.reset()
    sandbox.clear_conditions()
    names = ("httpx", *CLIENTS)
    clients = {name: make_client(name, sandbox.url) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    block = max(1, min(200, args.calls))
    try:
        for name in names:  # warm-up: connections, imports, first-call costs
            for i in range(20):
                clients[name][0](f"w-{name}-{i}", f"warm-{stamp}-{name}-{i}")
        done = 0
        while done < args.calls:
            for name in names:
                authorize = clients[name][0]
                for i in range(done, done + block):
                    key = f"ok-{stamp}-{name}-{i}"
                    began = time.perf_counter()
                    authorize(f"ref-{key}", key)
                    times[name].append(time.perf_counter() - began)
            done += block
    finally:
        for _, close in clients.values():
            close()
    base = median(times["httpx"])
    return {
        name: {
            "calls": len(t),
            "median_us": 1e6 * median(t),
            "p99_us": 1e6 * percentile(t, 99),
            "overhead_us": 1e6 * (median(t) - base),
            "ratio_to_httpx": ratio(median(t), base),
        }
        for name, t in times.items()
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10, help="logical payments per second")
    parser.add_argument("--outage-seconds", type=float, default=10)
    parser.add_argument("--after-seconds", type=float, default=35)
    parser.add_argument("--calls", type=int, default=2000, help="healthy calls per client")
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    return parser.parse_args(argv)


def quiet_gateway_logs() -> None:
    """The client's per-attempt log lines off the terminal (Python's default level is
    WARNING, so healthy calls log nothing either way; the service logs them at INFO)."""
    logger = logging.getLogger("gateway_client")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_gateway_logs()
    stamp = timestamp()
    outages: list[dict] = []
    with start_sandbox(["--max-tracked-keys", "200000"]) as sandbox:
        for name in args.clients:
            result = outage_run(sandbox, name, args, stamp)
            outages.append(result)
            print(
                f"{name:20s} outage: {result['requests_per_payment_during_outage']:.2f} requests "
                f"per payment {result['outcomes_during_outage']}; after recovery "
                f"{result['succeeded_after_recovery']}/{result['payments_after_recovery']} "
                "succeeded"
            )
        overhead = healthy_overhead(sandbox, args, stamp) if args.calls > 0 else {}
    print()
    print_table(
        ["client", "requests per payment in the outage", "median answer s (outage)",
         "succeeded after recovery", "first success after recovery, s"],
        [
            (r["client"], r["requests_per_payment_during_outage"],
             r["median_answer_seconds_during_outage"],
             f"{r['succeeded_after_recovery']}/{r['payments_after_recovery']}",
             "none" if r["first_success_after_recovery_seconds"] is None
             else r["first_success_after_recovery_seconds"])
            for r in outages
        ],
    )  # fmt: skip
    if overhead:
        print()
        print_table(
            ["client (healthy sandbox)", "median us/call", "p99 us/call", "overhead us",
             "ratio to bare httpx"],
            [(n, o["median_us"], o["p99_us"], o["overhead_us"], o["ratio_to_httpx"])
             for n, o in overhead.items()],
        )  # fmt: skip
    path = write_results(
        "client_compare",
        {"machine": machine_context(), "settings": vars(args), "outage": outages,
         "healthy": overhead},
    )  # fmt: skip
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
