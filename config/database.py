"""The ``DATABASES`` setting: PostgreSQL from ``DATABASE_URL`` (or, in development and tests,
the embedded server of :mod:`devtools.embedded_db`), with the connection timeouts of ADR 0020,
the prepared statements of ADR 0031 and the PgBouncer adaptations of :mod:`config.pooler`.

Wiring: the settings modules call :func:`database_settings`; no app imports this module.
"""

from __future__ import annotations

from typing import Any

from config.pooler import apply_pooler


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
        from devtools.embedded_db import embedded_database_config  # local and test only

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
