"""Benchmark: what each change of ADRs 0026 and 0029 saves, by CPU, in one process and one run.

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
* ``serializer``: the answer and the outbox object rendered by ``PaymentSerializer``;
* ``console middleware on the API``: the console's session, authentication, OTP and message
  middleware run on every path again, as before ADR 0029 (``console/middleware.py``);
* ``input serializer``: the body validated by ``PaymentCreateInputSerializer`` instead of the
  plain checks (``payments.api.serializers.payment_create_input``, ADR 0029);
* ``statements not prepared``: the hot path's statements bound by the server but not prepared
  (the connection's ``prepare_threshold`` None, as behind PgBouncer; ADR 0031).

Counted per block: this process's CPU time (``time.process_time``: Python, Django, psycopg) and
the CPU time of its PostgreSQL backend (``/proc/<pid>/stat`` of ``pg_backend_pid()``), divided by
the payments; the sandbox is another process and is not counted. Other tenants of the machine
slow a block down but add little CPU time to it, so the per-round ratios to ``all`` are what to
read. The statements of one request of each variant are counted too. The changes that touch
Python only (the middleware, the input serializer) are small beside the noise of a shared
machine: their ``Python / all`` column (this process's CPU alone) is the one to read, from a
run with many short rounds of just those variants::

    .venv/bin/python bench/hot_path_ab.py --rounds 20 --payments 20 \
        --variants "console middleware on the API,input serializer"

Last, the parts of DRF's dispatch and of the body validation are each timed in a tight loop on
a ``POST /payments`` request built by Django's ``RequestFactory`` (the best of
``--parts-repeat`` runs of ``--parts-number`` calls, by CPU time, so other tenants inflate it
least), and shown beside the ``all`` variant's Python CPU per payment: the request wrapping
(``APIView.initialize_request``), content negotiation, the permission and throttle checks,
``finalize_response``, the parsing of the body (``request_json``), the validation by
``PaymentCreateInputSerializer`` and by the plain checks (``payment_create_input``).
``--parts-number 0`` leaves them out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import timeit
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

    from console import middleware as console_middleware
    from payments.api import serializers
    from payments.authorization import create, phase_one
    from payments.core import answers as responses
    from payments.core import payment_states as lifecycle
    from payments.core.documents import PaymentSerializer

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
    def unprepared() -> Iterator[None]:
        connection.ensure_connection()
        saved = connection.connection.prepare_threshold
        connection.connection.prepare_threshold = None
        try:
            yield
        finally:
            connection.connection.prepare_threshold = saved

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
            phase_one, "idempotency_key_claim_at_once", lambda **_: None
        ),
        "phase 2 locked": lambda: patched(create, "payment_outcome_record", lambda *_, **__: None),
        "serializer": serializer,
        "console middleware on the API": lambda: patched(
            console_middleware, "is_console_path", lambda request: True
        ),
        "input serializer": lambda: patched(serializers, "payment_create_input", lambda data: None),
        "statements not prepared": unprepared,
    }


def best_microseconds(call: Callable[[], object], number: int, repeat: int) -> float:
    """The best of ``repeat`` runs of ``number`` calls of ``call``, CPU microseconds a call."""
    runs = timeit.repeat(call, number=number, repeat=repeat, timer=time.process_time)
    return 1e6 * min(runs) / number


def parts(number: int, repeat: int) -> dict[str, float]:
    """Microseconds per call of each part, on one ``POST /payments`` request."""
    from django.http import HttpResponse
    from django.test import RequestFactory
    from rest_framework.views import APIView

    from merchants.models import Merchant
    from payments.api.parsers import request_json
    from payments.api.serializers import PaymentCreateInputSerializer, payment_create_input
    from payments.api.views import PaymentListCreateApi

    body = json.dumps(PAYMENT_BODY).encode()
    factory = RequestFactory()

    def django_request():
        return factory.post(
            "/payments", body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
        )

    view = PaymentListCreateApi()
    view.args, view.kwargs, view.format_kwarg = (), {}, None
    request = view.initialize_request(django_request())
    request.user = Merchant(name="bench")
    view.request, view.headers = request, view.default_response_headers
    data = json.loads(body)

    def serializer() -> object:
        validated = PaymentCreateInputSerializer(data=data)
        validated.is_valid(raise_exception=True)
        return validated.validated_data

    def parsed() -> object:
        return request_json(view.initialize_request(django_request()))

    def time_of(call: Callable[[], object]) -> float:
        return best_microseconds(call, number, repeat)

    one_request = django_request()
    return {
        "request wrapping (initialize_request)": time_of(
            lambda: view.initialize_request(one_request)
        ),
        "content negotiation": time_of(lambda: view.perform_content_negotiation(request)),
        "permission check": time_of(lambda: view.check_permissions(request)),
        "throttle check": time_of(lambda: view.check_throttles(request)),
        "finalize_response": time_of(
            lambda: APIView.finalize_response(view, request, HttpResponse(b"{}"))
        )
        - time_of(lambda: HttpResponse(b"{}")),
        "body parsing (request_json)": time_of(parsed)
        - time_of(lambda: view.initialize_request(django_request())),
        "input serializer": time_of(serializer),
        "plain checks (payment_create_input)": time_of(lambda: payment_create_input(data)),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--payments", type=int, default=60, help="payments per block")
    parser.add_argument("--database", default=None, help="benchmark database name")
    parser.add_argument(
        "--variants",
        default="",
        help="comma-separated variant names to run beside 'all' (default: every variant)",
    )
    parser.add_argument(
        "--parts-number", type=int, default=5000, help="calls per timed run of a part (0: none)"
    )
    parser.add_argument("--parts-repeat", type=int, default=5, help="timed runs of a part")
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
    if args.variants:
        chosen = {"all", *(name.strip() for name in args.variants.split(","))}
        unknown = chosen - set(table)
        if unknown:
            raise SystemExit(f"unknown variants: {sorted(unknown)}; known: {sorted(table)}")
        table = {name: undo for name, undo in table.items() if name in chosen}
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
        python_extra = median(
            ratio(b["python_ms"], a["python_ms"]) for a, b in zip(blocks["all"], per, strict=True)
        )
        summary[name] = {
            "statements": len(statements[name]),
            "python_ms": median(b["python_ms"] for b in per),
            "postgres_ms": median(b["postgres_ms"] for b in per),
            "total_ms": median(b["total_ms"] for b in per),
            "ratio_to_all": extra,
            "python_ratio_to_all": python_extra,
            "shapes": statements[name],
        }
        rows.append((
            name, len(statements[name]), summary[name]["python_ms"],
            summary[name]["postgres_ms"], summary[name]["total_ms"], extra, python_extra,
        ))  # fmt: skip
    print()
    print_table(
        ["variant (one change undone)", "statements", "Python CPU ms", "PostgreSQL CPU ms",
         "CPU ms per payment", "/ all (median of rounds)", "Python / all"],
        rows,
    )  # fmt: skip
    parts_us = {}
    if args.parts_number > 0:
        parts_us = print_parts(args, payment_ms=summary["all"]["python_ms"])
    path = write_results(
        "hot_path_ab",
        {"machine": machine_context(), "settings": vars(args), "summary": summary,
         "blocks": blocks, "parts_us": parts_us},
    )  # fmt: skip
    print(f"\nresults: {path}")
    return 0


def print_parts(args: argparse.Namespace, *, payment_ms: float) -> dict[str, float]:
    """Print the parts of DRF's dispatch and of the body validation (:func:`parts`), in us and
    as a share of ``payment_ms`` (this process's CPU ms per payment, the ``all`` variant), and
    return them (name -> us)."""
    costs = parts(args.parts_number, args.parts_repeat)
    costs["DRF's dispatch in all (the wrapping to the parsing)"] = sum(list(costs.values())[:6])
    print()
    print_table(
        ["part of POST /payments", "CPU us", "% of a payment's Python CPU"],
        [(name, us, us / (10 * payment_ms)) for name, us in costs.items()],
    )
    return costs


if __name__ == "__main__":
    sys.exit(main())
