"""Settings for production: fail closed.

Every variable a deployment must give is read with an empty default, so importing these
settings never fails (``collectstatic`` runs at image build time without any of them), and
``REQUIRE_PRODUCTION_SETTINGS`` makes the system checks of ``config/checks.py`` name each one
that is missing: ``manage.py`` commands, gunicorn (``config/wsgi.py``) and the Celery worker and
beat (``config/celery_app.py``) then refuse to start. Never the embedded PostgreSQL or Redis.
HTTPS is assumed (HSTS, SSL redirect, secure cookies), each configurable; docs/operations.md
("Deploying") documents the environment with which ``manage.py check --deploy`` is clean.
"""

from config.database import database_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import env

REQUIRE_PRODUCTION_SETTINGS = True
DEBUG = False
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
DATABASES = database_settings(env, allow_embedded=False)
ACQUIRER_BASE_URL = env("ACQUIRER_BASE_URL", default="")
ACQUIRER_API_KEY = env("ACQUIRER_API_KEY", default="")
# Only for an acquirer reached over a private network without TLS (compose's sandbox).
ACQUIRER_ALLOW_INSECURE_HTTP = env.bool("ACQUIRER_ALLOW_INSECURE_HTTP", default=False)
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="")
# Every gunicorn and Celery process must share the rate gate and retry budget.
ACQUIRER_STATE_REDIS_URL = env("ACQUIRER_STATE_REDIS_URL", default="")
PAYMENTS_CRASH_POINT = ""  # crash injection is for fault campaigns, never production
# Development's exceptions, forced off whatever the environment says (config/checks.py,
# PRODUCTION_ONLY_RULES, reports any settings module that turns one back on):
WEBHOOK_ALLOW_LOCAL_URLS = False  # http and loopback webhook URLs: the SSRF guard stays on

# --- HTTPS (manage.py check --deploy) ------------------------------------------------------
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
# The probes and the scrape reach a process directly, over plain HTTP inside the deployment.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=365 * 24 * 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# Staff log in to the admin with a second factor (django-otp TOTP; ADR 0019).
ADMIN_OTP_REQUIRED = True
# X-Forwarded-Proto decides whether a request was HTTPS only when a proxy in front sets it
# (and strips a client's own): otherwise any client could claim HTTPS.
if env.bool("DJANGO_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
