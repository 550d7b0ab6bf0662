"""The retention policy: periods from the settings, and the inventory of what is kept.

Every model of the project has an :class:`Entry` in :data:`INVENTORY` (a test fails when one
is added without it): how long its rows are kept and why, and whether beat's purge deletes them
(``purged``), they go with the row they belong to (``with``), or they are kept while the thing
they describe exists (``kept``). :data:`REDIS_KEYS` does the same for Redis. docs/data.md is the
same inventory in prose; the periods' reasons (PCI DSS requirement 3.1 and 10.5.1, the GDPR's
storage limitation, the card networks' dispute windows) are in ADR 0045.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from django.conf import settings

#: The card networks' longest chargeback window in common use: 540 days from the transaction
#: (Visa and Mastercard allow up to 540 days for some reasons; most are 120). A payment's
#: history is kept at least this long after its last change.
DISPUTE_WINDOW_DAYS = 540
#: PCI DSS 10.5.1: audit logs kept at least 12 months (three of them at hand).
AUDIT_TRAIL_FLOOR_DAYS = 365

#: ``RETENTION_*`` setting -> the smallest value the system check accepts (days). The webhook
#: events' floor is computed from ``WEBHOOK_RETRY_WINDOW_SECONDS`` (retention.checks).
FLOORS_DAYS = {
    "RETENTION_PAYMENT_EVENT_DAYS": DISPUTE_WINDOW_DAYS,
    "RETENTION_WEBHOOK_EVENT_DAYS": 1,
    "RETENTION_DELETED_WEBHOOK_ENDPOINT_DAYS": 1,
    "RETENTION_AUDIT_TRAIL_DAYS": AUDIT_TRAIL_FLOOR_DAYS,
    "RETENTION_ENDED_API_KEY_DAYS": 1,
    "RETENTION_HEARTBEAT_DAYS": 1,
    # Adyen re-sends an unanswered notification for up to 30 days: a stored one must outlive
    # that, or a late duplicate would be taken for a new one (applying it again changes
    # nothing, but it would be counted and stored twice).
    "RETENTION_ACQUIRER_NOTIFICATION_DAYS": 31,
}


@dataclass(frozen=True)
class RetentionPolicy:
    """The periods the purges apply (each a ``timedelta``) and their batch size (rows)."""

    payment_event: timedelta
    webhook_event: timedelta
    deleted_webhook_endpoint: timedelta
    audit_trail: timedelta
    ended_api_key: timedelta
    heartbeat: timedelta
    acquirer_notification: timedelta
    #: django-axes' ``AXES_COOLOFF_TIME``: a failed-login counter older than this locks nobody.
    login_cooloff: timedelta
    batch_size: int = 1000

    @classmethod
    def from_settings(cls) -> RetentionPolicy:
        """The policy of the ``RETENTION_*`` settings (validated by retention.checks)."""
        return cls(
            payment_event=timedelta(days=settings.RETENTION_PAYMENT_EVENT_DAYS),
            webhook_event=timedelta(days=settings.RETENTION_WEBHOOK_EVENT_DAYS),
            deleted_webhook_endpoint=timedelta(
                days=settings.RETENTION_DELETED_WEBHOOK_ENDPOINT_DAYS
            ),
            audit_trail=timedelta(days=settings.RETENTION_AUDIT_TRAIL_DAYS),
            ended_api_key=timedelta(days=settings.RETENTION_ENDED_API_KEY_DAYS),
            heartbeat=timedelta(days=settings.RETENTION_HEARTBEAT_DAYS),
            acquirer_notification=timedelta(days=settings.RETENTION_ACQUIRER_NOTIFICATION_DAYS),
            login_cooloff=settings.AXES_COOLOFF_TIME,
            batch_size=settings.RETENTION_PURGE_BATCH_SIZE,
        )


How = Literal["purged", "with", "kept"]


@dataclass(frozen=True)
class Entry:
    """One model's retention: ``how`` (``purged`` by beat, ``with`` the row it belongs to,
    ``kept`` while what it describes exists), ``period`` (the setting or rule) and ``why``."""

    how: How
    period: str
    why: str


AUDIT = "RETENTION_AUDIT_TRAIL_DAYS (400)"

#: Every model (``app_label.ModelName``), concrete and proxy; auto-created many-to-many tables
#: go with their rows. Purged ones have a purge in retention.purges.PURGES of the same label.
INVENTORY: dict[str, Entry] = {
    "payments.Payment": Entry(
        "kept", "for ever here", "the record of money moved: accounting law (6 to 10 years) and "
        "disputes; no card number, no name; archiving is the operator's decision"),
    "payments.PaymentOperation": Entry("kept", "with its payment", "captures, voids, refunds: "
        "part of the payment's money record"),
    "payments.Refund": Entry("kept", "with its payment", "a proxy of PaymentOperation"),
    "payments.AcquirerNotification": Entry(
        "purged", "RETENTION_ACQUIRER_NOTIFICATION_DAYS (35) after receipt, once applied or "
        "ignored (one still waiting is kept)", "the provider's raw notification (card numbers "
        "redacted) and the deduplication of its re-sends, which stop within 30 days"),
    "payments.Dispute": Entry("kept", "with its payment", "a chargeback is part of the "
        "payment's money record"),
    "payments.PaymentEvent": Entry(
        "purged", "RETENTION_PAYMENT_EVENT_DAYS (730) after the payment's last change, once "
        "final", "the history support and disputes read; kept past the dispute window"),
    "idempotency.IdempotencyKey": Entry(
        "purged", "IDEMPOTENCY_KEY_RETENTION_SECONDS (24 h) after its claim, unless its "
        "payment or operation is unresolved", "replays of a retried request (purged by "
        "payments.tasks.purge_expired_idempotency_keys)"),
    "merchants.Merchant": Entry("kept", "while the merchant's payments are", "the account"),
    "merchants.ApiKey": Entry(
        "purged", "RETENTION_ENDED_API_KEY_DAYS (400) after revocation or expiry",
        "which key was in use when (a hash, never the key)"),
    "webhooks.WebhookEndpoint": Entry(
        "purged", "RETENTION_DELETED_WEBHOOK_ENDPOINT_DAYS (30) after deletion (live ones are "
        "kept)", "a deleted endpoint's secret and URL serve nothing after its deliveries"),
    "webhooks.Event": Entry(
        "purged", "RETENTION_WEBHOOK_EVENT_DAYS (30), unless a delivery is pending or an "
        "operator acted on it within " + AUDIT, "the merchant's event list and re-delivery "
        "(Stripe keeps 30 days); each holds the whole payment as the API shows it"),
    "webhooks.Delivery": Entry("with", "its event or its endpoint", "delivery state"),
    "webhooks.DeliveryAttempt": Entry(
        "with", "its delivery", "status, duration, the merchant's answer (up to 64 KiB)"),
    "webhooks.OperatorAction": Entry("purged", AUDIT, "audit trail (PCI DSS 10.5.1)"),
    "ledger.AuditRun": Entry(
        "purged", AUDIT + ", its CSV file too", "the acquirer audit's findings"),
    "heartbeats.Heartbeat": Entry(
        "purged", "RETENTION_HEARTBEAT_DAYS (7) unseen; each kind's newest row is kept",
        "liveness of workers and beat; a host name per process, so rows pile up"),
    "admin.LogEntry": Entry("purged", AUDIT, "operators' changes in the admin: audit trail"),
    "sessions.Session": Entry("purged", "at its expiry (ADMIN_SESSION_SECONDS, 8 h)",
        "admin logins"),
    "axes.AccessAttempt": Entry(
        "purged", "AXES_COOLOFF_TIME (ADMIN_LOGIN_LOCKOUT_MINUTES) after the attempt",
        "the failed-login counter of the lockout"),
    "axes.AccessAttemptExpiration": Entry("with", "its access attempt", "the lockout's end"),
    "axes.AccessLog": Entry("purged", AUDIT, "admin logins and logouts: audit trail"),
    "axes.AccessFailureLog": Entry("purged", AUDIT, "failed admin logins: audit trail"),
    "auth.User": Entry("kept", "while the operator works here", "operators' accounts"),
    "auth.Group": Entry("kept", "configuration", "the admin roles"),
    "auth.Permission": Entry("kept", "configuration", "Django's permissions"),
    "contenttypes.ContentType": Entry("kept", "configuration", "Django's model registry"),
    "otp_totp.TOTPDevice": Entry("kept", "with its user", "the operator's second factor"),
}  # fmt: skip


@dataclass(frozen=True)
class RedisKey:
    """One family of Redis keys: its pattern, what bounds it, and why."""

    pattern: str
    bound: str
    why: str


REDIS_KEYS: tuple[RedisKey, ...] = (
    RedisKey(
        "<WEBHOOK_STATE_NAMESPACE>:breaker:webhooks:<endpoint id>",
        "purged by retention once its endpoint is deleted or gone",
        "each endpoint's circuit breaker; one per endpoint ever made"),
    RedisKey("<ACQUIRER_STATE_NAMESPACE>:breaker|gate|aimd|budget:<acquirer>...",
             "one per configured acquirer (ACQUIRERS); the budget's with a TTL",
             "the gateway's shared state"),
    RedisKey("<ACQUIRER_STATE_NAMESPACE>:merchant_rate|merchant_slots|auth_failures:"
             "<merchant id or client address>", "a TTL (PEXPIRE) to the window's end",
             "per-merchant and per-client limits"),
    RedisKey("the Celery broker's queues", "drained by the workers; results are not stored",
             "tasks"),
)  # fmt: skip
