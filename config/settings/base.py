"""Settings shared by every environment, read from the environment with django-environ.

Every value an operator may change is an environment variable; docs/configuration.md lists them.
"""

from __future__ import annotations

from pathlib import Path

import environ

from config.log_config import logging_config, structlog_configure

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

SECRET_KEY = env("DJANGO_SECRET_KEY", default="insecure-local-development-key-change-me")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "config.apps.PaymentServiceAdminConfig",  # django.contrib.admin with the project's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_prometheus",
    "merchants",
    "idempotency",
    "payments",
    "ledger",
]

MIDDLEWARE = [
    # First: the request id and the request line cover everything below (config/request_context.py).
    "config.request_context.RequestContextMiddleware",
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# Request bodies: POST /payments needs well under 1 KiB; anything larger is refused early.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("API_MAX_BODY_BYTES", default=16 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["merchants.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["payments.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "payments.problems.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Payment service API",
    "DESCRIPTION": (
        "Card payments with Idempotency-Key semantics. Amounts are integers in the minor "
        "units of an ISO 4217 currency. Errors are RFC 9457 application/problem+json."
    ),
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- Metrics (payments/metrics_views.py): when set, /metrics requires "Authorization: Bearer ...".
METRICS_BEARER_TOKEN = env("METRICS_BEARER_TOKEN", default="")

# --- Idempotency keys (idempotency/) ---------------------------------------------------------
IDEMPOTENCY_KEY_RETENTION_SECONDS = env.int("IDEMPOTENCY_KEY_RETENTION_SECONDS", default=24 * 3600)
IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS = env.int("IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS", default=60)
IDEMPOTENCY_KEY_PURGE_BATCH_SIZE = env.int("IDEMPOTENCY_KEY_PURGE_BATCH_SIZE", default=1000)

# --- The acquirer (payments/acquirer/client.py builds gateway_client from these) -----------
ACQUIRER_BASE_URL = env("ACQUIRER_BASE_URL", default="http://127.0.0.1:8090")
ACQUIRER_API_KEY = env("ACQUIRER_API_KEY", default="sandbox_sk_dev")
ACQUIRER_CONNECT_TIMEOUT_SECONDS = env.float("ACQUIRER_CONNECT_TIMEOUT_SECONDS", default=1.0)
ACQUIRER_READ_TIMEOUT_SECONDS = env.float("ACQUIRER_READ_TIMEOUT_SECONDS", default=3.0)
ACQUIRER_HONOURS_IDEMPOTENCY_KEYS = env.bool("ACQUIRER_HONOURS_IDEMPOTENCY_KEYS", default=True)
ACQUIRER_NAME = env("ACQUIRER_NAME", default="sandbox")
# Which rate headers the acquirer sends: auto, ietf (RateLimit draft), github, retry-after.
ACQUIRER_QUOTA_PROFILE = env("ACQUIRER_QUOTA_PROFILE", default="auto")
ACQUIRER_RATE_SCOPE = env("ACQUIRER_RATE_SCOPE", default=None)
# Retries of the synchronous API path (gateway_client.RetryPolicy; gateway_client/README.md).
ACQUIRER_RETRY_MAX_ATTEMPTS = env.int("ACQUIRER_RETRY_MAX_ATTEMPTS", default=3)
ACQUIRER_RETRY_BACKOFF_BASE_SECONDS = env.float("ACQUIRER_RETRY_BACKOFF_BASE_SECONDS", default=0.2)
ACQUIRER_RETRY_BACKOFF_CAP_SECONDS = env.float("ACQUIRER_RETRY_BACKOFF_CAP_SECONDS", default=2.0)
ACQUIRER_DEADLINE_SECONDS = env.float("ACQUIRER_DEADLINE_SECONDS", default=8.0)
ACQUIRER_MAX_SERVER_WAIT_SECONDS = env.float("ACQUIRER_MAX_SERVER_WAIT_SECONDS", default=30.0)
ACQUIRER_MIN_ATTEMPT_SECONDS = env.float("ACQUIRER_MIN_ATTEMPT_SECONDS", default=0.5)
ACQUIRER_RETRY_AMBIGUOUS = env.bool("ACQUIRER_RETRY_AMBIGUOUS", default=True)
ACQUIRER_RETRY_BUDGET_PERCENT = env.float("ACQUIRER_RETRY_BUDGET_PERCENT", default=0.1)
ACQUIRER_RETRY_BUDGET_MIN_PER_SECOND = env.float(
    "ACQUIRER_RETRY_BUDGET_MIN_PER_SECOND", default=10.0
)
ACQUIRER_RETRY_BUDGET_TTL_SECONDS = env.float("ACQUIRER_RETRY_BUDGET_TTL_SECONDS", default=10.0)
# Circuit breaker per endpoint group (authorize, lookup), on the failure RATE over a sliding
# window (gateway_client/README.md "Circuit breaker" gives the reasoning for each default).
ACQUIRER_BREAKER_WINDOW_TYPE = env("ACQUIRER_BREAKER_WINDOW_TYPE", default="count")
ACQUIRER_BREAKER_WINDOW_SIZE = env.int("ACQUIRER_BREAKER_WINDOW_SIZE", default=50)
ACQUIRER_BREAKER_MINIMUM_CALLS = env.int("ACQUIRER_BREAKER_MINIMUM_CALLS", default=20)
ACQUIRER_BREAKER_FAILURE_RATE_THRESHOLD = env.float(
    "ACQUIRER_BREAKER_FAILURE_RATE_THRESHOLD", default=50.0
)
ACQUIRER_BREAKER_SLOW_CALL_SECONDS = env.float("ACQUIRER_BREAKER_SLOW_CALL_SECONDS", default=None)
ACQUIRER_BREAKER_SLOW_CALL_RATE_THRESHOLD = env.float(
    "ACQUIRER_BREAKER_SLOW_CALL_RATE_THRESHOLD", default=100.0
)
ACQUIRER_BREAKER_OPEN_SECONDS = env.float("ACQUIRER_BREAKER_OPEN_SECONDS", default=30.0)
ACQUIRER_BREAKER_HALF_OPEN_PERMITS = env.int("ACQUIRER_BREAKER_HALF_OPEN_PERMITS", default=5)
ACQUIRER_BREAKER_MAX_HALF_OPEN_SECONDS = env.float(
    "ACQUIRER_BREAKER_MAX_HALF_OPEN_SECONDS", default=None
)
# Adaptive (AIMD) concurrency per quota scope: lowered on rate limits, raised on successes.
ACQUIRER_CONCURRENCY_INITIAL_LIMIT = env.int("ACQUIRER_CONCURRENCY_INITIAL_LIMIT", default=100)
ACQUIRER_CONCURRENCY_MAX_LIMIT = env.int("ACQUIRER_CONCURRENCY_MAX_LIMIT", default=100)
ACQUIRER_CONCURRENCY_WAIT_SECONDS = env.float("ACQUIRER_CONCURRENCY_WAIT_SECONDS", default=0.1)
RECONCILIATION_CONCURRENCY_WAIT_SECONDS = env.float(
    "RECONCILIATION_CONCURRENCY_WAIT_SECONDS", default=5.0
)
# Shared wait state (rate gate, retry budget, breakers): Redis in production; under
# config.settings.local the embedded Redis when unset; in-memory (per process) when empty.
ACQUIRER_STATE_REDIS_URL = env("ACQUIRER_STATE_REDIS_URL", default="")
ACQUIRER_STATE_NAMESPACE = env("ACQUIRER_STATE_NAMESPACE", default="payments:gateway")

# --- Payments API ---------------------------------------------------------------------------
# Retry-After (seconds) sent with 202 (outcome unknown) and 503 (acquirer unavailable).
PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS = env.int(
    "PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS", default=5
)
PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS = env.int(
    "PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS", default=10
)

# Test-only crash injection for fault campaigns (payments/crashpoints.py); empty: off.
PAYMENTS_CRASH_POINT = env("PAYMENTS_CRASH_POINT", default="")

# --- Reconciliation (payments/reconciliation.py) ------------------------------------------
RECONCILIATION_SWEEP_INTERVAL_SECONDS = env.float(
    "RECONCILIATION_SWEEP_INTERVAL_SECONDS", default=30.0
)
RECONCILIATION_FIRST_CHECK_SECONDS = env.float("RECONCILIATION_FIRST_CHECK_SECONDS", default=2.0)
RECONCILIATION_GRACE_SECONDS = env.float("RECONCILIATION_GRACE_SECONDS", default=60.0)
RECONCILIATION_BACKOFF_BASE_SECONDS = env.float("RECONCILIATION_BACKOFF_BASE_SECONDS", default=30.0)
RECONCILIATION_BACKOFF_CAP_SECONDS = env.float("RECONCILIATION_BACKOFF_CAP_SECONDS", default=1800.0)
RECONCILIATION_MAX_AGE_SECONDS = env.float("RECONCILIATION_MAX_AGE_SECONDS", default=6 * 3600.0)
RECONCILIATION_MAX_ATTEMPTS = env.int("RECONCILIATION_MAX_ATTEMPTS", default=40)
# A sweep works through its batch one payment at a time, each at most a look-up and a re-send
# (2 x the client's deadline), so the lease covers a whole batch and the task time limit ends a
# stuck sweep before its lease runs out.
RECONCILIATION_ACQUIRER_DEADLINE_SECONDS = env.float(
    "RECONCILIATION_ACQUIRER_DEADLINE_SECONDS", default=15.0
)
RECONCILIATION_BATCH_SIZE = env.int("RECONCILIATION_BATCH_SIZE", default=5)
RECONCILIATION_LEASE_SECONDS = env.float("RECONCILIATION_LEASE_SECONDS", default=300.0)
# A requires_capture payment older than this is voided by the beat (the card networks' common
# hold is 7 days; an expired hold is released by the issuer anyway).
AUTHORIZATION_HOLD_SECONDS = env.float("AUTHORIZATION_HOLD_SECONDS", default=7 * 24 * 3600.0)
# How long the acquirer remembers an idempotency key; the maximum age must stay well below it.
ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS = env.float(
    "ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS", default=24 * 3600.0
)

# --- Ledger audit (ledger/): our payments against the acquirer's records -------------------
LEDGER_AUDIT_CSV_DIR = env("LEDGER_AUDIT_CSV_DIR", default=str(BASE_DIR / "audits"))
LEDGER_AUDIT_WINDOW_HOURS = env.float("LEDGER_AUDIT_WINDOW_HOURS", default=25.0)
LEDGER_ACQUIRER_RECORDS = env("LEDGER_ACQUIRER_RECORDS", default="")

# --- Celery ---------------------------------------------------------------------------------
# Required in production; config.settings.local falls back on the embedded Redis
# (config/embedded_redis.py), the test settings on kombu's in-memory transport.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT_SECONDS", default=3600)
}
# One queue name per deployment; tests give each run its own, so they never share messages.
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_DEFAULT_QUEUE", default="celery")
CELERY_TASK_IGNORE_RESULT = True
# Why each of these: docs/configuration.md. Tasks are idempotent (leases, status checks under
# row locks, the acquirer idempotency key), so a redelivered task is harmless.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT_SECONDS", default=280)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE = {
    "audit-acquirer-daily": {
        "task": "ledger.tasks.audit_acquirer_daily",
        "schedule": env.float("LEDGER_AUDIT_INTERVAL_SECONDS", default=24 * 3600.0),
    },
    "reconcile-due-payments": {
        "task": "payments.tasks.reconcile_due_payments",
        "schedule": RECONCILIATION_SWEEP_INTERVAL_SECONDS,
    },
    "reconcile-due-operations": {
        "task": "payments.tasks.reconcile_due_operations",
        "schedule": RECONCILIATION_SWEEP_INTERVAL_SECONDS,
    },
    "void-expired-authorizations": {
        "task": "payments.tasks.void_expired_authorizations",
        "schedule": env.float("AUTHORIZATION_HOLD_SWEEP_INTERVAL_SECONDS", default=3600.0),
    },
    "purge-expired-idempotency-keys": {
        "task": "payments.tasks.purge_expired_idempotency_keys",
        "schedule": env.float("IDEMPOTENCY_KEY_PURGE_INTERVAL_SECONDS", default=3600.0),
    },
}

# --- Logging (config/log_config.py; ADR 0016) ------------------------------------------------
# json: one JSON object per line (production); console: readable lines (development). Every
# process (gunicorn, Django, the Celery worker and beat, commands) uses this configuration.
LOG_FORMAT = env("LOG_FORMAT", default="json")
LOG_LEVEL = env("LOG_LEVEL", default="INFO")
LOGGING = logging_config(log_format=LOG_FORMAT, level=LOG_LEVEL)
structlog_configure()
# Celery keeps its hands off the root logger: config/celery_app.py applies LOGGING instead.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
