"""Every database connection carries a connect timeout and server-side statement, lock and
idle-in-transaction timeouts, all below gunicorn's worker timeout (ADR 0020)."""

from __future__ import annotations

import runpy
from pathlib import Path

import environ
import pytest
from django.conf import settings

from config.database import connection_options, database_settings

ROOT = Path(__file__).resolve().parents[2]
URL = "postgres://postgres@127.0.0.1:5432/payments"


def settings_for(monkeypatch, **variables: str) -> dict:
    monkeypatch.setenv("DATABASE_URL", URL)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return database_settings(environ.Env(), allow_embedded=False)["default"]


def server_parameters(options: dict) -> dict[str, int]:
    pairs = (part.split("=", 1) for part in options["options"].split() if "=" in part)
    return {name: int(value) for name, value in pairs}


def test_connections_carry_the_documented_defaults(monkeypatch):
    options = settings_for(monkeypatch)["OPTIONS"]
    assert options["connect_timeout"] == 3
    assert server_parameters(options) == {
        "statement_timeout": 5000,
        "lock_timeout": 2000,
        "idle_in_transaction_session_timeout": 10000,
    }


def test_the_environment_sets_each_timeout(monkeypatch):
    options = settings_for(
        monkeypatch,
        DATABASE_CONNECT_TIMEOUT_SECONDS="7",
        DATABASE_STATEMENT_TIMEOUT_MS="0",
        DATABASE_LOCK_TIMEOUT_MS="250",
        DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS="900",
    )["OPTIONS"]
    assert options["connect_timeout"] == 7
    assert server_parameters(options) == {
        "statement_timeout": 0,
        "lock_timeout": 250,
        "idle_in_transaction_session_timeout": 900,
    }


def test_a_parameter_in_the_url_wins_and_other_options_stay():
    options = connection_options(
        environ.Env(), {"options": "-c lock_timeout=100", "sslmode": "require"}
    )
    assert options["sslmode"] == "require"
    assert server_parameters(options)["lock_timeout"] == 100
    assert server_parameters(options)["statement_timeout"] == 5000


def test_a_request_s_database_waits_and_the_acquirer_deadline_fit_in_the_web_timeout(
    monkeypatch,
):
    """A request waits at most for a connect, a statement or lock in phase 1, the acquirer's
    deadline, and a statement or lock in phase 2: together below gunicorn's timeout, so the
    database gives up (503) before gunicorn kills the worker mid-request."""
    monkeypatch.delenv("WEB_TIMEOUT", raising=False)
    web_timeout = runpy.run_path(str(ROOT / "config/gunicorn.conf.py"))["timeout"]
    options = settings_for(monkeypatch)["OPTIONS"]
    parameters = server_parameters(options)
    statement = max(parameters["statement_timeout"], parameters["lock_timeout"]) / 1000
    acquirer_deadline = settings.ACQUIRER_DEADLINE_SECONDS
    assert options["connect_timeout"] + 2 * statement + acquirer_deadline < web_timeout
    assert parameters["idle_in_transaction_session_timeout"] / 1000 < web_timeout


@pytest.mark.parametrize("value", ["soon", "1.5"])
def test_a_timeout_that_is_not_a_whole_number_is_refused(monkeypatch, value):
    with pytest.raises(ValueError, match="invalid literal"):
        settings_for(monkeypatch, DATABASE_LOCK_TIMEOUT_MS=value)
