"""Production fails closed: system checks on the settings, and the refusal to start on them.

``config.settings.production`` reads every required variable with an empty default and sets
``REQUIRE_PRODUCTION_SETTINGS``, so importing it never fails (``collectstatic`` runs at image
build time with none of them). The checks below then report each missing or unsafe value at
``Error`` level, naming the variable. ``manage.py`` commands (``migrate``, ``runserver``,
``check``) stop on them as on any Error; the processes that Django does not check themselves
call :func:`refuse_to_start_on_errors`: ``config/wsgi.py`` (so every gunicorn worker, and
therefore gunicorn, exits before serving) and ``config/celery_app.py`` (the worker and beat).
Registered by ``config.apps.PaymentServiceAdminConfig.ready``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, register, run_checks
from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "PRODUCTION_ONLY_RULES",
    "production_only_rules_hold",
    "production_settings_are_set",
    "refuse_to_start_on_errors",
]


def _secret_key() -> str:
    try:
        return settings.SECRET_KEY
    except ImproperlyConfigured:  # Django refuses to read an empty SECRET_KEY
        return ""


#: Variable -> how to read what the settings made of it (empty when the variable is missing).
REQUIRED_IN_PRODUCTION: dict[str, Callable[[], Any]] = {
    "DJANGO_SECRET_KEY": _secret_key,
    "DATABASE_URL": lambda: settings.DATABASES["default"].get("NAME"),
    # With ACQUIRERS set, each acquirer carries its own URL and key (validated at load).
    "ACQUIRER_BASE_URL": lambda: getattr(settings, "ACQUIRERS", None) or settings.ACQUIRER_BASE_URL,
    "ACQUIRER_API_KEY": lambda: getattr(settings, "ACQUIRERS", None) or settings.ACQUIRER_API_KEY,
    "METRICS_BEARER_TOKEN": lambda: settings.METRICS_BEARER_TOKEN,
    "CELERY_BROKER_URL": lambda: settings.CELERY_BROKER_URL,
    "ACQUIRER_STATE_REDIS_URL": lambda: settings.ACQUIRER_STATE_REDIS_URL,
}


@register()
def production_settings_are_set(app_configs=None, **kwargs) -> list[CheckMessage]:
    """Under ``REQUIRE_PRODUCTION_SETTINGS`` (the production settings): ``config.E001`` for each
    variable of :data:`REQUIRED_IN_PRODUCTION` that is missing or empty, and ``config.E002``
    when ``ACQUIRER_BASE_URL`` is not ``https://`` while ``ACQUIRER_ALLOW_INSECURE_HTTP`` is off.
    Messages name the variable, never its value."""
    if not getattr(settings, "REQUIRE_PRODUCTION_SETTINGS", False):
        return []
    errors: list[CheckMessage] = [
        Error(
            f"{variable} must be set in production.",
            hint="Set it in the process environment (docs/operations.md, 'Deploying').",
            id="config.E001",
        )
        for variable, read in REQUIRED_IN_PRODUCTION.items()
        if not read()
    ]
    configured = getattr(settings, "ACQUIRERS", None)
    urls = (
        [(f"ACQUIRERS ({spec.name}) base_url", spec.base_url) for spec in configured]
        if configured
        else [("ACQUIRER_BASE_URL", settings.ACQUIRER_BASE_URL)]
    )
    for variable, base_url in urls:
        if (
            base_url
            and urlsplit(base_url).scheme != "https"
            and not getattr(settings, "ACQUIRER_ALLOW_INSECURE_HTTP", False)
        ):
            errors.append(
                Error(
                    f"{variable} must be an https:// URL in production.",
                    hint="Our API key and card tokens travel in it. "
                    "ACQUIRER_ALLOW_INSECURE_HTTP=true allows http (the sandbox of "
                    "docker-compose.yml only).",
                    id="config.E002",
                )
            )
    return errors


#: Setting -> (what it must be in production, why). Each is forced by
#: ``config.settings.production`` whatever the environment says; this check catches a settings
#: module built on it that sets one back (``from config.settings.production import *`` and an
#: override), so a development exception can never reach production silently.
PRODUCTION_ONLY_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "DEBUG": (lambda v: v is False, "must be False: tracebacks and settings in error pages"),
    "WEBHOOK_ALLOW_LOCAL_URLS": (
        lambda v: v is False,
        "must be False: it turns the webhook SSRF guard off (http and loopback URLs)",
    ),
    "PAYMENTS_CRASH_POINT": (lambda v: not v, "must be empty: crash injection for campaigns"),
    "ADMIN_OTP_REQUIRED": (lambda v: v is True, "must be True: staff log in with a second factor"),
    "SESSION_COOKIE_SECURE": (lambda v: v is True, "must be True: the admin session over HTTPS"),
    "CSRF_COOKIE_SECURE": (lambda v: v is True, "must be True: the CSRF cookie over HTTPS"),
    "ALLOWED_HOSTS": (lambda v: "*" not in v, "must name the hosts: '*' allows any Host header"),
    "SECRET_KEY": (
        lambda v: v != "insecure-local-development-key-change-me",
        "must not be the development key",
    ),
}


@register()
def production_only_rules_hold(app_configs=None, **kwargs) -> list[CheckMessage]:
    """Under ``REQUIRE_PRODUCTION_SETTINGS``: ``config.E003`` for each setting of
    :data:`PRODUCTION_ONLY_RULES` whose value breaks its rule, naming the setting and the
    rule, never the value. An Error, so ``manage.py check --deploy``, gunicorn and Celery
    refuse to start on it."""
    if not getattr(settings, "REQUIRE_PRODUCTION_SETTINGS", False):
        return []
    errors: list[CheckMessage] = []
    for name, (holds, rule) in PRODUCTION_ONLY_RULES.items():
        value = _secret_key() if name == "SECRET_KEY" else getattr(settings, name, None)
        if not holds(value):
            errors.append(
                Error(
                    f"{name} {rule}.",
                    hint="Production settings force it; a settings module built on them set "
                    "it back (docs/operations.md, 'Deploying').",
                    id="config.E003",
                )
            )
    return errors


def refuse_to_start_on_errors(process: str) -> None:
    """Run the system checks (Django's default set, ours included) and raise
    ``ImproperlyConfigured`` listing every unsilenced ``Error`` when there is one, so
    ``process`` (``"web"``, ``"worker"``, ``"beat"``) stops at start with a message naming each
    variable. In a gunicorn worker the exception is a boot failure, on which gunicorn halts
    (exit code 3); Celery's signal handlers turn it into ``SystemExit``. Django must be set
    up. Warnings do not stop a process (``manage.py check --deploy`` shows them)."""
    errors = [
        message
        for message in run_checks(include_deployment_checks=False)
        if message.is_serious() and not message.is_silenced()
    ]
    if errors:
        lines = "\n".join(f"  {message}" for message in errors)
        raise ImproperlyConfigured(f"The {process} process refuses to start:\n{lines}")
