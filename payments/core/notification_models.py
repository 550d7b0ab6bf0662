"""What providers tell us: the stored notifications and the disputes they report.

:class:`AcquirerNotification`: every notification that passed its connector's verification,
stored first, raw (ADR 0046), deduplicated by ``(acquirer, event_id)`` (the provider's identity
of the event: a redelivery or a replay inserts nothing). Its ``status`` says whether it was
applied; an early or out-of-order one stays ``received`` with a ``next_attempt_at`` until it
can be (payments/notifications/).

:class:`Dispute`: one dispute (a chargeback, or an inquiry before one) of a payment at its
acquirer, unique by ``(acquirer, acquirer_dispute_reference)``; its status moves only through
``payments.core.dispute_states``, which keeps ``Payment.amount_disputed`` and the merchant's
``dispute.*`` events with it.

Both are imported by ``payments.models`` (where Django looks for an app's models).
"""

from __future__ import annotations

import secrets

from django.db import models

__all__ = [
    "AcquirerNotification",
    "Dispute",
    "DisputeStatus",
    "NotificationStatus",
    "new_dispute_id",
]


def new_dispute_id() -> str:
    """A new dispute id: ``dsp_`` + 24 lower-case hex characters (96 random bits)."""
    return "dsp_" + secrets.token_hex(12)


class NotificationStatus(models.TextChoices):
    """Where a stored notification stands."""

    #: Stored, not applied yet (waiting for our phase 2, or the look-up, or a worker).
    RECEIVED = "received", "Received"
    #: Applied through the state machines (or found to change nothing).
    APPLIED = "applied", "Applied"
    #: About nothing we hold (another account's payment, an event type we do not read).
    IGNORED = "ignored", "Ignored"


class AcquirerNotification(models.Model):
    """One verified notification of an acquirer, stored before anything else happens.

    ``body``: the raw body as received (UTF-8, at most ``gateway_client.MAX_NOTIFICATION_BYTES``;
    the signature headers are not kept). ``event_id`` / ``event_type``: the provider's;
    ``subject``: payment, refund, dispute or other; ``payment_id``: ours, once resolved.
    ``attempts``: how many times the apply task ran; ``next_attempt_at``: when a ``received``
    one is due again; ``last_error``: why the last attempt did not apply it (never a secret).
    """

    acquirer = models.CharField(max_length=24)
    event_id = models.CharField(max_length=255)
    event_type = models.CharField(max_length=100)
    subject = models.CharField(max_length=16)
    body = models.TextField()
    status = models.CharField(
        max_length=16, choices=NotificationStatus, default=NotificationStatus.RECEIVED
    )
    payment_id = models.CharField(max_length=32, null=True, blank=True)
    received_at = models.DateTimeField()
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["acquirer", "event_id"], name="acquirer_notification_event_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=NotificationStatus.values),
                name="acquirer_notification_status_valid",
            ),
        ]
        indexes = [
            # The sweep of due notifications (payments/notifications/apply.py).
            models.Index(
                fields=["next_attempt_at"],
                name="acquirer_notification_due",
                condition=models.Q(status="received"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.acquirer} {self.event_id}"


class DisputeStatus(models.TextChoices):
    """A dispute's status (``gateway_client.disputes``: the providers' mapped to these)."""

    NEEDS_RESPONSE = "needs_response", "Needs response"
    UNDER_REVIEW = "under_review", "Under review"
    WON = "won", "Won"
    LOST = "lost", "Lost"


class Dispute(models.Model):
    """A dispute of a payment, as its acquirer reports it. ``amount``: minor units of
    ``currency`` (ISO 4217), what the dispute holds or withdrew; ``reason``: the provider's
    reason code; ``provider_status``: the provider's own status word; ``evidence_due_by``: the
    deadline to respond, when given; ``closed_at``: when it became ``won`` or ``lost``."""

    id = models.CharField(primary_key=True, max_length=32, default=new_dispute_id, editable=False)
    payment = models.ForeignKey(
        "payments.Payment", on_delete=models.PROTECT, related_name="disputes"
    )
    acquirer = models.CharField(max_length=24)
    acquirer_dispute_reference = models.CharField(max_length=255)
    amount = models.BigIntegerField(help_text="Minor units of the currency.")
    currency = models.CharField(max_length=3, help_text="ISO 4217 alphabetic code.")
    reason = models.CharField(max_length=100, blank=True, default="")
    status = models.CharField(max_length=16, choices=DisputeStatus)
    provider_status = models.CharField(max_length=40, blank=True, default="")
    evidence_due_by = models.DateTimeField(null=True, blank=True)
    #: The provider's time of the last notice applied: an older notice changes nothing.
    provider_updated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["acquirer", "acquirer_dispute_reference"], name="dispute_reference_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=DisputeStatus.values), name="dispute_status_valid"
            ),
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="dispute_amount_valid"),
        ]
        indexes = [models.Index(fields=["status", "-created_at"], name="dispute_status_created")]

    def __str__(self) -> str:
        return self.id
