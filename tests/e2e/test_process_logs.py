"""The logs of the processes Celery runs, as they run in production (JSON lines): a real worker
and beat, and a management command that enqueues. Celery replaces the root handler unless told
not to; here every line of theirs goes through the project's formatter, so a card number that
a task logs (in a message, a field, a traceback or its return value), or that beat's schedule
holds, is redacted, and the request id bound where a task was enqueued is in the task's lines.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.processes import ROOT, service_env, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TASK_CARD = "4111 1111 1111 1111"
BEAT_CARD = "6011111111111117"
COMMAND_CARD = "5555-5555-5555-4444"
REQUEST_ID = "req_e2eproducer"
CELERY = [sys.executable, "-m", "celery", "-A", "config"]


def json_lines(text: str) -> list[dict]:
    """The log lines of ``text`` (the worker's banner, printed before logging starts, aside):
    each one must be a JSON object."""
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
        else:  # Celery's own format: "[2026-12-01 12:00:00,000: INFO/MainProcess] ..."
            assert not re.match(r"\[\d{4}-", line), (
                f"a line not from the project's formatter: {line}"
            )
    return lines


@pytest.fixture
def celery_logs(tmp_path) -> Iterator[tuple[dict, dict[str, object]]]:
    """A worker and beat at DEBUG with LOG_FORMAT=json and the campaign settings (beat's entry
    named after BEAT_CARD); yields the environment and their log paths."""
    env = service_env(
        LOG_FORMAT="json",
        DJANGO_SETTINGS_MODULE="campaigns.settings",
        CAMPAIGN_BEAT_CARD=BEAT_CARD,
    )
    paths = {name: tmp_path / f"{name}.log" for name in ("worker", "beat")}
    commands = {
        "worker": [*CELERY, "worker", "--pool", "solo", "--loglevel", "DEBUG",
                   "--include", "tests.support.logging_tasks", "--without-heartbeat",
                   "--without-gossip", "--without-mingle"],
        "beat": [*CELERY, "beat", "--loglevel", "DEBUG", "--schedule",
                 str(tmp_path / "beat-schedule")],
    }  # fmt: skip
    processes = []
    files = []
    try:
        for name, command in commands.items():
            files.append(paths[name].open("w"))
            processes.append(
                subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=files[-1], stderr=subprocess.STDOUT
                )
            )
        yield env, paths
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        for file in files:
            file.close()


def test_worker_beat_and_command_logs_are_structured_and_redacted(celery_logs):
    env, paths = celery_logs
    command = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         "import logging, structlog;"
         f"structlog.contextvars.bind_contextvars(request_id={REQUEST_ID!r});"
         f"logging.getLogger('tests.command').warning('command got %s', {COMMAND_CARD!r});"
         "from tests.support.logging_tasks import log_what_it_gets as t;"
         f"t.delay({TASK_CARD!r})"],
        cwd=ROOT, env=env, check=True, timeout=60, capture_output=True, text=True,
    )  # fmt: skip

    def both_tasks_ran() -> bool:
        text = paths["worker"].read_text()
        return (
            "tests.log_what_it_gets" in text
            and "reconcile_payment" in text
            and (text.count("succeeded in") >= 2)
        )

    wait_until(both_tasks_ran, timeout=60, what="the worker to run both tasks")
    worker_text, beat_text = paths["worker"].read_text(), paths["beat"].read_text()
    for text in (worker_text, beat_text, command.stdout + command.stderr):
        # Whole numbers only: a 4-digit group can turn up in a task id or a timestamp.
        for card in (TASK_CARD, BEAT_CARD, COMMAND_CARD, "4111111111111111", "5555555555554444"):
            assert card not in text, card
    assert "[card number redacted]" in command.stderr
    worker = json_lines(worker_text)
    task_lines = [line for line in worker if line.get("task_name") == "tests.log_what_it_gets"]
    assert {line["request_id"] for line in task_lines} == {REQUEST_ID}
    (logged,) = [line for line in task_lines if line["event"].startswith("the task got")]
    assert logged["event"] == "the task got [card number redacted]"
    assert logged["given"] == "[card number redacted]"
    (failed,) = [line for line in task_lines if line["event"] == "and failed on it"]
    assert failed["exception"].endswith("ValueError: cannot use [card number redacted]")
    beat = json_lines(beat_text)
    assert any("campaign card [card number redacted]" in line["event"] for line in beat)
    reconcile = [
        line for line in worker if line.get("task_name") == "payments.tasks.reconcile_payment"
    ]
    assert reconcile and all(line["request_id"].startswith("req_") for line in reconcile)
