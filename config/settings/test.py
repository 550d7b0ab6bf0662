"""Settings for the test suite: the same PostgreSQL rules, faster password hashing."""

from config.database import database_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import env

DATABASES = database_settings(env, allow_embedded=True)
# Closed after each request, so threads and the live server never share a connection.
DATABASES["default"]["CONN_MAX_AGE"] = 0
# The suite drops and creates its database (DROP DATABASE forces a checkpoint: seconds on a busy
# machine) and holds a test's transaction open while subprocesses work, so no statement or
# idle-in-transaction timeout here; lock_timeout stays (tests/integration/test_database_outage.py).
# Behind PgBouncer (DATABASE_POOLER) there is no options string: its connect_query sets them.
if "options" in DATABASES["default"]["OPTIONS"]:
    DATABASES["default"]["OPTIONS"]["options"] = " ".join(
        f"{part.partition('=')[0]}=0"
        if part.startswith(("statement_timeout=", "idle_in_transaction_session_timeout="))
        else part
        for part in DATABASES["default"]["OPTIONS"]["options"].split()
    )
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Nothing listens here (the discard port): a test that forgets the sandbox fixture fails fast
# instead of reaching a sandbox started by `make run` on this machine.
ACQUIRER_BASE_URL = "http://127.0.0.1:9"
ACQUIRER_READ_TIMEOUT_SECONDS = 1.0
CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT_OPTIONS = {}
# The suite's merchants have no limits unless a test sets them (on the merchant, or here):
# tests/integration/test_merchant_limits*.py do.
MERCHANT_RATE_LIMIT_REQUESTS = 0
MERCHANT_CONCURRENT_PAYMENTS = 0
# Nor a limit on failed authentications (the suite sends thousands of bad keys from 127.0.0.1):
# tests/integration/test_authentication_limit.py sets one.
API_AUTH_FAILURE_LIMIT = 0
# The suite's own, whatever a developer's .env (docker compose's, README) sets.
METRICS_BEARER_TOKEN = ""
# Webhook receivers on this machine (http://127.0.0.1:...); never in production.
WEBHOOK_ALLOW_LOCAL_URLS = True
# The shopper's return address (customer actions); an e2e stack sets its own port.
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="http://testserver")
# One acquirer from the ACQUIRER_* settings whatever the environment says; tests that route
# between several set ACQUIRERS themselves (tests/integration/test_acquirer_failover.py).
ACQUIRERS = None
