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
    return {"default": pool_settings(env, apply_pooler(env, default))}


def pool_settings(env: Any, default: dict[str, Any]) -> dict[str, Any]:
    """Return ``default`` (a ``DATABASES`` entry) with Django's psycopg connection pool when
    ``DATABASE_POOL`` is true (ADR 0048): ``OPTIONS["pool"]`` with ``min_size``
    (``DATABASE_POOL_MIN_SIZE``, 2), ``max_size`` (``DATABASE_POOL_MAX_SIZE``, 8) connections
    per process and ``timeout`` (``DATABASE_POOL_TIMEOUT_SECONDS``, 3 s: how long a request
    waits for a free connection before its ``503``), and ``CONN_MAX_AGE`` 0, which the pool
    requires (a connection goes back to the pool at the end of each request, and before each
    acquirer call: ``payments.acquirer.connection``).

    The web process turns it on (``config/gunicorn.conf.py``); other processes keep one
    persistent connection per thread (``CONN_MAX_AGE``), since a pool opened in a process that
    forks afterwards (Celery's prefork parent) would not work in its children. Raises
    ``ImproperlyConfigured`` for a minimum above the maximum or a timeout that is not positive.
    """
    from django.core.exceptions import ImproperlyConfigured

    if not env.bool("DATABASE_POOL", default=False):
        return default
    pool = {
        "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=2),
        "max_size": env.int("DATABASE_POOL_MAX_SIZE", default=8),
        "timeout": env.float("DATABASE_POOL_TIMEOUT_SECONDS", default=3.0),
        # The pool's name in psycopg_pool's log lines and stats.
        "name": "web",
    }
    if not 0 <= pool["min_size"] <= pool["max_size"] or pool["max_size"] < 1:
        raise ImproperlyConfigured("DATABASE_POOL_MIN_SIZE must be 0 to DATABASE_POOL_MAX_SIZE.")
    if pool["timeout"] <= 0:
        raise ImproperlyConfigured("DATABASE_POOL_TIMEOUT_SECONDS must be positive.")
    return {**default, "CONN_MAX_AGE": 0, "OPTIONS": {**default["OPTIONS"], "pool": pool}}


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
