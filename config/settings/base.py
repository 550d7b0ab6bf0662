"""Settings shared by every environment, read from the environment with django-environ.

Every value an operator may change is an environment variable; docs/configuration.md lists them.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

from acquirers.specs import parse_acquirers
from observability.log_config import logging_config, structlog_configure

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
    "django_otp",  # the admin's second factor (TOTP), ADR 0019
    "django_otp.plugins.otp_totp",
    "axes",  # the admin login's throttling, ADR 0019
    "merchants",
    "idempotency",
    "payments",
    "ledger",
    "heartbeats",
    "webhooks",
    "retention",  # the purges of everything that grows (docs/data.md, ADR 0045)
]

MIDDLEWARE = [
    # First: the request id and the request line cover everything below
    # (observability/request_context.py).
    "observability.request_context.RequestContextMiddleware",
    # Second: a body that cannot be read in full (chunked, cut short) is refused before
    # anything reads it as empty (payments/api/problems.py, body_framing_problem).
    "payments.api.problems.RequestBodyMiddleware",
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # The console's cookie middleware runs on /admin/ paths only: the API reads no cookie
    # (console/middleware.py, ADR 0029). Everything else here runs on every path.
    "console.middleware.ConsoleSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "console.middleware.ConsoleAuthenticationMiddleware",
    "console.middleware.ConsoleOTPMiddleware",
    "console.middleware.ConsoleMessageMiddleware",
    # What django-axes records of a login attempt, card numbers replaced (console/middleware.py).
    "console.middleware.ConsoleLoginRedactionMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
    "payments.api.problems.DatabaseUnavailableMiddleware",  # a database outage answers 503
    "payments.api.problems.NulInPathMiddleware",  # /payments/pay_%00: 404, not a 500
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "config" / "templates"],  # the admin login and two-factor pages
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
    "DEFAULT_PARSER_CLASSES": ["payments.api.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "payments.api.problems.problem_exception_handler",
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
    # Problems, headers, links and the rules beyond the schema (ADR 0043; the hook's table).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "payments.api.openapi_answers.postprocess",
    ],
    # Three objects have a `status` with its own values: name each enum after its object.
    "ENUM_NAME_OVERRIDES": {
        "PaymentStatusEnum": "payments.models.PaymentStatus",
        "OperationStatusEnum": "payments.models.OperationStatus",
        "WebhookEndpointStatusEnum": "webhooks.models.EndpointStatus",
    },
}

# --- Metrics (payments/monitoring/views.py): when set, /metrics requires "Authorization:
# Bearer ...".
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
# Its notification signing secrets (whsec_..., space-separated during a rotation; empty: no
# notifications). With ACQUIRERS set, each acquirer's webhook_secret_env names them instead.
ACQUIRER_WEBHOOK_SECRETS = env("ACQUIRER_WEBHOOK_SECRETS", default="")
# Provider notifications (docs/connectors.md, "Notifications"): how far a signature's timestamp
# may be from our clock, and when an unapplied one is tried again (seconds).
NOTIFICATION_TOLERANCE_SECONDS = env.float("NOTIFICATION_TOLERANCE_SECONDS", default=300.0)
NOTIFICATION_RETRY_BASE_SECONDS = env.float("NOTIFICATION_RETRY_BASE_SECONDS", default=2.0)
NOTIFICATION_IN_FLIGHT_RETRY_SECONDS = env.float(
    "NOTIFICATION_IN_FLIGHT_RETRY_SECONDS", default=0.25
)
NOTIFICATION_RETRY_CAP_SECONDS = env.float("NOTIFICATION_RETRY_CAP_SECONDS", default=300.0)
NOTIFICATION_SWEEP_INTERVAL_SECONDS = env.float("NOTIFICATION_SWEEP_INTERVAL_SECONDS", default=30.0)
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
# The routing pre-check of POST /payments reuses a breaker's "admits" for this long per process
# (the send-time admission still decides; docs/configuration.md).
ACQUIRER_BREAKER_PRECHECK_FRESH_SECONDS = env.float(
    "ACQUIRER_BREAKER_PRECHECK_FRESH_SECONDS", default=0.25
)
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
# It starts at 100 calls in flight and may grow to the default web tier's in-flight slots
# (WEB_CONCURRENCY x WEB_THREADS, 2 x 128), so the acquirer's answers (its 429s), not a fixed
# number below the tier, bound the calls (docs/scaling.md, "Payments in flight").
ACQUIRER_CONCURRENCY_INITIAL_LIMIT = env.int("ACQUIRER_CONCURRENCY_INITIAL_LIMIT", default=100)
ACQUIRER_CONCURRENCY_MAX_LIMIT = env.int("ACQUIRER_CONCURRENCY_MAX_LIMIT", default=256)
ACQUIRER_CONCURRENCY_WAIT_SECONDS = env.float("ACQUIRER_CONCURRENCY_WAIT_SECONDS", default=0.1)
RECONCILIATION_CONCURRENCY_WAIT_SECONDS = env.float(
    "RECONCILIATION_CONCURRENCY_WAIT_SECONDS", default=5.0
)
# Shared wait state (rate gate, retry budget, breakers): Redis in production; under
# config.settings.local the embedded Redis when unset; in-memory (per process) when empty.
ACQUIRER_STATE_REDIS_URL = env("ACQUIRER_STATE_REDIS_URL", default="")
ACQUIRER_STATE_NAMESPACE = env("ACQUIRER_STATE_NAMESPACE", default="payments:gateway")

# Several acquirers (acquirers/specs.py; docs/configuration.md, "Acquirers"): a JSON array,
# parsed and validated here. Unset: one acquirer from the ACQUIRER_* settings above. Whether
# each currency is one the service supports is a system check (payments.E004,
# payments/checks.py): the settings import no app.
ACQUIRERS = parse_acquirers(env("ACQUIRERS", default=""))
# Decline codes after which a payment may try the next acquirer (a decline is otherwise a
# result): e.g. issuer_unavailable,try_again_later. Empty by default.
ACQUIRER_SOFT_DECLINE_CODES = env.list("ACQUIRER_SOFT_DECLINE_CODES", default=[])

# --- Payments API ---------------------------------------------------------------------------
# Retry-After (seconds) sent with 202 (outcome unknown) and 503 (acquirer unavailable).
PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS = env.int(
    "PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS", default=5
)
PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS = env.int(
    "PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS", default=10
)

# --- Per-merchant limits (payments/api/limits.py, ADR 0018); a merchant's own values in the admin
# override them, 0 is no limit. The state is in the acquirer state store (ACQUIRER_STATE_*).
# Requests with a missing or invalid API key per client address (an IPv6 one by its /64) and
# window; past it, 429 before any key look-up (payments/api/limits.py). 0: no limit.
API_AUTH_FAILURE_LIMIT = env.int("API_AUTH_FAILURE_LIMIT", default=20)
API_AUTH_FAILURE_WINDOW_SECONDS = env.int("API_AUTH_FAILURE_WINDOW_SECONDS", default=60)
# The header naming the client's address when a proxy in front sets it (deploy/nginx sets
# X-Forwarded-For to the address it saw); empty: REMOTE_ADDR. Never set it where clients can
# reach gunicorn directly: they would choose their own address.
API_CLIENT_ADDRESS_HEADER = env.str("API_CLIENT_ADDRESS_HEADER", default="")
# 100 requests a second, what card processors allow an account by default (docs/scaling.md,
# "Per-merchant limits"): far above one shop's checkout traffic, far below the tier's capacity.
MERCHANT_RATE_LIMIT_REQUESTS = env.int("MERCHANT_RATE_LIMIT_REQUESTS", default=100)
MERCHANT_RATE_LIMIT_WINDOW_SECONDS = env.int("MERCHANT_RATE_LIMIT_WINDOW_SECONDS", default=1)
# A quarter of the default web tier's in-flight slots (WEB_CONCURRENCY x WEB_THREADS, 2 x 128):
# 64 payments in flight carry the rate limit's 100 payments/s up to a 600 ms acquirer, and
# stay below WEB_THREADS, so one merchant's slow payments never hold every thread of a worker.
MERCHANT_CONCURRENT_PAYMENTS = env.int("MERCHANT_CONCURRENT_PAYMENTS", default=64)
# A slot's lease: the web timeout (WEB_TIMEOUT, 30 s), the longest a request may live.
MERCHANT_PAYMENT_LEASE_SECONDS = env.int("MERCHANT_PAYMENT_LEASE_SECONDS", default=30)
MERCHANT_CONCURRENCY_RETRY_AFTER_SECONDS = env.int(
    "MERCHANT_CONCURRENCY_RETRY_AFTER_SECONDS", default=1
)

# --- Merchants' API keys and the admin's operators (ADR 0019) --------------------------------
# A rotated key keeps working this long after the new one is issued, then answers 401.
API_KEY_ROTATION_OVERLAP_SECONDS = env.int("API_KEY_ROTATION_OVERLAP_SECONDS", default=24 * 3600)
# The prefix of new merchant keys (merchants.services.api_key_prefix, ADR 0039): "test"
# (sk_test_), "live" (sk_live_), or "auto": test when every acquirer is a sandbox one.
API_KEY_MODE = env.str("API_KEY_MODE", default="auto")
# How long a web process trusts an API key it looked up (merchants/authentication.py, ADR 0026):
# a key revoked or expired elsewhere stops working within this many seconds; 0: no cache.
API_KEY_CACHE_SECONDS = env.float("API_KEY_CACHE_SECONDS", default=5.0)
# Admin sessions: a working day, and none survives closing the browser.
SESSION_COOKIE_AGE = env.int("ADMIN_SESSION_SECONDS", default=8 * 3600)
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
# An admin refund form is refused this long after it was rendered: below the idempotency key's
# retention, so a form re-sent after its key was purged never refunds again (payments.E010).
ADMIN_REFUND_FORM_SECONDS = env.int("ADMIN_REFUND_FORM_SECONDS", default=3600)
# Staff must log in with a TOTP code (django-otp); production.py turns it on.
ADMIN_OTP_REQUIRED = env.bool("ADMIN_OTP_REQUIRED", default=False)
# A first TOTP device is enrolled only through a one-time link (manage.py otp_enrolment_link
# <user>), valid this long and until used (console/two_factor.py, ADR 0019).
ADMIN_OTP_ENROLMENT_SECONDS = env.int("ADMIN_OTP_ENROLMENT_SECONDS", default=24 * 3600)
OTP_TOTP_ISSUER = "Payment service admin"
OTP_ADMIN_HIDE_SENSITIVE_DATA = True  # a TOTP secret is shown once, at enrolment
# django-axes: this many failed admin logins for one username from one address lock that pair
# out for ADMIN_LOGIN_LOCKOUT_MINUTES (a success resets the count).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("ADMIN_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("ADMIN_LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "admin/login_locked_out.html"

# Test-only crash injection for fault campaigns (payments/core/crashpoints.py); empty: off.
PAYMENTS_CRASH_POINT = env("PAYMENTS_CRASH_POINT", default="")

# --- Reconciliation (payments/reconciliation/payments.py) ----------------------------------
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
# --- Deferred submission (payments/authorization/deferred_sweep.py; ADR 0024) --------------
# An allow_deferred payment no acquirer can take now waits as `deferred`; beat's sweep submits
# the due ones at the acquirer's pace. After the maximum age it fails acquirer_unavailable: 4 h
# outlasts most acquirer outages, gives a renewal its final answer the same day (the merchant's
# dunning retries in days), and leaves a payment submitted at the last moment 2 h of
# reconciliation (RECONCILIATION_MAX_AGE_SECONDS counts from creation; checks.py warns).
DEFERRED_MAX_AGE_SECONDS = env.float("DEFERRED_MAX_AGE_SECONDS", default=4 * 3600.0)
DEFERRED_SWEEP_INTERVAL_SECONDS = env.float("DEFERRED_SWEEP_INTERVAL_SECONDS", default=10.0)
# A sweep submits at most this many, one at a time (20 x the 8 s deadline < the task limit).
DEFERRED_BATCH_SIZE = env.int("DEFERRED_BATCH_SIZE", default=20)
# Fleet-wide submissions of deferred payments per second (0: no cap of our own; the rate gate
# and the breakers still hold it): keep it below the acquirer's capacity minus live traffic.
DEFERRED_SUBMIT_RATE_PER_SECOND = env.int("DEFERRED_SUBMIT_RATE_PER_SECOND", default=5)
DEFERRED_BACKOFF_BASE_SECONDS = env.float("DEFERRED_BACKOFF_BASE_SECONDS", default=30.0)
DEFERRED_BACKOFF_CAP_SECONDS = env.float("DEFERRED_BACKOFF_CAP_SECONDS", default=900.0)
# --- Customer actions (3-D Secure by redirect; payments/reconciliation/actions.py; ADR 0049) --
# The address of this service as the shopper's browser reaches it: the acquirer sends the
# shopper back to <PUBLIC_BASE_URL>/payments/return/<token>. Empty: POST /payments refuses a
# return_url (customer actions are off) and a payment needing the shopper is declined.
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="")
# A customer action not finished by then is looked up, then voided and canceled: 15 minutes
# is Stripe's and Adyen's order of magnitude for a 3-D Secure session, long enough for a
# shopper to find a phone for an app challenge, short enough that an abandoned hold is
# released soon.
CUSTOMER_ACTION_EXPIRY_SECONDS = env.float("CUSTOMER_ACTION_EXPIRY_SECONDS", default=900.0)
CUSTOMER_ACTION_SWEEP_INTERVAL_SECONDS = env.float(
    "CUSTOMER_ACTION_SWEEP_INTERVAL_SECONDS", default=60.0
)
# A requires_capture payment older than this is voided by the beat (the card networks' common
# hold is 7 days; an expired hold is released by the issuer anyway).
AUTHORIZATION_HOLD_SECONDS = env.float("AUTHORIZATION_HOLD_SECONDS", default=7 * 24 * 3600.0)
# How long the acquirer remembers an idempotency key; the maximum age must stay well below it.
ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS = env.float(
    "ACQUIRER_IDEMPOTENCY_KEY_RETENTION_SECONDS", default=24 * 3600.0
)

# --- Webhooks (webhooks/; docs/webhooks.md) ---------------------------------------------------
# A 2xx within the timeout is delivered; anything else is retried with full jitter, bounds in
# seconds (the last repeats), until the retry window ends. An endpoint failing every attempt for
# WEBHOOK_DISABLE_AFTER_SECONDS is disabled.
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)
WEBHOOK_CONNECT_TIMEOUT_SECONDS = env.float("WEBHOOK_CONNECT_TIMEOUT_SECONDS", default=3.0)
WEBHOOK_RETRY_SCHEDULE_SECONDS = env.list(
    "WEBHOOK_RETRY_SCHEDULE_SECONDS", cast=float, default=[30, 300, 1800, 7200, 18000, 36000]
)
WEBHOOK_RETRY_WINDOW_SECONDS = env.float("WEBHOOK_RETRY_WINDOW_SECONDS", default=3 * 24 * 3600.0)
WEBHOOK_DISABLE_AFTER_SECONDS = env.float("WEBHOOK_DISABLE_AFTER_SECONDS", default=3 * 24 * 3600.0)
WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS = env.float(
    "WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS", default=24 * 3600.0
)
# A claim's lease must outlast an attempt (at most about 2 x the timeout plus the connect).
WEBHOOK_LEASE_SECONDS = env.float("WEBHOOK_LEASE_SECONDS", default=60.0)
WEBHOOK_BATCH_SIZE = env.int("WEBHOOK_BATCH_SIZE", default=20)
WEBHOOK_ENDPOINT_CONCURRENCY = env.int("WEBHOOK_ENDPOINT_CONCURRENCY", default=2)
# Attempts in flight per merchant, fleet-wide (ADR 0042): half of one task's threads, so one
# merchant's slow endpoints never hold a whole batch; claims go round robin across merchants.
WEBHOOK_MERCHANT_CONCURRENCY = env.int("WEBHOOK_MERCHANT_CONCURRENCY", default=4)
WEBHOOK_DELIVERY_THREADS = env.int("WEBHOOK_DELIVERY_THREADS", default=8)
WEBHOOK_SWEEP_INTERVAL_SECONDS = env.float("WEBHOOK_SWEEP_INTERVAL_SECONDS", default=5.0)
# A sweep claims batch after batch for at most this long (well below the task time limit).
WEBHOOK_SWEEP_BUDGET_SECONDS = env.float("WEBHOOK_SWEEP_BUDGET_SECONDS", default=20.0)
# true only in development and tests (config.settings.local, .test): http and loopback URLs.
WEBHOOK_ALLOW_LOCAL_URLS = env.bool("WEBHOOK_ALLOW_LOCAL_URLS", default=False)
# Live endpoints a merchant may have (Stripe allows 16): each event is delivered to each one.
WEBHOOK_MAX_ENDPOINTS = env.int("WEBHOOK_MAX_ENDPOINTS", default=16)
# One failure-rate breaker per endpoint (gateway_client's), its state in the shared Redis.
WEBHOOK_STATE_NAMESPACE = env("WEBHOOK_STATE_NAMESPACE", default="payments:webhooks")
WEBHOOK_BREAKER_WINDOW_SIZE = env.int("WEBHOOK_BREAKER_WINDOW_SIZE", default=20)
WEBHOOK_BREAKER_MINIMUM_CALLS = env.int("WEBHOOK_BREAKER_MINIMUM_CALLS", default=10)
WEBHOOK_BREAKER_FAILURE_RATE_THRESHOLD = env.float(
    "WEBHOOK_BREAKER_FAILURE_RATE_THRESHOLD", default=50.0
)
WEBHOOK_BREAKER_OPEN_SECONDS = env.float("WEBHOOK_BREAKER_OPEN_SECONDS", default=60.0)
WEBHOOK_BREAKER_HALF_OPEN_PERMITS = env.int("WEBHOOK_BREAKER_HALF_OPEN_PERMITS", default=1)

# --- Ledger audit (ledger/): our payments against the acquirer's records -------------------
LEDGER_AUDIT_CSV_DIR = env("LEDGER_AUDIT_CSV_DIR", default=str(BASE_DIR / "audits"))
LEDGER_AUDIT_WINDOW_HOURS = env.float("LEDGER_AUDIT_WINDOW_HOURS", default=25.0)
LEDGER_ACQUIRER_RECORDS = env("LEDGER_ACQUIRER_RECORDS", default="")

# --- Retention (retention/, docs/data.md, ADR 0045) ----------------------------------------
# How long each growing table is kept, in days; beat's purge deletes what is older, in batches
# of RETENTION_PURGE_BATCH_SIZE rows (one short transaction each). The system check
# retention.E001 refuses a value below its floor (a dispute window, a year of audit trail, the
# webhook retry window). Payments and their captures, voids and refunds are never purged here.
RETENTION_PAYMENT_EVENT_DAYS = env.int("RETENTION_PAYMENT_EVENT_DAYS", default=730)
RETENTION_WEBHOOK_EVENT_DAYS = env.int("RETENTION_WEBHOOK_EVENT_DAYS", default=30)
RETENTION_DELETED_WEBHOOK_ENDPOINT_DAYS = env.int(
    "RETENTION_DELETED_WEBHOOK_ENDPOINT_DAYS", default=30
)
RETENTION_AUDIT_TRAIL_DAYS = env.int("RETENTION_AUDIT_TRAIL_DAYS", default=400)
# Acquirers' notifications once applied or ignored: longer than any provider re-sends one
# (Stripe: 3 days; Adyen: up to 30), so a late duplicate still meets its stored twin.
RETENTION_ACQUIRER_NOTIFICATION_DAYS = env.int("RETENTION_ACQUIRER_NOTIFICATION_DAYS", default=35)
RETENTION_ENDED_API_KEY_DAYS = env.int("RETENTION_ENDED_API_KEY_DAYS", default=400)
RETENTION_HEARTBEAT_DAYS = env.int("RETENTION_HEARTBEAT_DAYS", default=7)
RETENTION_PURGE_BATCH_SIZE = env.int("RETENTION_PURGE_BATCH_SIZE", default=1000)

# --- Celery ---------------------------------------------------------------------------------
# Required in production; config.settings.local falls back on the embedded Redis
# (devtools/embedded_redis.py), the test settings on kombu's in-memory transport.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT_SECONDS", default=3600),
    # An unreachable broker fails an enqueue fast: a request never waits on the OS's timeout.
    "socket_connect_timeout": 2,
}
# Enqueues after commit try twice, then give up (logged; the reconciliation sweep covers them):
# at most ~4 s of a request on a dead broker, within the web timeout (docs/operations.md).
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
# One queue name per deployment; tests give each run its own, so they never share messages.
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_DEFAULT_QUEUE", default="celery")
# Webhooks' two tasks on queues of their own, named after the default one (ADR 0042): a fresh
# event's task never waits behind a pile of sweeps. A worker started without -Q (the Procfile's,
# compose's) consumes all three, taking from each in turn (kombu's Redis transport rotates them).
WEBHOOK_EVENT_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}.webhook-events"
WEBHOOK_SWEEP_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}.webhook-sweeps"
CELERY_TASK_QUEUES = [
    Queue(name, routing_key=name)
    for name in (CELERY_TASK_DEFAULT_QUEUE, WEBHOOK_EVENT_QUEUE, WEBHOOK_SWEEP_QUEUE)
]
CELERY_TASK_ROUTES = {
    "webhooks.tasks.deliver_event": {"queue": WEBHOOK_EVENT_QUEUE},
    "webhooks.tasks.deliver_due": {"queue": WEBHOOK_SWEEP_QUEUE},
}
# Which of those queues a worker consumes (ADR 0050; config/celery_app.py selects them at the
# worker's start, as -Q would): all (one worker does everything: tests, small set-ups), tasks
# (the default queue: the Procfile's prefork `worker`), webhooks (the two webhook queues: the
# Procfile's `webhooks`, Celery's threads pool, many deliveries in flight in one process).
WORKER_QUEUE_SETS: dict[str, list[str] | None] = {
    "all": None,
    "tasks": [CELERY_TASK_DEFAULT_QUEUE],
    "webhooks": [WEBHOOK_EVENT_QUEUE, WEBHOOK_SWEEP_QUEUE],
}
WORKER_QUEUES = env("WORKER_QUEUES", default="all")
if WORKER_QUEUES not in WORKER_QUEUE_SETS:
    raise ImproperlyConfigured(f"WORKER_QUEUES must be one of {', '.join(WORKER_QUEUE_SETS)}.")
CELERY_TASK_IGNORE_RESULT = True
# Why each of these: docs/configuration.md. Tasks are idempotent (leases, status checks under
# row locks, the acquirer idempotency key), so a redelivered task is harmless.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Off: cancelling ends the pool process by its pid, which may have moved on to the next task by
# then (a task killed mid-run, its message back only after the visibility timeout; celery issue
# #9250 besides). Tasks are idempotent under leases and row locks, so one that runs again in
# parallel after a broker loss changes nothing twice (docs/operations.md).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT_SECONDS", default=280)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
# Heartbeats of every worker and beat (heartbeats/): payments_process_heartbeat_age_seconds.
HEARTBEAT_INTERVAL_SECONDS = env.float("HEARTBEAT_INTERVAL_SECONDS", default=15.0)
CELERY_BEAT_SCHEDULER = "heartbeats.celery:HeartbeatScheduler"
# The task modules of payments' rooms (docs/adr/0037-rooms-inside-payments.md), also gathered
# by payments/tasks.py for autodiscovery (``<app>.tasks``); task names unchanged.
CELERY_IMPORTS = [
    "payments.authorization.deferred_tasks",
    "payments.reconciliation.tasks",
    "payments.notifications.tasks",
]
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
    "submit-due-deferred-payments": {
        "task": "payments.deferred_tasks.submit_due_deferred_payments",
        "schedule": DEFERRED_SWEEP_INTERVAL_SECONDS,
    },
    "expire-customer-actions": {
        "task": "payments.tasks.expire_customer_actions",
        "schedule": CUSTOMER_ACTION_SWEEP_INTERVAL_SECONDS,
    },
    "void-expired-authorizations": {
        "task": "payments.tasks.void_expired_authorizations",
        "schedule": env.float("AUTHORIZATION_HOLD_SWEEP_INTERVAL_SECONDS", default=3600.0),
    },
    "apply-due-notifications": {
        "task": "payments.notifications.tasks.apply_due_notifications",
        "schedule": NOTIFICATION_SWEEP_INTERVAL_SECONDS,
    },
    "deliver-due-webhooks": {
        "task": "webhooks.tasks.deliver_due",
        "schedule": WEBHOOK_SWEEP_INTERVAL_SECONDS,
        # A sweep not started within its interval is dropped: the next one does its work, and
        # sweeps never pile up in their queue while the workers are busy.
        "options": {"expires": WEBHOOK_SWEEP_INTERVAL_SECONDS},
    },
    "purge-expired-idempotency-keys": {
        "task": "payments.tasks.purge_expired_idempotency_keys",
        "schedule": env.float("IDEMPOTENCY_KEY_PURGE_INTERVAL_SECONDS", default=3600.0),
    },
    "purge-expired-data": {
        "task": "retention.tasks.purge_expired_data",
        "schedule": env.float("RETENTION_PURGE_INTERVAL_SECONDS", default=3600.0),
    },
}

# --- Logging (observability/log_config.py; ADR 0016) ---------------------------------------
# json: one JSON object per line (production); console: readable lines (development). Every
# process (gunicorn, Django, the Celery worker and beat, commands) uses this configuration.
LOG_FORMAT = env("LOG_FORMAT", default="json")
LOG_LEVEL = env("LOG_LEVEL", default="INFO")
LOGGING = logging_config(log_format=LOG_FORMAT, level=LOG_LEVEL)
structlog_configure()
# Celery keeps its hands off the root logger: config/celery_app.py applies LOGGING instead.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
