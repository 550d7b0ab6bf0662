"""The parts behind a newcomer's first hour, each alone: idle Celery lines at DEBUG, a ``HEAD``
answer without a body, the sweep of a killed process's metrics directory, ``make run``'s last
line, the receiver's exit, and the key prefixes (docs/adr/0039)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.http import HttpResponse, StreamingHttpResponse

from acquirers.specs import parse_acquirers
from devtools.run_stack import kept_data, summary_line
from merchants import services
from observability.log_filters import IdleTasksAtDebug
from observability.metrics_dir import metrics_dirs_sweep
from observability.request_context import head_body_remove
from webhooks import receiver

SUCCEEDED = "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def celery_loggers() -> Iterator[Collect]:
    """celery.beat and celery.app.trace with the filter, as logging_config wires them."""
    handler = Collect()
    names = ("celery.beat", "celery.app.trace", "celery.worker.strategy")
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in names]
    idle = IdleTasksAtDebug()
    for logger, _ in saved:
        logger.addFilter(idle)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    yield handler
    for logger, level in saved:
        logger.removeFilter(idle)
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = True


def succeeded(return_value: str, runtime: float = 0.0638413990000368) -> dict[str, object]:
    return {"name": "t", "id": "1", "runtime": runtime, "return_value": return_value}


def test_beat_ticks_receipts_and_empty_outcomes_are_debug(celery_loggers):
    beat, trace = logging.getLogger("celery.beat"), logging.getLogger("celery.app.trace")
    beat.info("Scheduler: Sending due task %s (%s)", "sweep", "webhooks.tasks.deliver_due")
    logging.getLogger("celery.worker.strategy").info("Task %(name)s[%(id)s] received", {"id": 1})
    for nothing in ("0", "None", "[]", "{}", "{'resolved': 0, 'failed': 0}"):
        trace.info(SUCCEEDED, succeeded(nothing))
    assert celery_loggers.records == []


def test_a_task_that_did_something_or_failed_keeps_its_level(celery_loggers):
    trace = logging.getLogger("celery.app.trace")
    for something in ("3", "{'resolved': 1, 'failed': 0}", "'done'"):
        trace.info(SUCCEEDED, succeeded(something))
    trace.error(
        "Task %(name)s[%(id)s] raised unexpected: %(exc)s", {"name": "t", "id": 1, "exc": "E"}
    )
    logging.getLogger("celery.beat").info("beat: Starting...")
    levels = [(r.levelname, r.getMessage()[:40]) for r in celery_loggers.records]
    assert [level for level, _ in levels] == ["INFO"] * 3 + ["ERROR", "INFO"]
    # 0.0638413990000368 has 16 digits a redaction could take for a card number
    assert "succeeded in 0.0638s: 3" in celery_loggers.records[0].getMessage()


def test_at_debug_the_moved_lines_are_kept_as_debug(celery_loggers):
    logging.getLogger("celery.beat").setLevel(logging.DEBUG)
    logging.getLogger("celery.beat").info("Scheduler: Sending due task %s", "sweep")
    assert [r.levelname for r in celery_loggers.records] == ["DEBUG"]


@pytest.fixture
def no_connection_cleanup() -> Iterator[None]:
    """Closing a response sends ``request_finished``, on which Django closes old database
    connections; this test touches no database, so that handler is set aside for it."""
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_finished.connect(close_old_connections)


@pytest.mark.usefixtures("no_connection_cleanup")
def test_a_head_answer_keeps_its_length_and_loses_its_body():
    response = HttpResponse(b'{"status": "ok"}', content_type="application/json")
    head_body_remove(response)
    assert response.content == b"" and response["Content-Length"] == "16"

    closed = []

    class Body:
        def __iter__(self):
            yield b"chunk"

        def close(self):
            closed.append(True)

    streaming = StreamingHttpResponse(Body())
    head_body_remove(streaming)
    assert b"".join(streaming) == b""
    streaming.close()  # what the WSGI server calls: the original body is closed
    assert closed == [True]


def test_the_sweep_removes_only_directories_of_processes_that_are_gone(tmp_path: Path):
    gone = tmp_path / "payments-metrics-worker-101-abc"
    running = tmp_path / "payments-metrics-web-202-def"
    other = tmp_path / "payments-metrics-notes"
    for path in (gone, running, other):
        path.mkdir()
    (gone / "counter_101.db").write_bytes(b"x")
    removed = metrics_dirs_sweep(tmp_path, alive=lambda pid: pid == 202)
    assert removed == [gone]
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, running.name]


def test_make_runs_last_line():
    assert summary_line(130, 65.2, asked=True).startswith("make run: stopped after 1 min 5 s")
    assert summary_line(0, 3, asked=False).startswith("make run: stopped after 0 min 3 s")
    failed = summary_line(1, 10, asked=False)
    assert failed.startswith("*** make run: a process exited (rc=1)")
    assert "Supervision and heartbeats" in failed
    kept = kept_data({"DATABASE_URL": "postgres://db/x", "CELERY_BROKER_URL": "redis://r"})
    assert kept == "the sandbox's charges in .sandbox/ (make db-stop stops the embedded Redis)"
    assert kept_data({}).startswith("the database in .pgdata/, the sandbox's")
    assert summary_line(130, 1, asked=True, kept=kept).endswith(f"; kept: {kept}.")


def test_the_receiver_gives_up_after_its_timeout_with_1(capsys):
    code = receiver.main(
        ["--port", "0", "--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--exit-after",
         "1", "--timeout", "0.2"]
    )  # fmt: skip
    assert code == 1 and "no 1 event(s) within 0.2 s" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mode", "acquirers", "single_key", "prefix"),
    [
        ("test", None, "sk_live_real", "sk_test_"),
        ("live", None, "sandbox_sk_dev", "sk_live_"),
        ("auto", None, "sandbox_sk_dev", "sk_test_"),
        ("auto", None, "acq_live_123", "sk_live_"),
        ("auto", '[{"name": "a", "base_url": "http://127.0.0.1:1", "api_key": "sandbox_sk_a"},'
                 ' {"name": "b", "base_url": "http://127.0.0.1:2", "api_key": "sandbox_sk_b"}]',
         "acq_live_123", "sk_test_"),
        ("auto", '[{"name": "a", "base_url": "http://127.0.0.1:1", "api_key": "sandbox_sk_a"},'
                 ' {"name": "b", "base_url": "https://acquirer.example", "api_key": "live_b"}]',
         "sandbox_sk_dev", "sk_live_"),
    ],
)  # fmt: skip
def test_the_key_prefix_says_whether_money_can_move(settings, mode, acquirers, single_key, prefix):
    settings.API_KEY_MODE = mode
    settings.ACQUIRERS = parse_acquirers(acquirers) if acquirers else None
    settings.ACQUIRER_API_KEY = single_key
    assert services.api_key_prefix() == prefix
    assert prefix in services.API_KEY_PREFIXES


def test_a_key_never_holds_a_card_number(monkeypatch):
    draws = iter(["ab_4111111111111111_" + "a" * 23, "b" * 43])
    monkeypatch.setattr(services.secrets, "token_urlsafe", lambda n: next(draws))
    assert services._new_raw_key("sk_test_") == "sk_test_" + "b" * 43


def test_both_prefixes_are_redacted_and_as_long():
    from observability.log_filters import KEY_PREFIXES, redact

    for prefix in services.API_KEY_PREFIXES:
        assert prefix in KEY_PREFIXES
        assert "Zx9" not in redact(f"key {prefix}Zx9abcdef")
    assert len(services.API_KEY_PREFIX) == len(services.API_KEY_TEST_PREFIX)
