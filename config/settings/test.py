"""Settings for the test suite: the same PostgreSQL rules, faster password hashing."""

from config.embedded_db import database_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import env

DATABASES = database_settings(env, allow_embedded=True)
# Closed after each request, so threads and the live server never share a connection.
DATABASES["default"]["CONN_MAX_AGE"] = 0
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Nothing listens here (the discard port): a test that forgets the sandbox fixture fails fast
# instead of reaching a sandbox started by `make run` on this machine.
ACQUIRER_BASE_URL = "http://127.0.0.1:9"
ACQUIRER_READ_TIMEOUT_SECONDS = 1.0
CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT_OPTIONS = {}
# Webhook receivers on this machine (http://127.0.0.1:...); never in production.
WEBHOOK_ALLOW_LOCAL_URLS = True
