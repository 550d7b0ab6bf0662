"""A cursor whose statements PostgreSQL prepares once per connection (the hot path, ADR 0031).

Django's psycopg backend binds parameters on the client by default (``ClientCursor``): every
statement reaches the server as new text, which the server parses and plans again. The hot
path's few statements (the one-statement claim, phase 2, the outbox event) are long CTEs whose
planning costs more server CPU than executing them, so they run through :func:`prepared_cursor`
instead: parameters bound by the server, and the statement prepared (``PREPARE``, psycopg's
``_pg3_N`` names) the first time a connection sends it, executed from the prepared plan after.
Everything else keeps Django's client-side binding.

Whether statements are prepared is the connection's ``prepare_threshold`` (``DATABASES``
``OPTIONS``): ``config.database.database_settings`` sets 0 (prepare at once) unless
``DATABASE_PREPARED_STATEMENTS`` is false; behind PgBouncer's transaction pooling
(``config/pooler.py``) it is None, and the same statements run server-bound but unprepared (an
unnamed statement lives within one transaction, which that pooling allows).

The statements are written with ``%s`` like every other, and reach psycopg with PostgreSQL's
own ``$1``, ``$2`` ... (:func:`numbered_placeholders`, cached per statement text) through its
raw-query cursor, so psycopg does not convert them again per execution: it caches its own
conversion only for statements of at most 50 parameters, and the one-statement claim has more,
so it was re-parsed on every payment (9 % of a web worker's CPU under load, measured with
py-spy; docs/benchmarks.md).

psycopg's OpenTelemetry instrumentation traces the cursors a connection's ``cursor_factory``
makes; this cursor is made here, so it makes its own span per statement when the running span
records (a traced, sampled request; ADR 0044), with the instrumentation's attributes.
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql.base import CursorDebugWrapper, ServerBindingCursor
from django.db.backends.utils import CursorWrapper
from opentelemetry import trace
from psycopg.raw_cursor import RawCursorMixin

from observability.trace_context import tracer

_PLACEHOLDER = re.compile(r"%.?", re.DOTALL)


@functools.lru_cache(maxsize=256)
def numbered_placeholders(query: str) -> str:
    """``query`` (a statement with psycopg's ``%s`` placeholders and ``%%`` for a literal
    ``%``) with each ``%s`` as PostgreSQL's positional ``$1``, ``$2`` ... in order and each
    ``%%`` as ``%``: the text psycopg would send, made once per distinct statement (the hot
    path has a handful). Raises ``ValueError`` for any other ``%`` form: ``%d`` or a lone
    ``%``, which psycopg refuses too, and named ``%(name)s`` or psycopg's ``%b`` and ``%t``,
    which these statements do not use."""
    numbers = itertools.count(1)

    def replace(match: re.Match[str]) -> str:
        if match[0] == "%s":
            return f"${next(numbers)}"
        if match[0] == "%%":
            return "%"
        raise ValueError(f"only %s placeholders and %% are supported, not {match[0]!r}")

    return _PLACEHOLDER.sub(replace, query)


class _ServerBindingCursor(RawCursorMixin, ServerBindingCursor):
    """Django's server-binding cursor on psycopg's raw queries (the statement's ``%s`` numbered
    once, :func:`numbered_placeholders`), each statement a client span of ``db.system``
    ``postgresql`` when the running span records (never its parameters)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        numbered = numbered_placeholders(query)
        if not trace.get_current_span().is_recording():
            return super().execute(numbered, params, **kwargs)
        statement = str(query)
        attributes = {"db.system": "postgresql", "db.statement": statement}
        with tracer.start_as_current_span(
            statement.split(None, 1)[0].upper() if statement.strip() else "postgresql",
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
        ):
            return super().execute(numbered, params, **kwargs)


class _LoggedPreparedCursor(CursorDebugWrapper):
    """Django's debug cursor (the query log of ``DEBUG`` and ``CaptureQueriesContext``) for a
    server-bound cursor: the logged text is the statement with its parameters inlined as
    literals (``ops.compose_sql``), as a client-bound cursor's log shows it, since a prepared
    statement's own text holds only ``$n`` placeholders."""

    def execute(self, sql: str, params: Any = None) -> Any:
        with self.debug_sql(self.db.ops.compose_sql(sql, params)):
            return self._execute_with_wrappers(sql, params, many=False, executor=self._execute)


def prepared_cursor(alias: str = DEFAULT_DB_ALIAS) -> CursorWrapper:
    """A Django cursor (``CursorWrapper``: query logging, ``execute_wrapper`` hooks and error
    translation as usual) on database ``alias``'s connection, opened if needed, whose
    statements are bound by the server and prepared per the connection's
    ``prepare_threshold``. Its parameters must be typed enough for the server: a ``str`` or
    ``None`` in a position the statement does not type is read as ``text``. Use it as a context
    manager, like ``connection.cursor()``. Raises Django's ``OperationalError`` when the
    database cannot be reached."""
    db = connections[alias]
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    with db.wrap_database_errors:
        cursor = _ServerBindingCursor(db.connection)
    if db.queries_logged:
        return _LoggedPreparedCursor(cursor, db)
    return db.make_cursor(cursor)
