"""Benchmark: the CPU per payment with tracing off, and on with a 10 % sampler, in one run
(docs/benchmarks.md, "What tracing costs"; ADR 0044)::

    .venv/bin/python bench/tracing_cost.py                      # 4 rounds x 60 payments
    .venv/bin/python bench/tracing_cost.py --rounds 2 --payments 30
    .venv/bin/python bench/tracing_cost.py --latency 50         # the sandbox answers in 50 ms

Like bench/log_cost.py, it runs ``POST /payments`` (new keys, the sandbox answering at once
unless ``--latency``) through Django's whole request handling in this process, and counts
this process's CPU time per payment (``time.process_time``: every thread, the exporter's
included). Tracing is set up once per process, as in production, so the rounds run in two
phases:

1. ``off``: the process as it runs without ``OTEL_EXPORTER_OTLP_*`` (``tracing_setup`` found
   nothing configured: no SDK, the API's no-op spans);
2. then ``tracing_setup`` with ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a local stub
   collector (a thread answering 200 to ``POST /v1/traces``; its own CPU is measured and
   taken out) and ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` (``_ARG`` 0.1): the batch
   processor, the OTLP/HTTP exporter, the redaction and every instrumentation, as in
   production. Its blocks rotate, round by round, between ``10 %`` and ``100 %`` (every
   payment sampled: the most tracing can cost).

Printed: each variant's CPU ms per payment (median of its blocks), the ratios to ``off``, and
the spans exported per payment. Asserted: every payment answered 201, and spans were exported
in the sampled variants (about 10 % of the payments' traces at 10 %).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    PAYMENT_BODY,
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

SAMPLED = ("10 %", "100 %")


class StubCollector:
    """An OTLP/HTTP endpoint on 127.0.0.1 that reads each export and answers 200, keeping
    the CPU time its handler threads spent (not ours to count) and the bytes received."""

    def __init__(self) -> None:
        self.cpu_ns = 0
        self.bytes = 0
        self.exports = 0
        lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            # The body leaves with its headers, not after a 40 ms delayed ACK.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                started = time.thread_time_ns()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()
                with lock:
                    collector.bytes += len(body)
                    collector.exports += 1
                    collector.cpu_ns += time.thread_time_ns() - started

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--payments", type=int, default=60, help="payments per block")
    parser.add_argument("--latency", type=int, default=0, help="sandbox latency in ms")
    parser.add_argument("--database", default=None, help="benchmark database name")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    sandbox = start_sandbox()
    collector = StubCollector()
    try:
        if args.latency:
            sandbox.set_condition("latency", distribution="fixed", ms=args.latency)
        env = django_env(db, ACQUIRER_BASE_URL=sandbox.url, ACQUIRER_API_KEY=SANDBOX_API_KEY)
        os.environ.update(env)
        for name in [n for n in os.environ if n.startswith("OTEL_")]:
            del os.environ[name]  # phase 1 is tracing off, whatever the shell says
        return run(args, api_key, collector)
    finally:
        collector.stop()
        sandbox.stop()


class _Delegate:
    """A sampler whose choice the benchmark switches between blocks (the SDK's tracers keep
    the provider's sampler object, so the object stays and its inner sampler changes)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def should_sample(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return f"Delegate({self.inner.get_description()})"


def run(args: argparse.Namespace, api_key: str, collector: StubCollector) -> int:
    import logging
    import warnings

    import django

    warnings.filterwarnings("ignore")
    from observability.tracing import tracing_configured, tracing_setup

    # Phase 1: nothing configured, so tracing_setup would do nothing (it is called in phase 2,
    # once per process, as the entry points call it).
    assert not tracing_configured(os.environ)
    django.setup()
    logging.disable(logging.CRITICAL)  # bench/log_cost.py measures the lines
    from django.conf import settings
    from django.test import Client

    settings.ALLOWED_HOSTS = ["*"]

    def block(client: Client) -> float:
        cpu = time.process_time()
        statuses = [
            client.post(
                "/payments", PAYMENT_BODY, "application/json",
                HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
            ).status_code
            for _ in range(args.payments)
        ]  # fmt: skip
        assert set(statuses) == {201}, statuses
        return 1000 * (time.process_time() - cpu) / args.payments

    off_client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    for _ in range(20):
        block_warm = off_client.post(
            "/payments", PAYMENT_BODY, "application/json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex
        )
        assert block_warm.status_code == 201
    blocks: dict[str, list[dict[str, float]]] = {"off": [], **{name: [] for name in SAMPLED}}
    for n in range(args.rounds):
        blocks["off"].append({"cpu_ms": block(off_client), "spans": 0.0})
        print(f"off, round {n + 1}: {blocks['off'][-1]['cpu_ms']:.3f} ms CPU per payment")

    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

    os.environ |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
    }
    samplers = {"10 %": ParentBased(TraceIdRatioBased(0.1)), "100 %": ParentBased(ALWAYS_ON)}
    sampler = _Delegate(samplers["10 %"])
    assert tracing_setup("payments-bench", sampler=sampler) is True

    class Counter(SpanProcessor):
        ended = 0

        def on_end(self, span: Any) -> None:
            Counter.ended += 1

    from django.db import connections

    connections.close_all()  # psycopg's instrumentation wraps the connections opened from now
    provider: Any = trace.get_tracer_provider()
    provider.add_span_processor(Counter())
    traced_client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")  # the OTel middleware in
    for _ in range(20):
        traced_client.post(
            "/payments", PAYMENT_BODY, "application/json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex
        )
    for n in range(args.rounds):
        for name in SAMPLED[n % 2 :] + SAMPLED[: n % 2]:
            sampler.inner = samplers[name]
            provider.force_flush()
            ended, collector_ns = Counter.ended, collector.cpu_ns
            cpu_ms = block(traced_client)
            provider.force_flush()
            # The stub collector's CPU is the backend's, not the service's.
            cpu_ms -= (collector.cpu_ns - collector_ns) / 1e6 / args.payments
            spans = (Counter.ended - ended) / args.payments
            blocks[name].append({"cpu_ms": cpu_ms, "spans": spans})
            print(f"{name}, round {n + 1}: {cpu_ms:.3f} ms CPU per payment, {spans:.1f} spans")
    summary = {
        name: {
            "cpu_ms": median(b["cpu_ms"] for b in per),
            "ratio_to_off": ratio(median(b["cpu_ms"] for b in per), median(
                b["cpu_ms"] for b in blocks["off"])),
            "spans_per_payment": median(b["spans"] for b in per),
        }
        for name, per in blocks.items()
    }  # fmt: skip
    assert summary["100 %"]["spans_per_payment"] > 5, summary  # every payment traced
    assert 0 < summary["10 %"]["spans_per_payment"] < summary["100 %"]["spans_per_payment"] / 3
    payments = args.payments * args.rounds * 3
    print()
    print_table(
        ["variant", "CPU ms per payment", "/ off", "spans exported per payment"],
        [(n, s["cpu_ms"], s["ratio_to_off"], s["spans_per_payment"]) for n, s in summary.items()],
    )
    print(
        f"\ntracing on at 10 % / off, CPU per payment: {summary['10 %']['ratio_to_off']:.3f} "
        f"(every payment traced: {summary['100 %']['ratio_to_off']:.3f}); {payments} payments, "
        f"{collector.exports} exports, {collector.bytes} bytes of OTLP"
    )
    path = write_results(
        "tracing_cost",
        {"machine": machine_context(), "settings": vars(args), "summary": summary,
         "blocks": blocks, "payments": payments},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
