"""Settings for a developer's machine (`make run`): the embedded PostgreSQL and Redis by default."""

from config.database import database_settings
from config.settings.base import *  # noqa: F403
from config.settings.base import LOG_LEVEL, env
from devtools.embedded_redis import local_redis_urls
from observability.log_config import logging_config

DEBUG = env.bool("DJANGO_DEBUG", default=True)
# Readable lines on a developer's terminal; LOG_FORMAT=json shows what production writes.
LOG_FORMAT = env("LOG_FORMAT", default="console")
LOGGING = logging_config(log_format=LOG_FORMAT, level=LOG_LEVEL)
DATABASES = database_settings(env, allow_embedded=True)
# Unset URLs: the embedded Redis, so every process of `make run` shares one broker and one
# acquirer state, as a deployment's processes do.
CELERY_BROKER_URL, ACQUIRER_STATE_REDIS_URL = local_redis_urls()
# Webhook receivers on this machine (http://127.0.0.1:...); never in production.
WEBHOOK_ALLOW_LOCAL_URLS = env.bool("WEBHOOK_ALLOW_LOCAL_URLS", default=True)
# `make run`'s web process, where the sandbox's challenge page sends the shopper back.
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="http://127.0.0.1:8000")
# A developer's keys say so (ADR 0039), whatever acquirers this machine points at.
API_KEY_MODE = env.str("API_KEY_MODE", default="test")
