"""``Authorization: Bearer <API key>`` for the merchant API (DRF authentication class)."""

from __future__ import annotations

import structlog
from django.utils import timezone
from rest_framework import authentication, exceptions

from merchants.models import ApiKey, Merchant
from merchants.services import api_key_authenticate


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Authenticate a merchant by API key (RFC 6750 bearer token syntax).

    ``request.user`` becomes the :class:`~merchants.models.Merchant` and ``request.auth`` the
    :class:`~merchants.models.ApiKey`. A missing, malformed, unknown, revoked or expired key
    (a rotated key after its overlap) raises
    ``NotAuthenticated``/``AuthenticationFailed`` (401); the key itself never appears in an
    error message or a log line.
    """

    keyword = "Bearer"

    def authenticate(self, request) -> tuple[Merchant, ApiKey] | None:
        header = request.headers.get("authorization", "")
        if not header:
            return None  # DRF answers NotAuthenticated (401) through the permission check.
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != self.keyword.lower() or not token or " " in token:
            raise exceptions.AuthenticationFailed(
                "The Authorization header must be 'Bearer <API key>'."
            )
        api_key = api_key_authenticate(token, now=timezone.now())
        if api_key is None:
            raise exceptions.AuthenticationFailed("The API key is not valid.")
        # Every later log line of the request names the merchant (config/request_context.py).
        structlog.contextvars.bind_contextvars(merchant_id=api_key.merchant_id)
        return api_key.merchant, api_key

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'
