"""``Authorization: Bearer <API key>`` for the merchant API (DRF authentication class), with a
short per-process cache of the keys it looked up (:class:`ApiKeyCache`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog
from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions

from merchants.models import ApiKey, Merchant
from merchants.services import API_KEY_SHAPE, api_key_authenticate, api_key_hash


class ApiKeyCache:
    """The API keys this process authenticated in the last ``API_KEY_CACHE_SECONDS``, by hash.

    A hit costs no query; the key's own end (``expires_at``, a rotation's overlap) is still
    checked against ``now`` on every hit, so a key known to expire stops at that instant. What
    the cache can miss is a change made in *another* process: a key revoked there, or given an
    end by a rotation there, keeps working here for at most ``ttl`` seconds after this process
    looked it up. Changes saved through the ORM in this process clear the cache at once
    (:func:`api_key_cache_clear`, connected to ``post_save``/``post_delete`` of
    :class:`ApiKey` and :class:`Merchant`). Unknown keys are never cached (a wrong key always
    queries). ``clock`` returns aware datetimes (injected by tests). Thread-safe.
    """

    def __init__(self, ttl: Callable[[], float], clock: Callable[[], datetime] = timezone.now):
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[datetime, ApiKey]] = {}
        self._lock = threading.Lock()

    def authenticate(self, raw_key: str) -> ApiKey | None:
        """The active key ``raw_key`` names (merchant loaded), or None (401)."""
        now = self._clock()
        ttl = self._ttl()
        if ttl <= 0:
            return api_key_authenticate(raw_key, now=now)
        digest = api_key_hash(raw_key)
        entry = self._entries.get(digest)
        if entry is not None and entry[0] > now:
            api_key = entry[1]
            if api_key.expires_at is None or api_key.expires_at > now:
                return api_key
            return None
        api_key = api_key_authenticate(raw_key, now=now)
        with self._lock:
            if api_key is None:
                self._entries.pop(digest, None)
            else:
                if len(self._entries) > 10_000:  # bounded: a process serves few merchants' keys
                    self._entries.clear()
                self._entries[digest] = (now + timedelta(seconds=ttl), api_key)
        return api_key

    def holds(self, raw_key: str) -> bool:
        """True when ``raw_key`` is cached and fresh: authenticating it costs no query."""
        entry = self._entries.get(api_key_hash(raw_key))
        return entry is not None and entry[0] > self._clock()

    def clear(self) -> None:
        """Forget every key (the next request of each looks it up again)."""
        with self._lock:
            self._entries.clear()


#: The process's cache, used by :class:`ApiKeyAuthentication`.
API_KEY_CACHE = ApiKeyCache(lambda: settings.API_KEY_CACHE_SECONDS)


def api_key_cache_clear(**_signal_kwargs: object) -> None:
    """Clear :data:`API_KEY_CACHE` (a ``post_save``/``post_delete`` receiver)."""
    API_KEY_CACHE.clear()


def bearer_token_cached(request) -> bool:
    """True when the request's ``Authorization: Bearer`` token is a key this process looked up
    and still trusts (:meth:`ApiKeyCache.holds`): it authenticates without a query. False for
    no header, another scheme, a malformed token or a key not cached."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != ApiKeyAuthentication.keyword.lower() or not API_KEY_SHAPE.fullmatch(token):
        return False
    return API_KEY_CACHE.holds(token)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Authenticate a merchant by API key (RFC 6750 bearer token syntax).

    ``request.user`` becomes the :class:`~merchants.models.Merchant` and ``request.auth`` the
    :class:`~merchants.models.ApiKey`. A missing, malformed, unknown, revoked or expired key
    (a rotated key after its overlap) raises
    ``NotAuthenticated``/``AuthenticationFailed`` (401); the key itself never appears in an
    error message or a log line. Keys are looked up through :data:`API_KEY_CACHE`.
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
        # A token that is not shaped as a key we issue is refused without a query: a flood of
        # garbage tokens costs no database look-up.
        if not API_KEY_SHAPE.fullmatch(token):
            raise exceptions.AuthenticationFailed("The API key is not valid.")
        api_key = API_KEY_CACHE.authenticate(token)
        if api_key is None:
            raise exceptions.AuthenticationFailed("The API key is not valid.")
        # Every later log line of the request names the merchant (observability/request_context.py).
        structlog.contextvars.bind_contextvars(merchant_id=api_key.merchant_id)
        return api_key.merchant, api_key

    def authenticate_header(self, request) -> str:
        return f'{self.keyword} realm="api"'
