"""
A framework-free client for the upstream card acquirer.

Plain Python and httpx: no Django, DRF, Celery or project package is imported here, and no
setting or environment variable is read. The caller hands in an `AcquirerConfig`.

    config = AcquirerConfig(base_url="https://acquirer.example", api_key=key)
    with AcquirerClient(config) as client:
        authorization = client.authorize(AuthorizationRequest(...))

A decline is a value (`Authorization.approved is False`); infrastructure failures raise a
`GatewayError` whose branch says whether the request may have been applied (see errors.py and
classify.py).
"""

from .client import AcquirerClient
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
    UpstreamServerError,
)
from .types import AcquirerConfig, Authorization, AuthorizationRequest

__all__ = [
    "AcquirerClient",
    "AcquirerConfig",
    "AcquirerUnavailableError",
    "AmbiguousOutcomeError",
    "AuthenticationError",
    "Authorization",
    "AuthorizationRequest",
    "ConnectionFailedError",
    "ConnectionLostError",
    "GatewayError",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "MalformedResponseError",
    "PermanentError",
    "RateLimitedError",
    "ResponseTimeoutError",
    "RetryableError",
    "UpstreamServerError",
]
