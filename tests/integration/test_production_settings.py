"""Production fails closed (config/checks.py, config/settings/production.py) and /metrics is
guarded there: the checks in process, then each entry point refusing to start as a subprocess
(gunicorn, the Celery worker and beat), ``check --deploy`` clean with the documented production
environment, and ``collectstatic`` without any of it."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

from config.checks import (
    PRODUCTION_ONLY_RULES,
    REQUIRED_IN_PRODUCTION,
    production_only_rules_hold,
    production_settings_are_set,
)
from payments.acquirer.client import acquirer_client
from payments.monitoring import views as metrics_views
from tests.support.processes import CELERY_WORKER, GUNICORN

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = list(REQUIRED_IN_PRODUCTION)

#: The production environment that docs/operations.md ("Deploying") documents, with example
#: values (a generated secret key): `check --deploy` must be clean with exactly this.
PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "DJANGO_SECRET_KEY": "q5Zt8-Jv0xN3rK7mWb2yLc9fHs4dPg6aTe1uRo5iYk8nBj3vMw7zXq0lCh2sFp4e",
    "DJANGO_ALLOWED_HOSTS": "payments.example.com",
    "DJANGO_BEHIND_TLS_PROXY": "true",
    "DATABASE_URL": "postgres://payments@db.internal:5432/payments",
    "CELERY_BROKER_URL": "redis://redis.internal:6379/0",
    "ACQUIRER_STATE_REDIS_URL": "redis://redis.internal:6379/2",
    "ACQUIRER_BASE_URL": "https://acquirer.example.com",
    "ACQUIRER_API_KEY": "sk_live_example_only",
    "METRICS_BEARER_TOKEN": "metrics-example-token",
}

POSTGRESQL = "django.db.backends.postgresql"
urlpatterns = [path("metrics", metrics_views.metrics_view, name="metrics")]


def bare_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """A process environment with none of the service's variables: only ``variables``, the
    production settings by default, and an embedded-server directory that must stay absent."""
    return {
        "PATH": os.defpath,  # the commands run as sys.executable -m ...
        "HOME": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
        "PGSERVER_DATA_DIR": str(tmp_path / "pgdata"),
        "EMBEDDED_REDIS_DIR": str(tmp_path / "redis"),
        **variables,
    }


def run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def assert_names_every_missing_variable(output: str) -> None:
    for variable in REQUIRED:
        assert f"{variable} must be set in production" in output, (variable, output[-2000:])


# --- the checks, in process -----------------------------------------------------------------


def production(**values):
    """The settings as config.settings.production makes them, with ``values`` on top."""
    defaults = {"REQUIRE_PRODUCTION_SETTINGS": True, "ACQUIRER_ALLOW_INSECURE_HTTP": False}
    return override_settings(**{**defaults, **values})


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")  # read, never connected
def test_each_missing_variable_is_an_error_naming_it_never_a_value():
    """Every required variable, missing alone, gives config.E001 naming it and no value."""
    complete = {
        "SECRET_KEY": PRODUCTION_ENV["DJANGO_SECRET_KEY"],
        "DATABASES": {"default": {**settings.DATABASES["default"], "NAME": "payments"}},
        "ACQUIRER_BASE_URL": "https://acquirer.example.com",
        "ACQUIRER_API_KEY": "sk_live_example_only",
        "METRICS_BEARER_TOKEN": "metrics-example-token",
        "CELERY_BROKER_URL": "redis://redis.internal:6379/0",
        "ACQUIRER_STATE_REDIS_URL": "redis://redis.internal:6379/2",
    }
    with production(**complete):
        assert production_settings_are_set() == []
    emptied = {
        "DJANGO_SECRET_KEY": {"SECRET_KEY": ""},
        "DATABASE_URL": {"DATABASES": {"default": {"ENGINE": POSTGRESQL, "NAME": ""}}},
        "ACQUIRER_BASE_URL": {"ACQUIRER_BASE_URL": ""},
        "ACQUIRER_API_KEY": {"ACQUIRER_API_KEY": ""},
        "METRICS_BEARER_TOKEN": {"METRICS_BEARER_TOKEN": ""},
        "CELERY_BROKER_URL": {"CELERY_BROKER_URL": ""},
        "ACQUIRER_STATE_REDIS_URL": {"ACQUIRER_STATE_REDIS_URL": ""},
    }
    assert set(emptied) == set(REQUIRED)
    for variable, values in emptied.items():
        with production(**{**complete, **values}):
            errors = production_settings_are_set()
        assert [(e.id, e.msg) for e in errors] == [
            ("config.E001", f"{variable} must be set in production.")
        ]
        text = " ".join(f"{e.msg} {e.hint}" for e in errors)
        assert not any(str(value) in text for value in complete.values())


def test_an_http_acquirer_is_an_error_unless_explicitly_allowed():
    """ACQUIRER_BASE_URL over http is config.E002 in production, unless
    ACQUIRER_ALLOW_INSECURE_HTTP; outside production the checks say nothing."""
    with production(ACQUIRER_BASE_URL="http://acquirer.internal:8090"):
        ids = [e.id for e in production_settings_are_set()]
    assert "config.E002" in ids
    with production(ACQUIRER_BASE_URL="http://acquirer.internal:8090",
                    ACQUIRER_ALLOW_INSECURE_HTTP=True):  # fmt: skip
        assert "config.E002" not in [e.id for e in production_settings_are_set()]
    with override_settings(ACQUIRER_BASE_URL="http://127.0.0.1:8090", METRICS_BEARER_TOKEN=""):
        assert production_settings_are_set() == []


# --- /metrics --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_metrics_require_the_bearer_token_in_production(client):
    """Under the production settings /metrics answers 401 without the exact token, even with
    an empty token configured (nobody is let in), and 200 with it (scheme in any case)."""
    with production(METRICS_BEARER_TOKEN=""):
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    with production(METRICS_BEARER_TOKEN="t0ken"):
        for sent in ("", "Bearer t0ke", "Bearer t0ken2", "Basic t0ken", "t0ken"):
            response = client.get("/metrics", HTTP_AUTHORIZATION=sent)
            assert response.status_code == 401, sent
            assert response["WWW-Authenticate"] == "Bearer"
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer t0ken").status_code == 200
        assert client.get("/metrics", HTTP_AUTHORIZATION="bearer t0ken").status_code == 200


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_no_metric_label_derives_from_the_api_key(client):
    """The quota scope label is configuration (ACQUIRER_RATE_SCOPE, else ACQUIRER_NAME), and no
    label value contains the API key or any 8+ hex digits of its SHA-256."""
    client_ = acquirer_client()
    client_.limiter.snapshot(client_.scope)  # the scope's gauges exist from now on
    assert client_.scope == (settings.ACQUIRER_RATE_SCOPE or settings.ACQUIRER_NAME)
    digest = hashlib.sha256(settings.ACQUIRER_API_KEY.encode()).hexdigest()
    body = client.get("/metrics").content.decode()
    values = [
        value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        for value in sample.labels.values()
    ]
    assert client_.scope in values
    for value in values:
        assert settings.ACQUIRER_API_KEY not in value
        assert not any(run_ in digest for run_ in re.findall(r"[0-9a-f]{8,}", value)), value


# --- the entry points refuse to start, as subprocesses -----------------------------------------


def test_gunicorn_refuses_to_start_naming_each_missing_variable(tmp_path):
    """gunicorn with no production variable: its worker fails to boot on the checks and the
    master halts (exit code 3) with each variable named; nothing was served."""
    env = bare_env(tmp_path, WEB_BIND="127.0.0.1:0", WEB_CONCURRENCY="1")  # any free port
    done = run(GUNICORN, env)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "Worker failed to boot" in done.stderr
    assert_names_every_missing_variable(done.stderr)
    assert not (tmp_path / "pgdata").exists()


@pytest.mark.parametrize(
    ("process", "command"),
    [
        ("worker", CELERY_WORKER),
        ("beat", [sys.executable, "-m", "celery", "-A", "config", "beat", "--schedule", "beat"]),
    ],
)
def test_celery_refuses_to_start_naming_each_missing_variable(tmp_path, process, command):
    """The Celery worker and beat (production settings by default) exit at start, naming each
    missing variable, before connecting to any broker."""
    if process == "beat":
        command = [*command[:-1], str(tmp_path / "beat-schedule")]
    done = run(command, bare_env(tmp_path))
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"The {process} process refuses to start" in done.stderr
    assert_names_every_missing_variable(done.stderr)


def test_check_deploy_is_clean_with_the_documented_production_environment(tmp_path):
    """`manage.py check --deploy --fail-level WARNING` passes with the environment
    docs/operations.md documents (HSTS, SSL redirect and the proxy header on), and every
    variable of that environment is named there."""
    command = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]
    done = run(command, bare_env(tmp_path, **PRODUCTION_ENV))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout
    operations = (ROOT / "docs/operations.md").read_text()
    deploying = operations[operations.index("## Deploying") :]
    missing = [name for name in PRODUCTION_ENV if f"`{name}" not in deploying]
    assert missing == []


def test_collectstatic_needs_no_database_nor_any_production_variable(tmp_path):
    """The image's build step: production settings with nothing set import and collect static
    files (dry run) without a database or the embedded PostgreSQL."""
    command = [sys.executable, "manage.py", "collectstatic", "--noinput", "--dry-run"]
    done = run(command, bare_env(tmp_path, DJANGO_SETTINGS_MODULE="config.settings.production"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "static files copied" in done.stdout
    assert not (tmp_path / "pgdata").exists() and not (tmp_path / "redis").exists()


#: A value that breaks each production-only rule (config/checks.py, PRODUCTION_ONLY_RULES).
WRONG_IN_PRODUCTION = {
    "DEBUG": True,
    "WEBHOOK_ALLOW_LOCAL_URLS": True,
    "PAYMENTS_CRASH_POINT": "after_acquirer_call",
    "ADMIN_OTP_REQUIRED": False,
    "SESSION_COOKIE_SECURE": False,
    "CSRF_COOKIE_SECURE": False,
    "ALLOWED_HOSTS": ["*"],
    "SECRET_KEY": "insecure-local-development-key-change-me",
}


def test_every_production_only_rule_has_a_wrong_value_here():
    assert set(WRONG_IN_PRODUCTION) == set(PRODUCTION_ONLY_RULES)


def test_the_environment_cannot_turn_the_webhook_guard_off_in_production(tmp_path):
    """WEBHOOK_ALLOW_LOCAL_URLS=true and DJANGO_DEBUG=true in the environment change nothing
    under the production settings: both are forced, and check --deploy stays clean."""
    command = [sys.executable, "manage.py", "shell", "-c",
               "from django.conf import settings as s; "
               "print('forced:', s.WEBHOOK_ALLOW_LOCAL_URLS, s.DEBUG)"]  # fmt: skip
    env = bare_env(tmp_path, **PRODUCTION_ENV, WEBHOOK_ALLOW_LOCAL_URLS="true", DJANGO_DEBUG="true")
    done = run(command, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "forced: False False" in done.stdout.splitlines()


#: What each production-only rule holds in production (config/settings/production.py).
RIGHT_IN_PRODUCTION = {
    "DEBUG": False,
    "WEBHOOK_ALLOW_LOCAL_URLS": False,
    "PAYMENTS_CRASH_POINT": "",
    "ADMIN_OTP_REQUIRED": True,
    "SESSION_COOKIE_SECURE": True,
    "CSRF_COOKIE_SECURE": True,
    "ALLOWED_HOSTS": ["payments.example.com"],
    "SECRET_KEY": PRODUCTION_ENV["DJANGO_SECRET_KEY"],
}


@pytest.mark.parametrize("name", sorted(WRONG_IN_PRODUCTION))
def test_each_production_only_setting_set_wrong_alone_is_one_error_naming_it(name):
    """Production's values but one set back: exactly one config.E003, naming that setting and
    its rule, never the value (in process; the next test runs ``check --deploy``)."""
    assert set(RIGHT_IN_PRODUCTION) == set(PRODUCTION_ONLY_RULES)
    values = {**RIGHT_IN_PRODUCTION, name: WRONG_IN_PRODUCTION[name]}
    with override_settings(REQUIRE_PRODUCTION_SETTINGS=True, **values):
        errors = production_only_rules_hold()
    assert [(e.id, e.msg.split(" ", 1)[0]) for e in errors] == [("config.E003", name)]
    assert "insecure-local-development-key-change-me" not in errors[0].msg + errors[0].hint
    with override_settings(REQUIRE_PRODUCTION_SETTINGS=True, **RIGHT_IN_PRODUCTION):
        assert production_only_rules_hold() == []


def test_check_deploy_fails_naming_each_production_only_setting_set_wrong(tmp_path):
    """A settings module built on the production settings that sets the rules back fails
    `manage.py check --deploy`: one config.E003 per setting, naming it, never its value."""
    (tmp_path / "wrong_settings.py").write_text(
        "from config.settings.production import *  # noqa: F403\n"
        + "".join(f"{name} = {value!r}\n" for name, value in WRONG_IN_PRODUCTION.items())
    )
    env = bare_env(
        tmp_path,
        **{**PRODUCTION_ENV, "DJANGO_SETTINGS_MODULE": "wrong_settings"},
        PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}",
    )
    done = run([sys.executable, "manage.py", "check", "--deploy"], env)
    assert done.returncode == 1, done.stdout + done.stderr
    named = [line for line in done.stderr.splitlines() if "config.E003" in line]
    for name in WRONG_IN_PRODUCTION:
        assert sum(f"(config.E003) {name} must" in line for line in named) == 1, named
    assert len(named) == len(WRONG_IN_PRODUCTION), named
    assert "insecure-local-development-key-change-me" not in done.stderr
