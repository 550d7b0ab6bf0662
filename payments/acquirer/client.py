"""Building the gateway client from Django settings (gateway_client never reads settings).

One client per process and configuration, sharing one state store: Redis when
``ACQUIRER_STATE_REDIS_URL`` is set (every gunicorn and Celery process then sees the same rate
gate, retry budget, circuit breakers and concurrency limit), else in-memory (one process, the
embedded default).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from acquirers.specs import AcquirerSpec
from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AdyenDialect,
    Dialect,
    RetryPolicy,
    SandboxDialect,
    StripeDialect,
)
from payments.acquirer.metrics import GatewayMetrics
from resilience import (
    DEFAULT_GROUPS,
    AimdConfig,
    BreakerConfig,
    MemoryStore,
    RedisStore,
    RetryBudget,
    StateStore,
)


def acquirer_specs() -> tuple[AcquirerSpec, ...]:
    """Every configured acquirer in routing order (priority, then configuration order): the
    ``ACQUIRERS`` setting (acquirers/specs.py), or when it is unset one acquirer named
    ``ACQUIRER_NAME`` built from the ``ACQUIRER_*`` settings (its notification secrets from
    ``ACQUIRER_WEBHOOK_SECRETS``), read now (so tests' settings
    overrides apply)."""
    configured = getattr(settings, "ACQUIRERS", None)
    if configured:
        return tuple(configured)
    return (
        AcquirerSpec(
            name=settings.ACQUIRER_NAME,
            base_url=settings.ACQUIRER_BASE_URL,
            api_key=settings.ACQUIRER_API_KEY,
            webhook_secrets=tuple(settings.ACQUIRER_WEBHOOK_SECRETS.split()),
        ),
    )


def default_acquirer_name() -> str:
    """The name of the first acquirer in routing order (the one payments made before routing
    existed are recorded at, by the migration)."""
    return acquirer_specs()[0].name


def acquirer_spec(name: str | None = None) -> AcquirerSpec:
    """The configured acquirer ``name`` (None: the first in routing order). Raises
    :class:`UnknownAcquirer` for a name no longer configured."""
    specs = acquirer_specs()
    if name is None:
        return specs[0]
    for spec in specs:
        if spec.name == name:
            return spec
    raise UnknownAcquirer(name)


class UnknownAcquirer(LookupError):
    """A payment names an acquirer the settings no longer configure (``ACQUIRERS``): put it
    back in the configuration (its payments' captures, refunds and reconciliation go there)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no acquirer named {name!r} is configured (ACQUIRERS)")
        self.name = name


def _setting(spec: AcquirerSpec | None, name: str) -> Any:
    """The ``ACQUIRER_*`` setting ``name``, overridden by ``spec``'s policy when it has one."""
    value = getattr(settings, name)
    return value if spec is None else spec.setting(name, value)


def acquirer_config(spec: AcquirerSpec | None = None) -> AcquirerConfig:
    """Return the configuration of the acquirer ``spec`` (None: the first configured) from its
    URL, key and name and the ``ACQUIRER_*`` settings it does not override (seconds)."""
    spec = spec or acquirer_spec()
    return AcquirerConfig(
        base_url=spec.base_url,
        api_key=spec.api_key,
        connect_timeout=_setting(spec, "ACQUIRER_CONNECT_TIMEOUT_SECONDS"),
        read_timeout=_setting(spec, "ACQUIRER_READ_TIMEOUT_SECONDS"),
        honours_idempotency_keys=_setting(spec, "ACQUIRER_HONOURS_IDEMPOTENCY_KEYS"),
        name=spec.name,
        quota_profile=_setting(spec, "ACQUIRER_QUOTA_PROFILE"),
        rate_scope=_setting(spec, "ACQUIRER_RATE_SCOPE"),
    )


def acquirer_dialect(spec: AcquirerSpec | None = None) -> Dialect:
    """The connector's dialect of the acquirer ``spec`` (None: the first configured): its
    ``type``'s wire format (``sandbox``, ``stripe`` with its pinned API version, or ``adyen``
    with its merchant account and return URL)."""
    spec = spec or acquirer_spec()
    if spec.type == "stripe":
        assert spec.api_version is not None  # required by acquirers/specs.py
        return StripeDialect(api_version=spec.api_version)
    if spec.type == "adyen":
        assert spec.merchant_account is not None and spec.return_url is not None  # required
        return AdyenDialect(merchant_account=spec.merchant_account, return_url=spec.return_url)
    return SandboxDialect()


def api_retry_policy(spec: AcquirerSpec | None = None) -> RetryPolicy:
    """The retry policy of the synchronous ``POST /payments`` path (``ACQUIRER_RETRY_*``, with
    ``spec``'s overrides): by default 3 attempts within an 8 s deadline, below a merchant
    client's usual 10 s. The deadline is the request's, shared by every acquirer it tries."""
    return RetryPolicy(
        max_attempts=_setting(spec, "ACQUIRER_RETRY_MAX_ATTEMPTS"),
        backoff_base=_setting(spec, "ACQUIRER_RETRY_BACKOFF_BASE_SECONDS"),
        backoff_cap=_setting(spec, "ACQUIRER_RETRY_BACKOFF_CAP_SECONDS"),
        connect_timeout=_setting(spec, "ACQUIRER_CONNECT_TIMEOUT_SECONDS"),
        read_timeout=_setting(spec, "ACQUIRER_READ_TIMEOUT_SECONDS"),
        deadline=settings.ACQUIRER_DEADLINE_SECONDS,
        max_server_wait=_setting(spec, "ACQUIRER_MAX_SERVER_WAIT_SECONDS"),
        retry_ambiguous=_setting(spec, "ACQUIRER_RETRY_AMBIGUOUS"),
        min_attempt_time=_setting(spec, "ACQUIRER_MIN_ATTEMPT_SECONDS"),
        concurrency_wait=_setting(spec, "ACQUIRER_CONCURRENCY_WAIT_SECONDS"),
    )


def breaker_config(spec: AcquirerSpec | None = None) -> BreakerConfig:
    """The circuit breaker of each endpoint group (``ACQUIRER_BREAKER_*``, with ``spec``'s
    overrides; seconds, percent)."""
    return BreakerConfig(
        window_type=settings.ACQUIRER_BREAKER_WINDOW_TYPE,
        window_size=_setting(spec, "ACQUIRER_BREAKER_WINDOW_SIZE"),
        minimum_calls=_setting(spec, "ACQUIRER_BREAKER_MINIMUM_CALLS"),
        failure_rate_threshold=_setting(spec, "ACQUIRER_BREAKER_FAILURE_RATE_THRESHOLD"),
        slow_call_duration=settings.ACQUIRER_BREAKER_SLOW_CALL_SECONDS,
        slow_call_rate_threshold=settings.ACQUIRER_BREAKER_SLOW_CALL_RATE_THRESHOLD,
        open_duration=_setting(spec, "ACQUIRER_BREAKER_OPEN_SECONDS"),
        half_open_permits=_setting(spec, "ACQUIRER_BREAKER_HALF_OPEN_PERMITS"),
        max_half_open_duration=settings.ACQUIRER_BREAKER_MAX_HALF_OPEN_SECONDS,
    )


def concurrency_config(spec: AcquirerSpec | None = None) -> AimdConfig:
    """The adaptive concurrency limit per quota scope (``ACQUIRER_CONCURRENCY_*``, with
    ``spec``'s overrides)."""
    return AimdConfig(
        initial_limit=_setting(spec, "ACQUIRER_CONCURRENCY_INITIAL_LIMIT"),
        max_limit=_setting(spec, "ACQUIRER_CONCURRENCY_MAX_LIMIT"),
    )


def reconciliation_retry_policy(spec: AcquirerSpec | None = None) -> RetryPolicy:
    """The policy of reconciliation's look-ups and re-sends: nobody waits on them, so a longer
    deadline (``RECONCILIATION_ACQUIRER_DEADLINE_SECONDS``) and server waits up to it."""
    deadline = settings.RECONCILIATION_ACQUIRER_DEADLINE_SECONDS
    return api_retry_policy(spec).replace(
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
    limits use it, and so do the merchants' limits (``payments.api.limits``)."""
    return _state_store(settings.ACQUIRER_STATE_REDIS_URL, settings.ACQUIRER_STATE_NAMESPACE)


_clients_lock = threading.Lock()
_clients: dict[tuple, AcquirerClient] = {}
#: The client each acquirer name resolved to under the current settings, so that a request
#: finds its client with one dictionary look-up instead of building the seven configuration
#: objects of its cache key (ADR 0026). Emptied whenever a setting changes (``setting_changed``:
#: ``override_settings`` and pytest-django's ``settings`` send it; settings never change in a
#: serving process).
_resolved: dict[str | None, AcquirerClient] = {}


@receiver(setting_changed)
def _settings_changed(**_: Any) -> None:
    _resolved.clear()


def acquirer_client(name: str | None = None) -> AcquirerClient:
    """Return the process-wide client of the acquirer ``name`` (None: the first in routing
    order) for the current settings, one connection pool each. Its breakers, retry budget,
    rate-gate scope and concurrency limit are keyed by the acquirer's name in the shared state
    store, and its metrics labelled with it. Raises :class:`UnknownAcquirer`."""
    client = _resolved.get(name)
    if client is None:
        client = _resolved[name] = _acquirer_client_built(name)
    return client


def _acquirer_client_built(name: str | None) -> AcquirerClient:
    spec = acquirer_spec(name)
    config, policy = acquirer_config(spec), api_retry_policy(spec)
    redis_url, namespace = settings.ACQUIRER_STATE_REDIS_URL, settings.ACQUIRER_STATE_NAMESPACE
    budget_settings = (
        _setting(spec, "ACQUIRER_RETRY_BUDGET_TTL_SECONDS"),
        _setting(spec, "ACQUIRER_RETRY_BUDGET_MIN_PER_SECOND"),
        _setting(spec, "ACQUIRER_RETRY_BUDGET_PERCENT"),
    )
    breaker, limiter = breaker_config(spec), concurrency_config(spec)
    dialect = acquirer_dialect(spec)
    cache_key = (config, policy, redis_url, namespace, budget_settings, breaker, limiter, dialect)
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
                metrics=GatewayMetrics(config.name),
                breakers=dict.fromkeys(DEFAULT_GROUPS, breaker),  # every group, one config
                limiter=limiter,
                dialect=dialect,
            )
            _clients[cache_key] = client
        return client


def client_for(acquirer: str, given: AcquirerClient | None = None) -> AcquirerClient:
    """The client of the acquirer named ``acquirer`` (a payment's ``acquirer``): ``given`` when
    it is that acquirer's (a caller's own client, e.g. a test's), else the process's client of
    that acquirer. Everything after an authorization goes through this, so a capture, void,
    refund, look-up or re-send reaches the acquirer that holds the payment. Raises
    :class:`UnknownAcquirer`."""
    if given is not None and given.config.name == acquirer:
        return given
    return acquirer_client(acquirer)


def acquirer_clients_reset() -> None:
    """Close every cached client and forget in-memory gate and budget state (for tests)."""
    with _clients_lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
        _resolved.clear()
        _state_store.cache_clear()
