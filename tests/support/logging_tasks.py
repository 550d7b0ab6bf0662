"""A Celery task that logs what it is given, for the tests of the worker's log lines
(tests/e2e/test_process_logs.py): a real worker imports it with ``--include``."""

from __future__ import annotations

import logging

from celery import shared_task

logger = logging.getLogger("tests.logging_tasks")


@shared_task(name="tests.log_what_it_gets")
def log_what_it_gets(text: str) -> str:
    """Log ``text`` as a message, an ``extra`` field and inside a traceback; return it (the
    worker logs a task's return value too)."""
    logger.warning("the task got %s", text, extra={"given": text})
    try:
        raise ValueError(f"cannot use {text}")  # noqa: TRY301 - a traceback to log
    except ValueError:
        logger.exception("and failed on it")
    return text
