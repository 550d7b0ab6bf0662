"""A pytest plugin that writes every SQL statement the tests send to the tables one payment
writes (payments, events, idempotency keys, the webhook outbox) to a JSON-lines file, with its
parameters bound, for ``bench/index_cost.py plans`` (which EXPLAINs each under two index sets).

    SQL_CAPTURE=bench/results/sql-capture.jsonl .venv/bin/python -m pytest -p bench.sql_capture \
        tests/integration/test_admin.py ...

Not loaded by the suite; nothing is captured unless ``-p bench.sql_capture`` is given.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

#: The tables whose indexes bench/index_cost.py compares.
TABLES = (
    "payments_payment",
    "payments_paymentevent",
    "idempotency_idempotencykey",
    "webhooks_event",
    "webhooks_delivery",
)
_MENTIONS = re.compile(r'"(' + "|".join(TABLES) + r')"')
_out: Any = None


def _capture(execute, sql, params, many, context):
    try:
        return execute(sql, params, many, context)
    finally:
        if not many and sql and _MENTIONS.search(sql):
            try:
                text = context["connection"].ops.compose_sql(sql, params)
            except Exception:  # noqa: BLE001 - a statement that cannot be bound is skipped
                text = None
            if text:
                line = {"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "sql": text}
                _out.write(json.dumps(line) + "\n")
                _out.flush()


def _install(connection, **_: Any) -> None:
    if _capture not in connection.execute_wrappers:
        connection.execute_wrappers.append(_capture)


def pytest_configure(config) -> None:
    """Open the output file (``$SQL_CAPTURE``, default ``bench/results/sql-capture.jsonl``)
    and wrap every database connection, the ones opened later included."""
    global _out
    from django.db import connections
    from django.db.backends.signals import connection_created

    path = os.environ.get("SQL_CAPTURE", "bench/results/sql-capture.jsonl")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    _out = open(path, "a")  # noqa: SIM115 - open for the whole session
    connection_created.connect(_install)
    for connection in connections.all():
        _install(connection)
