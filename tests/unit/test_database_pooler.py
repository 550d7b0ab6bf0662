"""DATABASE_POOLER=pgbouncer leaves nothing on a server connection that outlives a transaction
(config/pooler.py); scripts/test_pgbouncer.py runs the real thing through PgBouncer."""

from __future__ import annotations

import environ
import pytest
from django.core.exceptions import ImproperlyConfigured

from config.database import database_settings
from config.pooler import server_timeout_sql

URL = "postgres://postgres@127.0.0.1:5432/payments"


def settings_for(monkeypatch, url: str = URL, **variables: str) -> dict:
    monkeypatch.setenv("DATABASE_URL", url)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return database_settings(environ.Env(), allow_embedded=False)["default"]


def test_without_a_pooler_the_timeouts_travel_in_the_startup_options(monkeypatch):
    monkeypatch.delenv("DATABASE_POOLER", raising=False)
    default = settings_for(monkeypatch)
    assert "statement_timeout=5000" in default["OPTIONS"]["options"]
    assert not default.get("DISABLE_SERVER_SIDE_CURSORS", False)


def test_behind_pgbouncer_no_session_state_is_asked_for(monkeypatch):
    default = settings_for(monkeypatch, DATABASE_POOLER="pgbouncer")
    assert default["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert default["OPTIONS"]["prepare_threshold"] is None  # psycopg never prepares
    assert "options" not in default["OPTIONS"]  # PgBouncer refuses the startup parameter
    assert default["OPTIONS"]["connect_timeout"] == 3  # a libpq setting, kept


def test_the_timeouts_become_statements_for_the_role_or_connect_query(monkeypatch):
    options = settings_for(monkeypatch, DATABASE_LOCK_TIMEOUT_MS="250")["OPTIONS"]
    assert server_timeout_sql(options) == [
        "SET statement_timeout = 5000",
        "SET lock_timeout = 250",
        "SET idle_in_transaction_session_timeout = 10000",
    ]
    assert server_timeout_sql(options, role="payments")[0] == (
        'ALTER ROLE "payments" SET statement_timeout = 5000'
    )


def test_prepared_statements_and_unknown_poolers_are_refused(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="server_side_binding"):
        settings_for(monkeypatch, URL + "?server_side_binding=true", DATABASE_POOLER="pgbouncer")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_POOLER"):
        settings_for(monkeypatch, DATABASE_POOLER="pgpool")


def test_the_web_process_pool_has_its_sizes_and_no_persistent_connections(monkeypatch):
    """DATABASE_POOL=true (the web process, config/gunicorn.conf.py): Django's psycopg pool with
    the sizes and timeout of the environment, and CONN_MAX_AGE 0 (the pool refuses any other);
    PgBouncer's adaptations stay (the pool holds client connections to it)."""
    monkeypatch.delenv("DATABASE_POOL", raising=False)
    assert "pool" not in settings_for(monkeypatch)["OPTIONS"]  # Celery, manage.py: none
    default = settings_for(
        monkeypatch, DATABASE_POOL="true", DATABASE_POOL_MAX_SIZE="12", DATABASE_POOLER="pgbouncer"
    )
    assert default["CONN_MAX_AGE"] == 0
    assert default["OPTIONS"]["pool"] == {"min_size": 2, "max_size": 12, "timeout": 3.0,
                                          "name": "web"}  # fmt: skip
    assert default["OPTIONS"]["prepare_threshold"] is None


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"DATABASE_POOL_MIN_SIZE": "9"}, "MIN_SIZE"),
        ({"DATABASE_POOL_MAX_SIZE": "0", "DATABASE_POOL_MIN_SIZE": "0"}, "MIN_SIZE"),
        ({"DATABASE_POOL_TIMEOUT_SECONDS": "0"}, "TIMEOUT"),
    ],
)
def test_a_pool_that_cannot_work_is_refused(monkeypatch, variables, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        settings_for(monkeypatch, DATABASE_POOL="true", **variables)
