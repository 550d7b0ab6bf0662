"""Benchmark: the CPU that logging costs per payment, before and after ADR 0028, in one run.

One command (docs/benchmarks.md, "What logging costs")::

    .venv/bin/python bench/log_cost.py                        # 6 rounds x 60 payments
    .venv/bin/python bench/log_cost.py --rounds 3 --payments 40 --log-format console

Like bench/hot_path_ab.py, it runs ``POST /payments`` (new keys, the sandbox answering at once)
through Django's whole request handling in this process, the log lines written to a file as in
production (``--log-format json``, the default, or ``console``), and rotates variants block by
block within each round:

* ``after``: the code as it is (the fast redaction, one request line that carries the payment's
  outcome, gunicorn's access line skipped for a request the request line covers);
* ``redaction as before``: the former :func:`~observability.log_filters.redact`
  (tests/support/log_redaction_reference.py) in every formatter;
* ``outcome line as before``: payments/authorization/create.py writes its own INFO outcome line;
* ``access line as before``: gunicorn's access line written for every request;
* ``before``: all three undone (main before ADR 0028);
* ``no log lines``: logging disabled and no access line: the floor, so ``variant - floor`` is
  what logging costs.

gunicorn's access line is not written by Django: each block calls gunicorn's own logger
(observability/access_log.py's ``AccessLogger``, or gunicorn's ``Logger`` for the ``before``
variants) with the request's WSGI environ and the answer, as gunicorn's worker does after a request.
Counted per block, per payment: the CPU time spent logging (``time.thread_time`` inside
``logging.Logger._log``, which makes, formats, redacts and writes every record, and inside
gunicorn's access call), this process's whole CPU time (``time.process_time``), and the lines
and bytes written. The first is what to read: the whole CPU time of a payment moves between
blocks, on a shared machine, by more than logging costs, while the time inside the logging
calls is summed over exactly those calls. The per-round ratios (medians) are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import runpy
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    PAYMENT_BODY,
    RESULTS,
    ROOT,
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

VARIANTS = (
    "after",
    "redaction as before",
    "outcome line as before",
    "access line as before",
    "before",
    "no log lines",
)


class LoggingClock:
    """Sums the CPU time of this thread spent inside the functions :meth:`timed` wraps
    (nested calls counted once), in nanoseconds."""

    def __init__(self) -> None:
        self.ns = 0
        self._depth = 0

    def timed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function``, with its CPU time added to :attr:`ns`."""

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return function(*args, **kwargs)
            self._depth += 1
            started = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.ns += time.thread_time_ns() - started
                self._depth -= 1

        return timed_call


class _GunicornResponse:
    """What gunicorn's ``Logger.atoms`` reads of its response object."""

    def __init__(self, response: Any) -> None:
        self.status = f"{response.status_code} {response.reason_phrase}"
        self.sent = len(response.content)
        self.headers = list(response.items())


class _GunicornRequest:
    """What gunicorn's ``Logger.atoms`` reads of its request object: the headers."""

    def __init__(self, environ: dict[str, Any]) -> None:
        self.headers = [
            (name[5:].replace("_", "-"), value)
            for name, value in environ.items()
            if name.startswith("HTTP_") and isinstance(value, str)
        ]


def gunicorn_loggers() -> dict[str, Any]:
    """gunicorn's logger as config/gunicorn.conf.py configures it (``AccessLogger``), and
    gunicorn's own ``Logger`` with the same configuration (an access line for every request)."""
    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    from observability.access_log import AccessLogger

    conf = runpy.run_path(str(ROOT / "config" / "gunicorn.conf.py"))
    cfg = Config()
    cfg.set("accesslog", conf["accesslog"])
    cfg.set("access_log_format", conf["access_log_format"])
    cfg.set("logconfig_dict", conf["logconfig_dict"])
    return {"after": AccessLogger(cfg), "before": Logger(cfg)}


def variants(state: dict[str, Any]) -> dict[str, Callable[[], contextlib.AbstractContextManager]]:
    """Each variant: a context manager that undoes some of ADR 0028 for its block.
    ``state["access"]`` names the gunicorn logger the block uses (None: no access line)."""
    from observability import log_filters, request_context
    from payments.authorization import create as services
    from tests.support import log_redaction_reference as reference

    @contextlib.contextmanager
    def patched(module: object, name: str, value: object) -> Iterator[None]:
        saved = getattr(module, name)
        setattr(module, name, value)
        try:
            yield
        finally:
            setattr(module, name, saved)

    @contextlib.contextmanager
    def redaction() -> Iterator[None]:
        with (
            patched(log_filters, "redact", reference.redact),
            patched(request_context, "redact", reference.redact),
        ):
            yield

    def outcome_line() -> contextlib.AbstractContextManager:
        return patched(services, "request_line_note", lambda **_: False)

    @contextlib.contextmanager
    def access(name: str | None) -> Iterator[None]:
        saved, state["access"] = state["access"], name
        try:
            yield
        finally:
            state["access"] = saved

    @contextlib.contextmanager
    def before() -> Iterator[None]:
        with redaction(), outcome_line(), access("before"):
            yield

    @contextlib.contextmanager
    def silent() -> Iterator[None]:
        logging.disable(logging.CRITICAL)
        try:
            with access(None):
                yield
        finally:
            logging.disable(logging.NOTSET)

    return {
        "after": contextlib.nullcontext,
        "redaction as before": redaction,
        "outcome line as before": outcome_line,
        "access line as before": lambda: access("before"),
        "before": before,
        "no log lines": silent,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--payments", type=int, default=60, help="payments per block")
    parser.add_argument("--log-format", choices=("json", "console"), default="json")
    parser.add_argument("--database", default=None, help="benchmark database name")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    sandbox = start_sandbox()
    try:
        env = django_env(
            db,
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=SANDBOX_API_KEY,
            LOG_FORMAT=args.log_format,
        )
        os.environ.update(env)
        return run(args, api_key)
    finally:
        sandbox.stop()


def run(args: argparse.Namespace, api_key: str) -> int:
    import warnings

    import django

    warnings.filterwarnings("ignore")
    django.setup()
    from django.conf import settings
    from django.test import Client

    loggers = gunicorn_loggers()  # dictConfig again (the same configuration), then the file
    log_path = RESULTS / f"log_cost-{args.log_format}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stream = log_path.open("a")
    for holder in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(holder, "handlers", ()):
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(stream)
    settings.ALLOWED_HOSTS = ["*"]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    state: dict[str, Any] = {"access": "after"}
    clock = LoggingClock()
    logging.Logger._log = clock.timed(logging.Logger._log)  # type: ignore[method-assign]
    access_calls = {name: clock.timed(logger.access) for name, logger in loggers.items()}

    def post() -> int:
        started = time.monotonic()
        response = client.post(
            "/payments", PAYMENT_BODY, "application/json",
            HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex,
        )  # fmt: skip
        if state["access"] is not None:  # what gunicorn's worker does after the answer
            meta = response.wsgi_request.META
            environ = {**meta, "RAW_URI": meta["PATH_INFO"]}
            elapsed = datetime.timedelta(seconds=time.monotonic() - started)
            access_calls[state["access"]](
                _GunicornResponse(response), _GunicornRequest(environ), environ, elapsed
            )
        return response.status_code

    table = variants(state)
    for _ in range(20):
        post()  # warm-up: imports, the API key cached, the connection open
    blocks: dict[str, list[dict[str, float]]] = {name: [] for name in table}
    names = list(table)
    for n in range(args.rounds):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            with table[name]():
                post()
                stream.flush()
                size = log_path.stat().st_size
                cpu, logged = time.process_time(), clock.ns
                statuses = [post() for _ in range(args.payments)]
                python_ms = 1000 * (time.process_time() - cpu) / args.payments
                logging_ms = (clock.ns - logged) / 1e6 / args.payments
                stream.flush()
            assert set(statuses) == {201}, statuses
            written = _written(log_path, size)
            blocks[name].append({
                "python_ms": python_ms,
                "logging_ms": logging_ms,
                "lines": written.count(b"\n") / args.payments,
                "bytes": len(written) / args.payments,
            })  # fmt: skip
        print(
            f"round {n + 1}, logging CPU per payment: "
            + ", ".join(f"{k} {v[-1]['logging_ms']:.3f} ms" for k, v in blocks.items() if v)
        )
    rows, summary = [], {}
    for name in names:
        per = blocks[name]
        summary[name] = {
            "logging_ms": median(b["logging_ms"] for b in per),
            "logging_ratio_to_after": median(
                ratio(b["logging_ms"], a["logging_ms"])
                for a, b in zip(blocks["after"], per, strict=True)
            ),
            "python_ms": median(b["python_ms"] for b in per),
            "python_ratio_to_after": median(
                ratio(b["python_ms"], a["python_ms"])
                for a, b in zip(blocks["after"], per, strict=True)
            ),
            "lines": median(b["lines"] for b in per),
            "bytes": median(b["bytes"] for b in per),
        }
        rows.append((
            name, summary[name]["logging_ms"], summary[name]["logging_ratio_to_after"],
            summary[name]["python_ms"], summary[name]["python_ratio_to_after"],
            summary[name]["lines"], summary[name]["bytes"],
        ))  # fmt: skip
    print()
    print_table(
        ["variant", "logging CPU ms per payment", "/ after", "Python CPU ms per payment",
         "/ after", "lines per payment", "bytes per payment"],
        rows,
    )  # fmt: skip
    before = summary["before"]
    print(
        f"\nlogging's CPU per payment, before / after (median of the rounds' ratios): "
        f"{before['logging_ratio_to_after']:.1f} ({before['logging_ms']:.3f} ms -> "
        f"{summary['after']['logging_ms']:.3f} ms); the whole payment's Python CPU, before / "
        f"after: {before['python_ratio_to_after']:.2f}"
    )
    path = write_results(
        f"log_cost-{args.log_format}",
        {"machine": machine_context(), "settings": vars(args), "summary": summary,
         "blocks": blocks},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


def _written(path: Path, since: int) -> bytes:
    """What was written to ``path`` after its first ``since`` bytes."""
    with path.open("rb") as file:
        file.seek(since)
        return file.read()


if __name__ == "__main__":
    sys.exit(main())
