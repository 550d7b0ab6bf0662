"""Benchmark: what each change of ADR 0026 saves, by CPU, in one process and one run.

One command (docs/benchmarks.md, "Each change on its own")::

    .venv/bin/python bench/hot_path_ab.py                  # 6 rounds x 60 payments per variant
    .venv/bin/python bench/hot_path_ab.py --rounds 2 --payments 20

The throughput benchmark measures the whole stack, and on a machine shared with other work its
figures move between runs by more than one change is worth. This one runs ``POST /payments``
(new keys, the sandbox answering at once) through Django's whole request handling, middleware
included, in this process, and undoes one change at a time, rotating the variants block by
block within each round:

* ``all``: the code as it is;
* ``api key looked up``: ``API_KEY_CACHE_SECONDS=0`` (a look-up per request);
* ``health check``: ``CONN_HEALTH_CHECKS`` on (a ``SELECT 1`` per request, which Django's query
  log does not show);
* ``phase 1 locked``: the one-statement claim off (the transaction with the locked claim, the
  payment look-up by key, the inserts);
* ``phase 2 locked``: the one-statement phase 2 off (the row locks, the ORM's updates and
  inserts);
* ``serializer``: the answer and the outbox object rendered by ``PaymentSerializer``.

Counted per block: this process's CPU time (``time.process_time``: Python, Django, psycopg) and
the CPU time of its PostgreSQL backend (``/proc/<pid>/stat`` of ``pg_backend_pid()``), divided by
the payments; the sandbox is another process and is not counted. Other tenants of the machine
slow a block down but add little CPU time to it, so the per-round ratios to ``all`` are what to
read. The statements of one request of each variant are counted too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    PAYMENT_BODY,
    RESULTS,
    SANDBOX_API_KEY,
    database_from_env,
    django_env,
    issue_api_key,
    machine_context,
    median,
    prepare_database,
    print_table,
    ratio,
    start_sandbox,
    write_results,
)

_TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (a PostgreSQL backend on this machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def variants() -> dict[str, Callable[[], contextlib.AbstractContextManager[None]]]:
    """Each variant: a context manager that undoes one change for its block."""
    from django.conf import settings
    from django.db import connection

    from payments import lifecycle, responses, services
    from payments.serializers import PaymentSerializer

    @contextlib.contextmanager
    def nothing() -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def patched(module: object, name: str, value: object) -> Iterator[None]:
        saved = getattr(module, name)
        setattr(module, name, value)
        try:
            yield
        finally:
            setattr(module, name, saved)

    @contextlib.contextmanager
    def no_cache() -> Iterator[None]:
        saved = settings.API_KEY_CACHE_SECONDS
        settings.API_KEY_CACHE_SECONDS = 0
        try:
            yield
        finally:
            settings.API_KEY_CACHE_SECONDS = saved

    @contextlib.contextmanager
    def health_check() -> Iterator[None]:
        connection.close()
        connection.settings_dict["CONN_HEALTH_CHECKS"] = True
        try:
            yield
        finally:
            connection.close()
            connection.settings_dict["CONN_HEALTH_CHECKS"] = False

    @contextlib.contextmanager
    def serializer() -> Iterator[None]:
        def document(payment: object) -> dict:
            return PaymentSerializer(payment).data

        with (
            patched(responses, "payment_document", document),
            patched(lifecycle, "payment_document", document),
        ):
            yield

    return {
        "all": nothing,
        "api key looked up": no_cache,
        "health check": health_check,
        "phase 1 locked": lambda: patched(
            services, "idempotency_key_claim_at_once", lambda **_: None
        ),
        "phase 2 locked": lambda: patched(
            services, "payment_outcome_record", lambda *_, **__: None
        ),
        "serializer": serializer,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--payments", type=int, default=60, help="payments per block")
    parser.add_argument("--database", default=None, help="benchmark database name")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    sandbox = start_sandbox()
    try:
        env = django_env(db, ACQUIRER_BASE_URL=sandbox.url, ACQUIRER_API_KEY=SANDBOX_API_KEY)
        os.environ.update(env)
        return run(args, api_key)
    finally:
        sandbox.stop()


def run(args: argparse.Namespace, api_key: str) -> int:
    import logging
    import warnings

    import django

    warnings.filterwarnings("ignore")
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from bench.throughput import captured_shapes

    # The service's log lines are written as in production, to a file, not the terminal.
    log_path = RESULTS / "hot_path_ab.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stream = log_path.open("a")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(stream)
    settings.ALLOWED_HOSTS = ["*"]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")

    def post() -> int:
        return client.post(
            "/payments", PAYMENT_BODY, "application/json",
            HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
        ).status_code  # fmt: skip

    table = variants()
    for _ in range(20):
        post()  # warm-up: imports, the API key cached, the connection open
    statements: dict[str, list[str]] = {}
    for name, undo in table.items():
        with undo():
            post()
            with CaptureQueriesContext(connection) as queries:
                assert post() == 201
            statements[name] = captured_shapes([q["sql"] for q in queries.captured_queries])
    blocks: dict[str, list[dict[str, float]]] = {name: [] for name in table}
    names = list(table)
    for n in range(args.rounds):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            with table[name]():
                post()  # the variant's connection and cache state
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pid = cursor.fetchone()[0]
                cpu, backend = time.process_time(), backend_cpu_seconds(pid)
                statuses = [post() for _ in range(args.payments)]
                python_ms = 1000 * (time.process_time() - cpu) / args.payments
                postgres_ms = 1000 * (backend_cpu_seconds(pid) - backend) / args.payments
            assert set(statuses) == {201}, statuses
            blocks[name].append(
                {"python_ms": python_ms, "postgres_ms": postgres_ms,
                 "total_ms": python_ms + postgres_ms}
            )  # fmt: skip
        print(
            f"round {n + 1}: "
            + ", ".join(f"{k} {v[-1]['total_ms']:.2f} ms" for k, v in blocks.items())
        )
    rows, summary = [], {}
    for name in names:
        per = blocks[name]
        extra = median(
            ratio(b["total_ms"], a["total_ms"]) for a, b in zip(blocks["all"], per, strict=True)
        )
        summary[name] = {
            "statements": len(statements[name]),
            "python_ms": median(b["python_ms"] for b in per),
            "postgres_ms": median(b["postgres_ms"] for b in per),
            "total_ms": median(b["total_ms"] for b in per),
            "ratio_to_all": extra,
            "shapes": statements[name],
        }
        rows.append((
            name, len(statements[name]), summary[name]["python_ms"],
            summary[name]["postgres_ms"], summary[name]["total_ms"], extra,
        ))  # fmt: skip
    print()
    print_table(
        ["variant (one change undone)", "statements", "Python CPU ms", "PostgreSQL CPU ms",
         "CPU ms per payment", "/ all (median of rounds)"],
        rows,
    )  # fmt: skip
    path = write_results(
        "hot_path_ab",
        {"machine": machine_context(), "settings": vars(args), "summary": summary,
         "blocks": blocks},
    )  # fmt: skip
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
