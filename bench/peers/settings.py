"""Bench-only settings: the service's own settings (``config.settings.local``) plus two more
routes for the same endpoint (``bench/peers/urls.py``) and the django-idempotency-key middleware,
configured as its README documents.

``BENCH_PEER_STORAGE`` picks the middleware's configuration:

* ``redis`` (default): the README's multi-process set-up, responses in a Django cache on Redis
  (``CacheKeyStorage`` + django-redis) and the storage lock in Redis (``MultiProcessRedisLock``),
  so both gunicorn workers share them; ``BENCH_PEER_REDIS_URL`` (``redis://127.0.0.1:6379/14``).
* ``memory``: the package's defaults, ``MemoryKeyStorage`` and a ``ThreadLock`` (per process).

Every other setting, the real ``POST /payments`` included, is the service's own.
"""

import os

from config.settings.local import *  # noqa: F403
from config.settings.local import MIDDLEWARE

ROOT_URLCONF = "bench.peers.urls"

# Opt-in per view (@idempotency_key), so the service's own routes are untouched.
MIDDLEWARE = [*MIDDLEWARE, "idempotency_key.middleware.ExemptIdempotencyKeyMiddleware"]

_redis_url = os.environ.get("BENCH_PEER_REDIS_URL", "redis://127.0.0.1:6379/14")
_storage = os.environ.get("BENCH_PEER_STORAGE", "redis")

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "idempotency": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": _redis_url,
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
    },
}

if _storage == "memory":
    IDEMPOTENCY_KEY = {}  # MemoryKeyStorage + ThreadLock, the package's defaults
else:
    IDEMPOTENCY_KEY = {
        "STORAGE": {
            "CLASS": "idempotency_key.storage.CacheKeyStorage",
            "CACHE_NAME": "idempotency",
        },
        "LOCK": {
            "CLASS": "idempotency_key.locks.redis.MultiProcessRedisLock",
            "LOCATION": _redis_url,
            "NAME": "bench-peer-idempotency-lock",
            "TTL": None,
            "ENABLE": True,
            "TIMEOUT": 0.1,
        },
    }
