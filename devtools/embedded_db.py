"""A project-local PostgreSQL for machines without ``DATABASE_URL``.

A developer tool (``make run``, ``make test``), not part of the production image: when
``DATABASE_URL`` is not set, the local and test settings (``config.database.database_settings``)
call :func:`embedded_database_config`, which
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
        sys.exit("usage: python -m devtools.embedded_db stop")
    print("stopped" if stop_embedded_database() else "not running")
