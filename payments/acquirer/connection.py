"""No database connection held while the acquirer thinks (ADR 0048).

An authorization takes the acquirer hundreds of milliseconds to seconds; the two short
transactions around it take a few milliseconds. A request thread that kept its PostgreSQL
connection through the call would hold it idle for almost the whole request, so the number of
payments in flight would be capped by the connections the database can take.
:func:`connection_release_before_call` runs just before every call out (after the request to
send is built from the rows, so nothing lazy reads the database during the call): with
Django's psycopg pool configured (``DATABASE_POOL``, ``config/database.py``), it hands the
connection back to the pool; the next query (phase 2) takes one again, often the same. Without
a pool (the Celery worker, or ``DATABASE_POOL=false``) closing would mean reconnecting, so the
connection stays, as before. Behind PgBouncer in transaction mode the server connection is
already free between transactions; the pool then bounds the client connections.

:func:`waiting_on_acquirer` wraps a call out: the connection goes back first, and the web
thread's run slot (ADR 0053, ``resilience.run_slot_lent``) may go to a queued request while
the call lasts more than a few milliseconds, so a thread waiting on the acquirer holds neither.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from resilience import run_slot_lent

__all__ = ["connection_release_before_call", "waiting_on_acquirer"]


def connection_release_before_call() -> None:
    """Give this thread's database connection back to the pool before a network call.

    Raises ``RuntimeError`` inside a transaction (``atomic``): no network call holds a row
    lock, and a connection in a transaction cannot be handed back. Does nothing without a
    pool or without an open connection. Sends no SQL: the pool takes the connection back as
    it is (idle, autocommit).
    """
    if connection.in_atomic_block:
        raise RuntimeError("The acquirer must not be called inside a database transaction.")
    if connection.connection is not None and getattr(connection, "pool", None) is not None:
        connection.close()


@contextmanager
def waiting_on_acquirer() -> Iterator[None]:
    """Around a call to the acquirer: this thread's database connection back to the pool
    first (:func:`connection_release_before_call`, ``RuntimeError`` inside a transaction),
    then its run slot lent for the call (``resilience.run_slot_lent``; nothing outside the
    web process's run-slot pool). The next query takes a connection again."""
    connection_release_before_call()
    with run_slot_lent():
        yield
