"""Webhook endpoints, the event outbox, and the delivery schedule (ADR 0012).

* :class:`WebhookEndpoint`: a merchant's URL with the event types it wants and its signing
  secret(s): ``secret``, and after a rotation ``previous_secret`` until
  ``previous_secret_expires_at`` (both sign meanwhile). Secrets are never shown after the
  answer that created them, never logged, never shown in the admin.
* :class:`Event`: the outbox row, written in the transaction of the state change that causes it;
  ``data`` is the JSON text of ``{"object": <the payment or refund as the API shows it>}``,
  kept as text so its keys keep the API's order. ``fanned_out_at`` is null until a worker has
  expanded it into its deliveries (``webhooks.fanout``, ADR 0042).
* :class:`Delivery`: one event to one endpoint, written by the worker's fan-out (one per
  endpoint, the unique ``delivery_once``), with its own schedule in PostgreSQL
  (``next_attempt_at``), a lease (``lease_until``, ``lease_token``) so two workers never make
  the same attempt at once, and its retry window (``window_started_at``).
* :class:`DeliveryAttempt`: one HTTP attempt: status code, duration, the response body read up
  to 64 KiB, or the error class. Never a signature or a secret.
* :class:`OperatorAction`: an operator's re-delivery or re-enable, who and why (the audit).
"""

from __future__ import annotations

import secrets

from django.db import models


def new_endpoint_id() -> str:
    """``we_`` + 24 lower-case hex characters (96 random bits)."""
    return "we_" + secrets.token_hex(12)


def new_event_id() -> str:
    """``evt_`` + 24 lower-case hex characters (96 random bits)."""
    return "evt_" + secrets.token_hex(12)


class EndpointStatus(models.TextChoices):
    ENABLED = "enabled", "Enabled"
    DISABLED = "disabled", "Disabled"


class DisabledReason(models.TextChoices):
    """Why an endpoint was disabled (shown to the merchant and the operators)."""

    GONE = "gone", "The endpoint answered 410 Gone"
    FAILING = "failing", "Every delivery failed for the disable window (3 days)"


class DeliveryStatus(models.TextChoices):
    """``pending``: due at ``next_attempt_at`` (or waiting for its endpoint to be enabled
    again); ``delivered``: a 2xx answer; ``failed``: its retry window ended without one;
    ``canceled``: the endpoint was deleted."""

    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


class WebhookEndpoint(models.Model):
    """A merchant's webhook endpoint. ``enabled_events``: event types, or ``["*"]``."""

    id = models.CharField(primary_key=True, max_length=32, default=new_endpoint_id, editable=False)
    merchant = models.ForeignKey(
        "merchants.Merchant", on_delete=models.PROTECT, related_name="webhook_endpoints"
    )
    url = models.CharField(max_length=2048)
    enabled_events = models.JSONField(default=list)
    description = models.CharField(max_length=255, null=True, blank=True)
    status = models.CharField(max_length=16, choices=EndpointStatus, default=EndpointStatus.ENABLED)
    disabled_reason = models.CharField(max_length=16, choices=DisabledReason, null=True, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    failing_since = models.DateTimeField(
        null=True, blank=True, help_text="The first failed attempt since the last success."
    )
    secret = models.CharField(max_length=64)
    previous_secret = models.CharField(max_length=64, null=True, blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("enable_webhook_endpoint", "Can enable a disabled webhook endpoint again")]
        indexes = [
            models.Index(
                fields=["merchant", "-created_at", "-id"],
                name="webhook_endpoint_merchant",
                condition=models.Q(deleted_at__isnull=True),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=EndpointStatus.values),
                name="webhook_endpoint_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.id

    def signing_secrets(self, now) -> list[str]:
        """The secrets that sign a delivery at ``now``: the current one, and the previous one
        until its overlap ends."""
        found = [self.secret]
        expires_at = self.previous_secret_expires_at
        if self.previous_secret and expires_at is not None and expires_at > now:
            found.append(self.previous_secret)
        return found


class Event(models.Model):
    """One state change, as the merchant sees it; written in the change's transaction."""

    id = models.CharField(primary_key=True, max_length=32, default=new_event_id, editable=False)
    #: No index of its own: ``event_merchant_created`` starts with ``merchant_id`` (migration
    #: 0003).
    merchant = models.ForeignKey(
        "merchants.Merchant",
        on_delete=models.PROTECT,
        related_name="webhook_events",
        db_index=False,
    )
    type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=32, help_text="The payment's or refund's id.")
    data = models.TextField(help_text='JSON text of {"object": ...}, in the API\'s key order.')
    created_at = models.DateTimeField()
    fanned_out_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a worker expanded it into its deliveries; null until then (ADR "
        "0042). Set at once when no endpoint was subscribed.",
    )
    #: The W3C ``traceparent`` of the span that recorded the event (empty when tracing was
    #: off): each delivery's span joins that trace and the merchant's server gets it in the
    #: ``traceparent`` header (ADR 0044).
    trace_context = models.CharField(
        max_length=55,
        blank=True,
        default="",
        help_text="W3C traceparent of the change that made the event (empty: not traced).",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("redeliver_event", "Can re-deliver a webhook event")]
        indexes = [
            # The sweep's look-up of events a lost message or a killed worker left unexpanded.
            models.Index(
                fields=["created_at"],
                name="event_fan_out_pending",
                condition=models.Q(fanned_out_at__isnull=True),
            ),
            models.Index(fields=["merchant", "-created_at", "-id"], name="event_merchant_created"),
            models.Index(
                fields=["merchant", "type", "-created_at", "-id"], name="event_merchant_type"
            ),
            models.Index(fields=["object_id"], name="event_object"),
            models.Index(fields=["-created_at", "-id"], name="event_created"),
        ]

    def __str__(self) -> str:
        return self.id


class Delivery(models.Model):
    """One event to one endpoint, and its schedule (see the module's docstring)."""

    #: No index of its own: the unique ``delivery_once`` starts with ``event_id`` (migration
    #: 0003).
    event = models.ForeignKey(
        Event, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    status = models.CharField(max_length=16, choices=DeliveryStatus, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    window_started_at = models.DateTimeField(
        help_text="Retries stop at this plus WEBHOOK_RETRY_WINDOW_SECONDS."
    )
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_token = models.CharField(max_length=32, null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=64, null=True, blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="delivery_due",
                condition=models.Q(status="pending"),
            ),
            models.Index(
                fields=["endpoint", "lease_until"],
                name="delivery_endpoint_leases",
                condition=models.Q(status="pending"),
            ),
            models.Index(
                fields=["created_at"],
                name="delivery_backlog",
                condition=models.Q(status="pending"),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["event", "endpoint"], name="delivery_once"),
            models.CheckConstraint(
                condition=models.Q(status__in=DeliveryStatus.values),
                name="delivery_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id}"


class DeliveryAttempt(models.Model):
    """One HTTP attempt of a delivery. ``status_code`` None: no answer (``error`` says why)."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_rows")
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="attempt_rows"
    )
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=16)  # an outcome of webhooks.delivery
    error = models.CharField(max_length=64, null=True, blank=True)
    response_body = models.TextField(blank=True, default="")
    response_truncated = models.BooleanField(default=False)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["-started_at", "-id"], name="attempt_started"),
            models.Index(fields=["event", "-started_at"], name="attempt_event"),
            models.Index(fields=["endpoint", "-started_at"], name="attempt_endpoint"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id} -> {self.endpoint_id} #{self.number}"


class OperatorAction(models.Model):
    """An operator's action on webhooks (the audit): who, what, on which rows, and why."""

    operator = models.CharField(max_length=150)
    action = models.CharField(max_length=32)  # "redeliver_event", "enable_endpoint"
    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    event = models.ForeignKey(
        Event, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    note = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.operator} {self.action}"
