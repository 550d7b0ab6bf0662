"""Building the gateway client from Django settings (gateway_client never reads settings)."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from gateway_client import AcquirerClient, AcquirerConfig


def acquirer_config() -> AcquirerConfig:
    """Return the acquirer configuration from the ``ACQUIRER_*`` settings (seconds)."""
    return AcquirerConfig(
        base_url=settings.ACQUIRER_BASE_URL,
        api_key=settings.ACQUIRER_API_KEY,
        connect_timeout=settings.ACQUIRER_CONNECT_TIMEOUT_SECONDS,
        read_timeout=settings.ACQUIRER_READ_TIMEOUT_SECONDS,
        honours_idempotency_keys=settings.ACQUIRER_HONOURS_IDEMPOTENCY_KEYS,
        name="sandbox",
    )


@lru_cache(maxsize=4)
def _client_for(config: AcquirerConfig) -> AcquirerClient:
    return AcquirerClient(config)


def acquirer_client() -> AcquirerClient:
    """Return the process-wide client for the current settings (one connection pool each)."""
    return _client_for(acquirer_config())
