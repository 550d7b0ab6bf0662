"""A project-local PostgreSQL for machines without ``DATABASE_URL``.

When ``DATABASE_URL`` is not set, the settings call :func:`embedded_database_config`, which
starts (or reuses) a PostgreSQL 16 server from the ``pgserver`` wheel with its data directory
in ``.pgdata/`` at the project root. It listens on a Unix socket only, inside that directory,
and keeps running after the process that started it exits, so ``make run`` and ``make test``
share it. ``make db-stop`` stops it.

There is deliberately no SQLite fallback: unique constraints, row locks and transaction
isolation are what the idempotency layer relies on.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from config.pooler import apply_pooler

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def embedded_data_dir() -> Path:
    """Return the data directory of the embedded server (``PGSERVER_DATA_DIR`` or ``.pgdata``)."""
    return Path(os.environ.get("PGSERVER_DATA_DIR", PROJECT_ROOT / ".pgdata")).resolve()


def embedded_database_config(name: str = "postgres") -> dict[str, Any]:
    """Start or reuse the embedded PostgreSQL and return a Django ``DATABASES`` entry.

    Raises ``RuntimeError`` with a hint when the server cannot start.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import pgserver
    except ImportError as exc:  # pragma: no cover - pgserver is a declared dependency
        raise RuntimeError(
            "DATABASE_URL is not set and the 'pgserver' package is not installed; "
            "run 'make install' or set DATABASE_URL."
        ) from exc

    data_dir = embedded_data_dir()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        server = pgserver.get_server(data_dir, cleanup_mode=None)
    # pgserver listens on a Unix socket in its data directory; libpq takes a directory as host.
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(server.pgdata),
        "PORT": "",
    }


def database_settings(env: Any, *, allow_embedded: bool) -> dict[str, dict[str, Any]]:
    """Return Django ``DATABASES`` for PostgreSQL from ``DATABASE_URL`` or the embedded server.

    ``env`` is a ``django-environ`` ``Env``. ``ATOMIC_REQUESTS`` is always off: the payment
    flow commits before it calls the acquirer. Missing with ``allow_embedded`` false
    (production): an entry without a database name, which nothing may use; the production
    check ``config.E001`` names ``DATABASE_URL`` and stops every process first, while
    ``collectstatic`` (no database) still runs. Raises ``ImproperlyConfigured`` when the URL is
    not PostgreSQL.
    """
    from django.core.exceptions import ImproperlyConfigured

    if env("DATABASE_URL", default=""):
        default = env.db("DATABASE_URL")
    elif allow_embedded:
        default = embedded_database_config()
    else:
        default = {"ENGINE": "django.db.backends.postgresql", "NAME": ""}
    if default["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_URL must point to PostgreSQL (no SQLite here).")
    default["ATOMIC_REQUESTS"] = False
    default["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    # No SELECT 1 before each request's first query (ADR 0026): a connection the server dropped
    # fails that request with a 503 (ADR 0020) and is closed at its end; the next reconnects.
    default["CONN_HEALTH_CHECKS"] = env.bool("DATABASE_CONN_HEALTH_CHECKS", default=False)
    default["OPTIONS"] = connection_options(env, default.get("OPTIONS") or {})
    # The hot path's statements are prepared on a connection's first use of each (ADR 0031,
    # idempotency/prepared_cursor.py); Django's own cursors bind on the client and never prepare.
    prepared = env.bool("DATABASE_PREPARED_STATEMENTS", default=True)
    default["OPTIONS"].setdefault("prepare_threshold", 0 if prepared else None)
    # Behind PgBouncer's transaction pooling (DATABASE_POOLER): no session state (config/pooler.py).
    return {"default": apply_pooler(env, default)}


def connection_options(env: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Return ``options`` (a ``DATABASES`` ``OPTIONS`` dict, perhaps from the URL's query) with
    the timeouts every connection carries: libpq's ``connect_timeout`` (whole seconds) and the
    server-side ``statement_timeout``, ``lock_timeout`` and
    ``idle_in_transaction_session_timeout`` (milliseconds, 0 turns one off), added to its
    ``options`` string as ``-c name=value``.

    The defaults (3 s, 5 s, 2 s, 10 s) stay well below the web server's worker timeout
    (``WEB_TIMEOUT``, 30 s), so a stuck statement, lock wait or forgotten transaction ends as a
    database error, answered ``503 service_unavailable``, before gunicorn kills the worker in
    the middle of a request (docs/adr/0020-database-outages-and-timeouts.md). A parameter
    already in the URL's query wins over the environment. Raises ``ValueError`` (from
    django-environ) for a value that is not an integer.
    """
    timeouts = {
        "statement_timeout": env.int("DATABASE_STATEMENT_TIMEOUT_MS", default=5000),
        "lock_timeout": env.int("DATABASE_LOCK_TIMEOUT_MS", default=2000),
        "idle_in_transaction_session_timeout": env.int(
            "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS", default=10000
        ),
    }
    result = dict(options)
    result.setdefault("connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT_SECONDS", default=3))
    parameters = str(result.get("options", ""))
    for parameter, milliseconds in timeouts.items():
        if f"{parameter}=" not in parameters:
            parameters += f" -c {parameter}={milliseconds}"
    result["options"] = parameters.strip()
    return result


def stop_embedded_database() -> bool:
    """Stop the embedded server if it runs; return whether it was running (``make db-stop``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from pgserver.postgres_server import pg_ctl

    data_dir = embedded_data_dir()
    if not (data_dir / "postmaster.pid").exists():
        return False
    user = "pgserver" if hasattr(os, "geteuid") and os.geteuid() == 0 else None
    pg_ctl(["-w", "stop"], pgdata=data_dir, user=user)
    return True


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["stop"]:
        sys.exit("usage: python -m config.embedded_db stop")
    print("stopped" if stop_embedded_database() else "not running")
