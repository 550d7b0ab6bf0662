"""Building the gateway client from Django settings (gateway_client never reads settings).

One client per process and configuration, sharing one state store: Redis when
``ACQUIRER_STATE_REDIS_URL`` is set (every gunicorn and Celery process then sees the same rate
gate, retry budget, circuit breakers and concurrency limit), else in-memory (one process, the
embedded default).
"""

from __future__ import annotations

import threading
from functools import lru_cache

from django.conf import settings

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AimdConfig,
    BreakerConfig,
    MemoryStore,
    RedisStore,
    RetryPolicy,
    StateStore,
)
from gateway_client.breaker_types import DEFAULT_GROUPS
from gateway_client.budget import RetryBudget
from payments.acquirer.metrics import GatewayMetrics


def acquirer_config() -> AcquirerConfig:
    """Return the acquirer configuration from the ``ACQUIRER_*`` settings (seconds)."""
    return AcquirerConfig(
        base_url=settings.ACQUIRER_BASE_URL,
        api_key=settings.ACQUIRER_API_KEY,
        connect_timeout=settings.ACQUIRER_CONNECT_TIMEOUT_SECONDS,
        read_timeout=settings.ACQUIRER_READ_TIMEOUT_SECONDS,
        honours_idempotency_keys=settings.ACQUIRER_HONOURS_IDEMPOTENCY_KEYS,
        name=settings.ACQUIRER_NAME,
        quota_profile=settings.ACQUIRER_QUOTA_PROFILE,
        rate_scope=settings.ACQUIRER_RATE_SCOPE,
    )


def api_retry_policy() -> RetryPolicy:
    """The retry policy of the synchronous ``POST /payments`` path (``ACQUIRER_RETRY_*``):
    by default 3 attempts within an 8 s deadline, below a merchant client's usual 10 s."""
    return RetryPolicy(
        max_attempts=settings.ACQUIRER_RETRY_MAX_ATTEMPTS,
        backoff_base=settings.ACQUIRER_RETRY_BACKOFF_BASE_SECONDS,
        backoff_cap=settings.ACQUIRER_RETRY_BACKOFF_CAP_SECONDS,
        connect_timeout=settings.ACQUIRER_CONNECT_TIMEOUT_SECONDS,
        read_timeout=settings.ACQUIRER_READ_TIMEOUT_SECONDS,
        deadline=settings.ACQUIRER_DEADLINE_SECONDS,
        max_server_wait=settings.ACQUIRER_MAX_SERVER_WAIT_SECONDS,
        retry_ambiguous=settings.ACQUIRER_RETRY_AMBIGUOUS,
        min_attempt_time=settings.ACQUIRER_MIN_ATTEMPT_SECONDS,
        concurrency_wait=settings.ACQUIRER_CONCURRENCY_WAIT_SECONDS,
    )


def breaker_config() -> BreakerConfig:
    """The circuit breaker of each endpoint group (``ACQUIRER_BREAKER_*``; seconds, percent)."""
    return BreakerConfig(
        window_type=settings.ACQUIRER_BREAKER_WINDOW_TYPE,
        window_size=settings.ACQUIRER_BREAKER_WINDOW_SIZE,
        minimum_calls=settings.ACQUIRER_BREAKER_MINIMUM_CALLS,
        failure_rate_threshold=settings.ACQUIRER_BREAKER_FAILURE_RATE_THRESHOLD,
        slow_call_duration=settings.ACQUIRER_BREAKER_SLOW_CALL_SECONDS,
        slow_call_rate_threshold=settings.ACQUIRER_BREAKER_SLOW_CALL_RATE_THRESHOLD,
        open_duration=settings.ACQUIRER_BREAKER_OPEN_SECONDS,
        half_open_permits=settings.ACQUIRER_BREAKER_HALF_OPEN_PERMITS,
        max_half_open_duration=settings.ACQUIRER_BREAKER_MAX_HALF_OPEN_SECONDS,
    )


def concurrency_config() -> AimdConfig:
    """The adaptive concurrency limit per quota scope (``ACQUIRER_CONCURRENCY_*``)."""
    return AimdConfig(
        initial_limit=settings.ACQUIRER_CONCURRENCY_INITIAL_LIMIT,
        max_limit=settings.ACQUIRER_CONCURRENCY_MAX_LIMIT,
    )


def reconciliation_retry_policy() -> RetryPolicy:
    """The policy of reconciliation's look-ups and re-sends: nobody waits on them, so a longer
    deadline (``RECONCILIATION_ACQUIRER_DEADLINE_SECONDS``) and server waits up to it."""
    deadline = settings.RECONCILIATION_ACQUIRER_DEADLINE_SECONDS
    return api_retry_policy().replace(
        deadline=deadline,
        max_server_wait=deadline,
        concurrency_wait=settings.RECONCILIATION_CONCURRENCY_WAIT_SECONDS,
    )


@lru_cache(maxsize=4)
def _state_store(redis_url: str, namespace: str) -> StateStore:
    if redis_url:
        return RedisStore.from_url(redis_url, namespace=namespace, metrics=GatewayMetrics())
    return MemoryStore(namespace=namespace)


def shared_state_store() -> StateStore:
    """The process's state store for the current settings: Redis at
    ``ACQUIRER_STATE_REDIS_URL`` (namespace ``ACQUIRER_STATE_NAMESPACE``) with its in-memory
    fallback, or memory when the URL is empty. The acquirer client's gate, budget, breakers and
    limits use it, and so do the merchants' limits (``payments.limits``)."""
    return _state_store(settings.ACQUIRER_STATE_REDIS_URL, settings.ACQUIRER_STATE_NAMESPACE)


_clients_lock = threading.Lock()
_clients: dict[tuple, AcquirerClient] = {}


def acquirer_client() -> AcquirerClient:
    """Return the process-wide client for the current settings (one connection pool each)."""
    config, policy = acquirer_config(), api_retry_policy()
    redis_url, namespace = settings.ACQUIRER_STATE_REDIS_URL, settings.ACQUIRER_STATE_NAMESPACE
    budget_settings = (
        settings.ACQUIRER_RETRY_BUDGET_TTL_SECONDS,
        settings.ACQUIRER_RETRY_BUDGET_MIN_PER_SECOND,
        settings.ACQUIRER_RETRY_BUDGET_PERCENT,
    )
    breaker, limiter = breaker_config(), concurrency_config()
    cache_key = (config, policy, redis_url, namespace, budget_settings, breaker, limiter)
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            store = _state_store(redis_url, namespace)
            ttl, min_per_second, percent = budget_settings
            budget = RetryBudget(
                store,
                config.name,
                ttl=ttl,
                min_retries_per_second=min_per_second,
                percent_can_retry=percent,
            )
            client = AcquirerClient(
                config,
                policy=policy,
                store=store,
                budget=budget,
                metrics=GatewayMetrics(),
                breakers=dict.fromkeys(DEFAULT_GROUPS, breaker),  # every group, one config
                limiter=limiter,
            )
            _clients[cache_key] = client
        return client


def acquirer_clients_reset() -> None:
    """Close every cached client and forget in-memory gate and budget state (for tests)."""
    with _clients_lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
        _state_store.cache_clear()
