"""Merchants and their API keys.

An API key is shown once, when it is issued, and stored only as a SHA-256 hash. Keys are 256
bits of randomness, so a fast hash is enough (a password hash protects low-entropy secrets).
A merchant may hold several active keys at once, so a key can be rotated without downtime: a
rotation gives the earlier keys an ``expires_at`` (the overlap), a revocation ends one at once.
"""

from __future__ import annotations

from django.db import models


class Merchant(models.Model):
    """A client account of the API. Everything a merchant can see is scoped to it."""

    name = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Per-merchant limits (payments/api/limits.py, ADR 0018); empty: the setting's default.
    rate_limit_requests = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="API requests allowed per MERCHANT_RATE_LIMIT_WINDOW_SECONDS. Empty: the "
        "MERCHANT_RATE_LIMIT_REQUESTS default; 0: no limit.",
    )
    concurrent_payments_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Payment POSTs (create, capture, void, refund) in progress at once. Empty: "
        "the MERCHANT_CONCURRENT_PAYMENTS default; 0: no limit. Keep it below the web tier's "
        "threads per worker (WEB_THREADS).",
    )
    # Routing (payments/acquirer/routing.py): acquirer names tried first, in this order.
    acquirer_order = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="Acquirer names (ACQUIRERS) to try first, comma-separated, in order; the "
        "others follow by priority. Empty: priority order. Unknown names are ignored.",
    )

    def __str__(self) -> str:
        return self.name

    @property
    def preferred_acquirers(self) -> tuple[str, ...]:
        """The names of :attr:`acquirer_order`, in order, blanks dropped."""
        return tuple(name.strip() for name in self.acquirer_order.split(",") if name.strip())

    @property
    def is_authenticated(self) -> bool:
        """Always true: DRF's ``IsAuthenticated`` reads this on ``request.user``."""
        return True


class ApiKey(models.Model):
    """One API key of a merchant: a display prefix and the SHA-256 hex digest of the key."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="api_keys")
    prefix = models.CharField(max_length=16, help_text="The first characters, for display.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    #: Set when a newer key is issued: the key keeps working until then (the rotation overlap,
    #: API_KEY_ROTATION_OVERLAP_SECONDS), and answers 401 from then on.
    expires_at = models.DateTimeField(null=True, blank=True)
    #: When the key last authenticated a request, to the minute (written at most once a minute).
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"
        permissions = [("manage_api_keys", "Can rotate and revoke merchants' API keys")]

    def __str__(self) -> str:
        return f"{self.prefix}…"
