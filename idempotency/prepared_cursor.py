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

psycopg's OpenTelemetry instrumentation traces the cursors a connection's ``cursor_factory``
makes; this cursor is made here, so it makes its own span per statement when the running span
records (a traced, sampled request; ADR 0044), with the instrumentation's attributes.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql.base import CursorDebugWrapper, ServerBindingCursor
from django.db.backends.utils import CursorWrapper
from opentelemetry import trace

from observability.trace_context import tracer


class _ServerBindingCursor(ServerBindingCursor):
    """Django's server-binding cursor, each statement a client span of ``db.system``
    ``postgresql`` when the running span records (never its parameters)."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if not trace.get_current_span().is_recording():
            return super().execute(query, params, **kwargs)
        statement = str(query)
        attributes = {"db.system": "postgresql", "db.statement": statement}
        with tracer.start_as_current_span(
            statement.split(None, 1)[0].upper() if statement.strip() else "postgresql",
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
        ):
            return super().execute(query, params, **kwargs)


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
