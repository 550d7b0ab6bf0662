"""Benchmark: the operations console (Django admin) with 1,000,000 payments and keys.

One command (see docs/benchmarks.md)::

    .venv/bin/python bench/admin_scale.py            # 1,000,000 payments, keys and events
    .venv/bin/python bench/admin_scale.py --rows 100000 --runs 3

It creates a separate database (``payments_admin_bench`` by default, dropped and created
afresh; never the development or test database) on the server that ``DATABASE_URL`` names (or
the embedded one), migrates it, fills it with ``INSERT ... SELECT generate_series`` (no Python
loop: a million rows take seconds), runs ANALYZE, then requests every admin list page, filter,
search and detail page through Django's test client as an ``operator`` (not a superuser, so the
permission queries are counted too) and measures each one: the median and the worst of
``--runs`` timed requests after one warm-up, and the number of SQL queries. It fails (exit 1)
when a page takes 1 s or more. Results are printed and written to
``bench/results/admin_scale-<timestamp>.json`` (not committed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")

#: Pages slower than this fail the benchmark.
BUDGET_SECONDS = 1.0
MERCHANTS = 50
#: Days over which the payments' creation times are spread.
SPREAD_DAYS = 90


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="payments (and keys)")
    parser.add_argument("--runs", type=int, default=5, help="timed requests per page")
    parser.add_argument("--database", default="payments_admin_bench", help="database to create")
    parser.add_argument(
        "--reuse", action="store_true", help="keep an existing benchmark database and its data"
    )
    parser.add_argument(
        "--no-migrate",
        action="store_true",
        help="with --reuse: keep the database's schema as it is (bench/index_cost.py measures "
        "the same data under two index sets)",
    )
    return parser.parse_args()


def setup_django(database: str) -> None:
    import django
    from django.conf import settings

    warnings.filterwarnings("ignore", message="No directory at")  # whitenoise, no collectstatic
    django.setup()
    settings.DATABASES["default"]["NAME"] = database
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["*"]


def create_database(database: str, *, reuse: bool) -> bool:
    """(Re)create ``database``; return whether it must be filled."""
    from django.db import connection

    with connection._nodb_cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
        exists = cursor.fetchone() is not None
        if exists and reuse:
            return False
        quoted = connection.ops.quote_name(database)
        if exists:
            cursor.execute(f"DROP DATABASE {quoted} WITH (FORCE)")
        cursor.execute(f"CREATE DATABASE {quoted}")
    return True


FILL_SQL = [
    # Merchants.
    """
    INSERT INTO merchants_merchant (id, name, created_at, acquirer_order)
    SELECT g, 'bench-merchant-' || g, now() - interval '400 days', ''
    FROM generate_series(1, %(merchants)s) g
    """,
    "SELECT setval(pg_get_serial_sequence('merchants_merchant', 'id'), %(merchants)s)",
    # Idempotency keys: one per payment, same creation time; 0.1 % still in progress.
    """
    INSERT INTO idempotency_idempotencykey (id, merchant_id, key, method, route,
        request_fingerprint, status, locked_at, response_status, response_headers,
        response_body, created_at, completed_at, expires_at)
    SELECT g, 1 + g %% %(merchants)s, 'order-' || g || '-attempt', 'POST', '/payments',
        md5('f' || g) || md5('g' || g),
        CASE WHEN g %% 1000 = 0 THEN 'in_progress' ELSE 'completed' END,
        CASE WHEN g %% 1000 = 0 THEN t END,
        CASE WHEN g %% 1000 = 0 THEN NULL ELSE 201 END,
        '{"Content-Type": "application/json"}'::jsonb,
        CASE WHEN g %% 1000 = 0 THEN NULL
             ELSE convert_to('{"id": "pay_' || substr(md5('p' || g), 1, 24)
                             || '", "object": "payment", "status": "succeeded"}', 'UTF8') END,
        t, CASE WHEN g %% 1000 = 0 THEN NULL ELSE t END, t + interval '24 hours'
    FROM (SELECT g, now() - g * (%(spread)s * interval '1 second') / %(rows)s AS t
          FROM generate_series(1, %(rows)s) g) s
    """,
    "SELECT setval(pg_get_serial_sequence('idempotency_idempotencykey', 'id'), %(rows)s)",
    # Payments: 85 %% succeeded, 10 %% declined, 4 %% failed, 0.9 %% processing, 0.1 %% review.
    """
    INSERT INTO payments_payment (id, merchant_id, idempotency_key_id, amount, currency,
        payment_method, reference, description, status, decline_code, failure_code,
        acquirer_reference, acquirer_idempotency_key, created_at, updated_at, next_check_at,
        reconciliation_attempts, reconciliation_lease_until, capture_method, amount_captured,
        amount_refunded, acquirer, allow_deferred, deferred_attempts)
    SELECT id, 1 + g %% %(merchants)s, g, 100 + (g::bigint * 7919) %% 100000,
        CASE WHEN g %% 100 < 60 THEN 'EUR' WHEN g %% 100 < 80 THEN 'USD'
             WHEN g %% 100 < 90 THEN 'GBP' WHEN g %% 100 < 95 THEN 'CHF'
             WHEN g %% 100 < 98 THEN 'SEK' WHEN g %% 100 < 99 THEN 'JPY' ELSE 'KWD' END,
        'tok_visa', 'order-' || g, NULL, status,
        CASE WHEN status = 'declined' THEN 'do_not_honor' END,
        CASE WHEN status = 'failed' THEN 'acquirer_rejected' END,
        CASE WHEN status IN ('succeeded', 'declined')
             THEN 'ch_' || substr(md5('c' || g), 1, 24) END,
        'authorize-' || id, t, t,
        CASE WHEN status = 'processing' THEN t + interval '1 minute' END,
        CASE WHEN status = 'needs_review' THEN 40 ELSE 0 END, NULL, 'automatic',
        CASE WHEN status = 'succeeded' THEN 100 + (g::bigint * 7919) %% 100000 ELSE 0 END, 0,
        'alpha', false, 0
    FROM (
        SELECT g, 'pay_' || substr(md5('p' || g), 1, 24) AS id,
            now() - g * (%(spread)s * interval '1 second') / %(rows)s AS t,
            CASE WHEN g %% 1000 = 0 THEN 'needs_review'
                 WHEN g %% 1000 < 10 THEN 'processing'
                 WHEN g %% 1000 < 50 THEN 'failed'
                 WHEN g %% 1000 < 150 THEN 'declined'
                 ELSE 'succeeded' END AS status
        FROM generate_series(1, %(rows)s) g) s
    """,
    # Events: every payment's creation, plus an acquirer attempt and a reconciliation attempt
    # for the unresolved ones (what the detail page renders).
    """
    INSERT INTO payments_paymentevent (payment_id, type, from_status, to_status, data, created_at)
    SELECT id, 'payment_created', 'processing', 'processing', '{}'::jsonb, created_at
    FROM payments_payment
    """,
    """
    INSERT INTO payments_paymentevent (payment_id, type, from_status, to_status, data, created_at)
    SELECT id, 'acquirer_attempt', 'processing', 'processing',
        '{"operation": "authorize", "outcome": "unknown", "error": "ResponseTimeoutError",
          "status_code": null, "elapsed_seconds": 3.002}'::jsonb, created_at + interval '3 s'
    FROM payments_payment WHERE status IN ('processing', 'needs_review')
    UNION ALL
    SELECT id, 'reconciliation_attempt', 'processing', 'processing',
        '{"result": "retry_later", "detail": "look-up failed", "error": "AcquirerUnavailableError",
          "status_code": 503, "attempt": 1, "next_check_in_seconds": 21.4}'::jsonb,
        created_at + interval '30 s'
    FROM payments_payment WHERE status IN ('processing', 'needs_review')
    """,
]


def fill(rows: int) -> float:
    from django.db import connection

    started = time.monotonic()
    params = {"rows": rows, "merchants": MERCHANTS, "spread": SPREAD_DAYS * 86400}
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
        for statement in FILL_SQL:
            cursor.execute(statement, params)
    with connection.cursor() as cursor:  # outside a transaction: VACUUM sets the visibility map
        cursor.execute("VACUUM (ANALYZE)")
    return time.monotonic() - started


def operator_client():
    import importlib

    from django.apps import apps
    from django.contrib.auth.models import Group, User
    from django.test import Client

    importlib.import_module("payments.migrations.0004_operations_roles").create_roles(apps, None)
    user, _ = User.objects.get_or_create(username="bench-operator", defaults={"is_staff": True})
    user.groups.add(Group.objects.get(name="operator"))
    client = Client()
    client.force_login(user)
    return client


def pages() -> list[tuple[str, str, dict]]:
    """(name, path, query) of every page measured."""
    from django.contrib.admin.utils import quote

    from idempotency.models import IdempotencyKey
    from payments.models import Payment

    needs_review = Payment.objects.filter(status="needs_review").order_by("-created_at").first()
    some = Payment.objects.order_by("-created_at")[500]
    key = IdempotencyKey.objects.order_by("-expires_at")[500]
    payments, keys = "/admin/payments/payment/", "/admin/idempotency/idempotencykey/"
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return [
        ("payments: list", payments, {}),
        ("payments: last page (200)", payments, {"p": "200"}),
        ("payments: status needs_review", payments, {"status": "needs_review"}),
        ("payments: status stuck", payments, {"status": "stuck"}),
        ("payments: status processing", payments, {"status": "processing"}),
        ("payments: status succeeded", payments, {"status": "succeeded"}),
        ("payments: merchant", payments, {"merchant__id__exact": "7"}),
        ("payments: merchant + status failed", payments,
         {"merchant__id__exact": "7", "status": "failed"}),
        ("payments: currency KWD", payments, {"currency": "KWD"}),
        ("payments: currency JPY + declined", payments, {"currency": "JPY", "status": "declined"}),
        ("payments: created today", payments, {"created_at__gte": today.isoformat()}),
        ("payments: search id", payments, {"q": some.pk}),
        ("payments: search reference", payments, {"q": some.reference}),
        ("payments: search acquirer reference", payments, {"q": some.acquirer_reference}),
        ("payments: search idempotency key", payments, {"q": some.idempotency_key.key}),
        ("payments: search miss", payments, {"q": "no-such-thing"}),
        ("payments: detail (needs_review)", f"{payments}{quote(needs_review.pk)}/change/", {}),
        ("payments: reconcile form", f"{payments}{quote(needs_review.pk)}/reconcile/", {}),
        ("keys: list", keys, {}),
        ("keys: status in_progress", keys, {"status__exact": "in_progress"}),
        ("keys: status completed", keys, {"status__exact": "completed"}),
        ("keys: expired", keys, {"expired": "yes"}),
        ("keys: not expired", keys, {"expired": "no"}),
        ("keys: search key", keys, {"q": key.key}),
        ("keys: detail", f"{keys}{key.pk}/change/", {}),
        ("merchants: list", "/admin/merchants/merchant/", {}),
    ]  # fmt: skip


def measure(client, path: str, query: dict, runs: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(path, query)  # warm-up (and the status check)
    if response.status_code != 200:
        raise SystemExit(f"{path} {query} answered {response.status_code}")
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        client.get(path, query)
        timings.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        client.get(path, query)
    slowest_sql = max(queries.captured_queries, key=lambda q: float(q["time"]), default=None)
    return {
        "median_ms": round(statistics.median(timings) * 1000, 1),
        "max_ms": round(max(timings) * 1000, 1),
        "queries": len(queries),
        "slowest_query_ms": round(float(slowest_sql["time"]) * 1000, 1) if slowest_sql else 0,
    }


def measure_metrics(runs: int) -> dict:
    """The /metrics view (its database gauges), called directly: not yet in every urlconf."""
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from payments.monitoring.views import metrics_view

    request = RequestFactory().get("/metrics")
    metrics_view(request)
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        metrics_view(request)
        timings.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        metrics_view(request)
    return {
        "median_ms": round(statistics.median(timings) * 1000, 1),
        "max_ms": round(max(timings) * 1000, 1),
        "queries": len(queries),
        "slowest_query_ms": round(
            max(float(q["time"]) for q in queries.captured_queries) * 1000, 1
        ),
    }


def main() -> int:
    args = parse_args()
    setup_django(args.database)
    from django.core.management import call_command
    from django.db import connection

    created = create_database(args.database, reuse=args.reuse)
    if created or not args.no_migrate:
        call_command("migrate", verbosity=0)
    if created:
        print(f"filling {args.database} with {args.rows:,} payments and keys ...", flush=True)
        print(f"filled in {fill(args.rows):.1f} s", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM payments_payment")
        (rows,) = cursor.fetchone()
    client = operator_client()
    results = {}
    print(f"\n{rows:,} payments; {args.runs} timed runs per page; budget {BUDGET_SECONDS:.0f} s\n")
    print(f"{'page':42} {'median ms':>10} {'max ms':>8} {'queries':>8} {'slowest q ms':>13}")
    for name, path, query in pages():
        results[name] = measure(client, path, query, args.runs)
        r = results[name]
        print(f"{name:42} {r['median_ms']:>10} {r['max_ms']:>8} {r['queries']:>8} "
              f"{r['slowest_query_ms']:>13}", flush=True)  # fmt: skip
    results["metrics: /metrics scrape"] = r = measure_metrics(args.runs)
    print(f"{'metrics: /metrics scrape':42} {r['median_ms']:>10} {r['max_ms']:>8} "
          f"{r['queries']:>8} {r['slowest_query_ms']:>13}")  # fmt: skip

    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"admin_scale-{stamp}.json"
    path.write_text(json.dumps({"rows": rows, "runs": args.runs, "pages": results}, indent=2))
    slow = [name for name, r in results.items() if r["max_ms"] >= BUDGET_SECONDS * 1000]
    print(f"\nwritten to {path.relative_to(ROOT)}")
    if slow:
        print(f"OVER BUDGET ({BUDGET_SECONDS} s): {', '.join(slow)}")
        return 1
    print(f"every page under {BUDGET_SECONDS} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
