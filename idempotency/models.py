"""The idempotency key table.

One row per (merchant, key): the unique constraint is what makes a duplicate request lose the
race (claim by INSERT, never SELECT-then-INSERT). The request fingerprint is a plain column that
is compared on every reuse, never part of the constraint: otherwise a changed body would insert
a second row and run a second time.
"""

from __future__ import annotations

from django.db import models


class IdempotencyKey(models.Model):
    """A claimed ``Idempotency-Key`` and, once completed, the response to replay."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress", "In progress"
        COMPLETED = "completed", "Completed"

    merchant = models.ForeignKey("merchants.Merchant", on_delete=models.CASCADE)
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=10)
    route = models.CharField(max_length=200)
    request_fingerprint = models.CharField(max_length=64, help_text="SHA-256 hex digest.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    locked_at = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_headers = models.JSONField(default=dict, blank=True)
    response_body = models.BinaryField(null=True, blank=True)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [
            # The operations console (idempotency/admin.py): exact search by key, and the
            # status filter in the admin's expiry order (migration 0002).
            models.Index(fields=["key"], name="idempotency_key_lookup"),
            models.Index(fields=["status", "-expires_at"], name="idempotency_key_status_expiry"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "key"], name="idempotency_key_unique_per_merchant"
            ),
            models.CheckConstraint(
                condition=~models.Q(status="completed") | models.Q(response_status__isnull=False),
                name="idempotency_key_completed_has_response",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.merchant_id}:{self.key}"
