"""Benchmark: duplicate charges when 20 requests with the same key arrive at once.

One command (docs/benchmarks.md, "Same-key storm: the service and django-idempotency-key")::

    .venv/bin/python bench/same_key_storm.py                 # 50 keys x 20 requests, per target
    .venv/bin/python bench/same_key_storm.py --keys 5 --tokens tok_visa

For every target and every acquirer speed (``--tokens``: ``tok_visa`` answers at once,
``tok_slow_200`` after 200 ms), ``--keys`` storms run one after the other: ``--storm`` threads,
each with its own kept-alive connection, wait on a barrier and then POST the same body with the
same Idempotency-Key (the body's ``reference`` is the key). Targets, all on the same gunicorn
(Procfile command) and database, with the bench-only settings ``bench.peers.settings``:

* ``service``: ``POST /payments``, the service's idempotency layer;
* ``peer-redis``: the plain endpoint behind django-idempotency-key, as its README documents
  for several processes (Redis cache storage, Redis lock);
* ``peer-memory``: the same with the package's defaults (in-process storage, thread lock).

Counted: the answers by status; the payments charged per key (payments with that reference that
the acquirer approved; the sandbox's charge count is checked against it). A duplicate charge is
every charge beyond the first for a key. Exit status 1 if the service charged any key twice.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    Database,
    database_from_env,
    issue_api_key,
    machine_context,
    prepare_database,
    print_table,
    service_stack,
    timestamp,
    write_results,
)

TARGETS = {
    "service": ("redis", "/payments"),
    "peer-redis": ("redis", "/bench/peer/payments"),
    "peer-memory": ("memory", "/bench/peer/payments"),
}


def storm(url: str, api_key: str, key: str, token: str, clients: list[httpx.Client]) -> Counter:
    """Fire ``len(clients)`` identical requests at once; return the answers by status."""
    body = json.dumps({"amount": 1999, "currency": "EUR", "payment_method": token,
                       "reference": key})  # fmt: skip
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
               "Idempotency-Key": key}  # fmt: skip
    barrier = threading.Barrier(len(clients))
    statuses: Counter = Counter()
    lock = threading.Lock()

    def fire(client: httpx.Client) -> None:
        barrier.wait()
        try:
            status = str(client.post(url, content=body, headers=headers).status_code)
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        with lock:
            statuses[status] += 1

    threads = [threading.Thread(target=fire, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def charges_per_key(db: Database, prefix: str) -> Counter:
    """Charged payments (the acquirer approved them) per storm key (the payments' reference)."""
    import psycopg

    with psycopg.connect(db.conninfo()) as conn:
        rows = conn.execute(
            "SELECT reference, count(*) FROM payments_payment WHERE reference LIKE %s "
            "AND acquirer_reference IS NOT NULL GROUP BY reference",
            [prefix + "%"],
        ).fetchall()
    return Counter({reference: n for reference, n in rows})


def duplicates(per_key: Counter) -> tuple[int, int]:
    """(charges beyond the first per key, keys charged more than once)."""
    return sum(n - 1 for n in per_key.values() if n > 1), sum(1 for n in per_key.values() if n > 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=50, help="storms per target and token")
    parser.add_argument("--storm", type=int, default=20, help="requests per key, at once")
    parser.add_argument("--tokens", nargs="+", default=["tok_visa", "tok_slow_200"])
    parser.add_argument("--targets", nargs="+", choices=list(TARGETS), default=list(TARGETS))
    parser.add_argument("--peer-redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--database", default=None, help="benchmark database name")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = timestamp()
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    results: list[dict] = []
    for storage in dict.fromkeys(TARGETS[t][0] for t in args.targets):
        targets = [t for t in args.targets if TARGETS[t][0] == storage]
        with service_stack(
            db, f"storm-{storage}", settings_module="bench.peers.settings",
            BENCH_PEER_STORAGE=storage, BENCH_PEER_REDIS_URL=args.peer_redis_url,
        ) as (sandbox, server):  # fmt: skip
            clients = [httpx.Client(timeout=30) for _ in range(args.storm)]
            try:
                for target in targets:
                    for token in args.tokens:
                        url = server.url + TARGETS[target][1]
                        prefix = f"storm-{stamp}-{target}-{token}-"
                        for client in clients:
                            client.get(server.url + "/healthz")
                        before = sandbox.stats()["charges_total"]
                        statuses: Counter = Counter()
                        for i in range(args.keys):
                            statuses += storm(url, api_key, f"{prefix}{i}", token, clients)
                        charged = sandbox.stats()["charges_total"] - before
                        per_key = charges_per_key(db, prefix)
                        extra, keys_twice = duplicates(per_key)
                        row = {
                            "target": target, "token": token, "keys": args.keys,
                            "requests": args.keys * args.storm, "statuses": dict(statuses),
                            "charges_in_database": sum(per_key.values()),
                            "charges_at_sandbox": charged, "duplicate_charges": extra,
                            "keys_charged_twice_or_more": keys_twice,
                        }  # fmt: skip
                        results.append(row)
                        print(
                            f"{target:12s} {token:13s} statuses {dict(statuses)}  charges "
                            f"{charged} for {args.keys} keys: {extra} duplicate charges on "
                            f"{keys_twice} keys"
                        )
            finally:
                for client in clients:
                    client.close()
    print()
    print_table(
        ["target", "acquirer", "answers", "charges / keys", "duplicate charges",
         "keys charged twice+"],
        [
            (r["target"], r["token"],
             ", ".join(f"{k}: {v}" for k, v in sorted(r["statuses"].items())),
             f"{r['charges_at_sandbox']} / {r['keys']}", r["duplicate_charges"],
             r["keys_charged_twice_or_more"])
            for r in results
        ],
    )  # fmt: skip
    path = write_results(
        "same_key_storm",
        {"machine": machine_context(), "settings": vars(args), "results": results},
    )
    print(f"\nresults: {path}")
    service_duplicates = sum(r["duplicate_charges"] for r in results if r["target"] == "service")
    return 1 if service_duplicates else 0


if __name__ == "__main__":
    sys.exit(main())
