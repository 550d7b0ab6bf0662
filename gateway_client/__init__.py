"""
A framework-free client for the upstream card acquirer.

Plain Python and httpx: no Django, DRF, Celery or project package is imported here, and no
setting or environment variable is read. The caller hands in an `AcquirerConfig`, and
optionally a `RetryPolicy` and a shared `StateStore`:

    config = AcquirerConfig(base_url="https://acquirer.example", api_key=key, name="acme")
    store = RedisStore.from_url("redis://127.0.0.1:6379/0", namespace="payments")
    with AcquirerClient(config, policy=RetryPolicy(), store=store) as client:
        authorization = client.authorize(AuthorizationRequest(...))
        later = client.lookup(reference, policy=RetryPolicy(deadline=30.0))

A decline is a value (`Authorization.approved is False`); infrastructure failures raise a
`GatewayError` whose branch says whether the request may have been applied (see errors.py and
classify.py). Retries, deadlines, Retry-After, quota headers, the shared rate gate and the
retry budget are described in client.py, policy.py, quota.py, gate.py and budget.py; the
retry-storm simulator is `python -m gateway_client.simulate`.
"""

from .budget import BudgetState, GrpcRetryThrottle, RetryBudget
from .client import AcquirerClient
from .clock import Clock, ManualClock, SystemClock
from .errors import (
    AcquirerUnavailableError,
    AmbiguousOutcomeError,
    AuthenticationError,
    ConnectionFailedError,
    ConnectionLostError,
    GatewayError,
    IdempotencyConflictError,
    InvalidRequestError,
    MalformedResponseError,
    PermanentError,
    RateLimitedError,
    ResponseTimeoutError,
    RetryableError,
    RetryBudgetExhaustedError,
    UpstreamServerError,
)
from .gate import RateGate, scope_for
from .metrics import CounterMetrics, Metrics, NullMetrics
from .policy import RetryPolicy
from .store import AtomicScript, MemoryStore, RedisStore, StateStore
from .types import AcquirerConfig, Authorization, AuthorizationRequest

__all__ = [
    "AcquirerClient",
    "AcquirerConfig",
    "AcquirerUnavailableError",
    "AmbiguousOutcomeError",
    "AtomicScript",
    "AuthenticationError",
    "Authorization",
    "AuthorizationRequest",
    "BudgetState",
    "Clock",
    "ConnectionFailedError",
    "ConnectionLostError",
    "CounterMetrics",
    "GatewayError",
    "GrpcRetryThrottle",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "MalformedResponseError",
    "ManualClock",
    "MemoryStore",
    "Metrics",
    "NullMetrics",
    "PermanentError",
    "RateGate",
    "RateLimitedError",
    "RedisStore",
    "ResponseTimeoutError",
    "RetryBudget",
    "RetryBudgetExhaustedError",
    "RetryPolicy",
    "RetryableError",
    "StateStore",
    "SystemClock",
    "UpstreamServerError",
    "scope_for",
]
