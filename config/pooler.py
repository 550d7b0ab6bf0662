"""What changes when the service reaches PostgreSQL through PgBouncer in transaction pooling mode.

``DATABASE_POOLER`` names what sits between the service and PostgreSQL: ``none`` (the
default: a direct connection, or a pooler in session mode) or ``pgbouncer`` (transaction
pooling: each transaction may run on another server connection, so nothing may outlive a
transaction on the server). With ``pgbouncer``, :func:`apply_pooler` makes the ``DATABASES``
entry safe for that:

- ``DISABLE_SERVER_SIDE_CURSORS``: Django's ``.iterator()`` would otherwise open a named
  cursor (``WITH HOLD`` in autocommit) that the next transaction cannot find.
- ``prepare_threshold`` ``None`` and client-side binding: psycopg never prepares a named
  statement (Django's default for psycopg 3, forced here; an explicit
  ``server_side_binding`` is refused). PgBouncer 1.18 does not track prepared statements.
- No ``options`` startup parameter: PgBouncer refuses a connection that sends one (unless it
  ignores it, which would drop the timeouts silently). The server-side timeouts of ADR 0020
  (``statement_timeout``, ``lock_timeout``, ``idle_in_transaction_session_timeout``) are set
  instead where transaction pooling keeps them: on the role (``ALTER ROLE ... SET``) or in
  PgBouncer's ``connect_query`` for the database; :func:`server_timeout_sql` writes those
  statements from the same environment variables, and docs/scaling.md shows both.

The code keeps no other session state: no ``SET`` outside a transaction, no advisory lock, no
``LISTEN``, no temporary table (the time zone is a parameter PgBouncer tracks per client).
``scripts/test_pgbouncer.py`` (``make test-pgbouncer``) runs the concurrency and end-to-end
tests and a throughput run through a private PgBouncer to prove it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

POOLERS = ("none", "pgbouncer")
#: The ``-c`` parameters ``config.database.connection_options`` adds to ``options``.
SERVER_TIMEOUTS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")


def apply_pooler(env: Any, default: dict[str, Any]) -> dict[str, Any]:
    """Return ``default`` (a ``DATABASES`` entry) adapted to ``DATABASE_POOLER`` (``env``, a
    django-environ ``Env``). Raises ``ImproperlyConfigured`` for an unknown pooler or for
    ``server_side_binding`` (named prepared statements) behind PgBouncer."""
    pooler = env("DATABASE_POOLER", default="none").strip().lower() or "none"
    if pooler not in POOLERS:
        raise ImproperlyConfigured(f"DATABASE_POOLER must be one of {', '.join(POOLERS)}.")
    if pooler == "none":
        return default
    options = dict(default.get("OPTIONS") or {})
    if options.get("server_side_binding"):
        raise ImproperlyConfigured(
            "server_side_binding prepares statements; PgBouncer's transaction pooling cannot."
        )
    options.pop("options", None)  # the timeouts live on the role or in connect_query
    options["prepare_threshold"] = None
    return {**default, "OPTIONS": options, "DISABLE_SERVER_SIDE_CURSORS": True}


def server_timeout_sql(options: dict[str, Any], *, role: str | None = None) -> list[str]:
    """The ``SET`` statements (or, with ``role``, ``ALTER ROLE role SET`` statements) that give a
    server connection the timeouts of ``options`` (a ``DATABASES`` ``OPTIONS`` dict from
    ``config.database.connection_options``, before :func:`apply_pooler`), in milliseconds."""
    pairs = (part.split("=", 1) for part in str(options.get("options", "")).split() if "=" in part)
    timeouts = {name: int(value) for name, value in pairs if name in SERVER_TIMEOUTS}
    prefix = f'ALTER ROLE "{role}" SET' if role else "SET"
    return [f"{prefix} {name} = {value}" for name, value in timeouts.items()]
