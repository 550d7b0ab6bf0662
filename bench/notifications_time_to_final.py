"""Benchmark: the time from an ambiguous timeout's 202 to the payment's final status, with the
acquirer's notifications against polling (reconciliation) alone (ADR 0046).

One command (docs/benchmarks.md, "Notifications: time to final")::

    .venv/bin/python bench/notifications_time_to_final.py             # 20 payments per mode
    .venv/bin/python bench/notifications_time_to_final.py --payments 5 --latency-ms 0

It starts the sandbox (``--hang-seconds 2``; a realistic acquirer latency, the ``latency``
condition, ``--latency-ms`` mean), gunicorn and a Celery worker as the Procfile does, with one
attempt per request and a 0.5 s read timeout, so ``tok_timeout_after_commit`` payments answer
``202 processing`` although the sandbox charged them. Then, per mode, one payment at a time:
the 202, and ``GET /payments/{id}`` every 20 ms until it is final.

- **polling**: the sandbox sends no notification; the reconciliation task enqueued after the
  202 (``RECONCILIATION_FIRST_CHECK_SECONDS``, 2 s by default) finds the charge.
- **notifications**: the sandbox notifies ``/acquirer_notifications/sandbox`` when it records the
  charge (while our request still waits); the apply task resolves the payment right after our
  phase 2 (the reconciliation task enqueued too, finding it final).

Reported: median and p90 seconds per mode and the ratio polling / notifications (medians), with
how much work was done (payments final, charges at the sandbox, notifications stored).
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    PAYMENT_BODY,
    RESULTS,
    ROOT,
    count_rows,
    database_from_env,
    issue_api_key,
    machine_context,
    median,
    percentile,
    prepare_database,
    print_table,
    procfile_command,
    ratio,
    service_stack,
    timestamp,
    write_results,
)

SECRET = "whsec_" + base64.b64encode(b"bench-notification-secret-32byte").decode()
FINAL = {"succeeded", "declined", "failed", "requires_capture", "canceled"}


def one_payment(client: httpx.Client, url: str, api_key: str, key: str) -> float:
    """Seconds from the 202 of a ``tok_timeout_after_commit`` payment to its final status."""
    body = {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key}
    answer = client.post(f"{url}/payments", json=body, headers=headers)
    if answer.status_code != 202:
        raise SystemExit(f"expected a 202 processing, got {answer.status_code}: {answer.text}")
    accepted = time.monotonic()
    payment_id = answer.json()["id"]
    deadline = accepted + 60
    while time.monotonic() < deadline:
        status = client.get(f"{url}/payments/{payment_id}", headers=headers).json()["status"]
        if status in FINAL:
            return time.monotonic() - accepted
        time.sleep(0.02)
    raise SystemExit(f"payment {payment_id} not final within 60 s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` by default)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=20, help="payments per mode")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="sandbox latency mean")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run both modes and print the ratio; returns the exit status."""
    args = parse_args(argv)
    db = database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    env_overrides = {
        "ACQUIRER_RETRY_MAX_ATTEMPTS": "1",
        "ACQUIRER_READ_TIMEOUT_SECONDS": "0.5",
        "ACQUIRER_WEBHOOK_SECRETS": SECRET,
        # Every payment here times out on purpose: the breaker must not count them against the
        # acquirer (it would open after 20 and refuse the rest).
        "ACQUIRER_BREAKER_MINIMUM_CALLS": "100000",
        "ACQUIRER_STATE_NAMESPACE": f"bench-notifications-{time.time_ns()}",  # no earlier state
    }
    results: dict[str, list[float]] = {}
    with service_stack(
        db, "notifications", sandbox_args=("--hang-seconds", "2"), **env_overrides
    ) as (sandbox, web):
        log = (RESULTS / f"notifications-worker-{timestamp()}.log").open("wb")
        worker = subprocess.Popen(  # noqa: S603 - the Procfile's own command
            procfile_command("worker"), cwd=ROOT, env=web.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            time.sleep(3)  # the worker connects to its broker
            if args.latency_ms:
                sandbox.set_condition(
                    "latency", distribution="normal", mean_ms=args.latency_ms,
                    sd_ms=args.latency_ms / 5, seed=7,
                )  # fmt: skip
            with httpx.Client(timeout=30) as client:
                for mode in ("polling", "notifications"):
                    if mode == "notifications":
                        target = {"url": f"{web.url}/acquirer_notifications/sandbox",
                                  "secrets": [SECRET]}  # fmt: skip
                        client.put(f"{sandbox.url}/_sandbox/notifications", json=target)
                    else:
                        client.delete(f"{sandbox.url}/_sandbox/notifications")
                    results[mode] = [
                        one_payment(client, web.url, api_key, f"ttf-{mode}-{i}-{time.time_ns()}")
                        for i in range(args.payments)
                    ]
                notifier = client.get(f"{sandbox.url}/_sandbox/notifications").json()
            charges = sandbox.stats()["charges_total"]
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)
    stored = count_rows(db, "SELECT count(*) FROM payments_acquirernotification")
    final = count_rows(
        db, "SELECT count(*) FROM payments_payment WHERE status = ANY(%s)", [sorted(FINAL)]
    )
    total = 2 * args.payments
    assert charges == total, f"{charges} charges at the sandbox for {total} payments"
    assert final == total, f"{final} payments final of {total}"
    assert stored == args.payments == notifier["delivered"], (stored, notifier)
    rows = [
        (mode, len(times), f"{median(times):.3f}", f"{percentile(times, 90):.3f}")
        for mode, times in results.items()
    ]
    print_table(("mode", "payments", "median s", "p90 s"), rows)
    speedup = ratio(median(results["polling"]), median(results["notifications"]))
    print(f"time to final after an ambiguous timeout, polling / notifications: {speedup:.1f}x")
    print(f"work: {total} payments final, {charges} charges at the sandbox, {stored} notifications")
    write_results(
        "notifications_time_to_final",
        {"machine": machine_context(), "latency_ms": args.latency_ms, "seconds": results,
         "ratio_polling_over_notifications": speedup, "charges": charges,
         "notifications_stored": stored},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
