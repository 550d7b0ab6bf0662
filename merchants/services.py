"""Writes for merchants and API keys."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from card_data import contains_card_number
from merchants.models import ApiKey, Merchant

#: A key of a deployment that reaches real acquirers: secret scanners and humans recognise it.
API_KEY_PREFIX = "sk_live_"
#: A key that can reach only sandbox acquirers (or a local deployment's): moves no money
#: (docs/adr/0039-key-prefixes-say-test-or-live.md).
API_KEY_TEST_PREFIX = "sk_test_"
#: Both prefixes, for whatever must recognise any merchant key (redaction, scanners).
API_KEY_PREFIXES = (API_KEY_PREFIX, API_KEY_TEST_PREFIX)
#: The sandbox acquirer's keys start with this (sandbox_acquirer, docs/sandbox.md).
SANDBOX_ACQUIRER_KEY_PREFIX = "sandbox_sk_"
#: Characters of the key kept in clear for display (the prefix plus 4 random characters).
DISPLAY_PREFIX_LENGTH = len(API_KEY_PREFIX) + 4
#: ``last_used_at`` is written when it is older than this (at most one write a minute a key).
LAST_USED_RESOLUTION = timedelta(seconds=60)


def api_key_hash(raw_key: str) -> str:
    """Return the SHA-256 hex digest (64 characters) under which ``raw_key`` is stored."""
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class IssuedApiKey:
    """A newly issued key: ``raw`` is shown once and never stored."""

    api_key: ApiKey
    raw: str


def api_key_prefix() -> str:
    """The prefix of the keys this deployment issues now: ``sk_test_`` or ``sk_live_``.

    ``API_KEY_MODE`` decides: ``test``, ``live``, or ``auto`` (the default; ``test`` under
    ``config.settings.local``): test when every configured acquirer is a sandbox acquirer (its
    key starts with ``sandbox_sk_``), live otherwise. Every merchant of a deployment reaches
    the same acquirers, so a merchant whose key says test can move no real money.
    """
    mode = settings.API_KEY_MODE
    if mode == "auto":
        acquirers = settings.ACQUIRERS
        keys = [a.api_key for a in acquirers] if acquirers else [settings.ACQUIRER_API_KEY]
        sandbox_only = all(key.startswith(SANDBOX_ACQUIRER_KEY_PREFIX) for key in keys)
        mode = "test" if sandbox_only else "live"
    return API_KEY_TEST_PREFIX if mode == "test" else API_KEY_PREFIX


#: Every key :func:`_new_raw_key` makes: a prefix of :data:`API_KEY_PREFIXES` and
#: ``secrets.token_urlsafe(32)`` (43 characters of RFC 4648's URL-safe base64 alphabet). The
#: authentication refuses any other token without a database look-up.
API_KEY_SHAPE = re.compile(
    "(?:" + "|".join(re.escape(prefix) for prefix in API_KEY_PREFIXES) + r")[A-Za-z0-9_-]{43}"
)


def _new_raw_key(prefix: str) -> str:
    # A key never holds what the card-number detector refuses (a Luhn-valid run of 13-19
    # digits across '-' and '_'), so pasting one anywhere never reads as card data.
    while True:
        raw = prefix + secrets.token_urlsafe(32)
        if not contains_card_number(raw):
            return raw


@transaction.atomic
def api_key_issue(*, merchant: Merchant, now: datetime | None = None) -> IssuedApiKey:
    """Issue a new API key (:func:`api_key_prefix`, ``sk_test_`` or ``sk_live_``, + 43 URL-safe
    characters, never one the card-number detector refuses) for ``merchant`` (rotation).

    Each earlier key still active keeps working for the overlap,
    ``API_KEY_ROTATION_OVERLAP_SECONDS`` (default 24 h) from ``now`` (aware; default the
    current time), then expires: its ``expires_at`` is set, or moved earlier, to that time.
    Revoke one at once with :func:`api_key_revoke`.
    """
    now = now or timezone.now()
    ends = now + timedelta(seconds=settings.API_KEY_ROTATION_OVERLAP_SECONDS)
    merchant.api_keys.filter(revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=ends)
    ).update(expires_at=ends)
    raw = _new_raw_key(api_key_prefix())
    api_key = ApiKey.objects.create(
        merchant=merchant, prefix=raw[:DISPLAY_PREFIX_LENGTH], key_hash=api_key_hash(raw)
    )
    return IssuedApiKey(api_key=api_key, raw=raw)


def api_key_authenticate(raw_key: str, *, now: datetime) -> ApiKey | None:
    """The active key ``raw_key`` names (its merchant loaded), or None: unknown, revoked, or
    expired at ``now`` (aware), the end of its rotation overlap.

    Records the use: ``last_used_at`` becomes ``now`` when it is empty or older than a minute
    (one conditional ``UPDATE``, so at most one write a minute a key, whatever the traffic).
    """
    api_key = (
        ApiKey.objects.select_related("merchant")
        .filter(key_hash=api_key_hash(raw_key), revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if api_key is None:
        return None
    if api_key.last_used_at is None or api_key.last_used_at < now - LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
    return api_key


def api_key_revoke(*, api_key: ApiKey) -> None:
    """Revoke ``api_key``: from now on it answers 401."""
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])


class MerchantNameRefused(ValueError):
    """A merchant name holding a card number (``card_data``); the message does not repeat it."""

    def __init__(self) -> None:
        super().__init__("A merchant name must not hold a card number.")


def merchant_name_check(name: str) -> str:
    """``name`` unchanged; raises :class:`MerchantNameRefused` when it holds a card number."""
    if contains_card_number(name):
        raise MerchantNameRefused
    return name


@transaction.atomic
def merchant_create(*, name: str) -> tuple[Merchant, IssuedApiKey]:
    """Create a merchant named ``name`` with one API key.

    Raises :class:`MerchantNameRefused` when the name holds a card number (before any query),
    ``IntegrityError`` when the name is taken.
    """
    merchant_name_check(name)
    merchant = Merchant.objects.create(name=name)
    return merchant, api_key_issue(merchant=merchant)
