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

    #: No index of its own: the unique ``(merchant_id, key)`` serves it (migration 0003).
    merchant = models.ForeignKey("merchants.Merchant", on_delete=models.CASCADE, db_index=False)
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
            # The operations console (idempotency/admin.py): exact search by key (migration
            # 0002), and its in_progress filter in the admin's expiry order: the few keys of
            # requests running or crashed; a completed key is written here only while in
            # progress, and the ``completed`` filter walks ``expires_at`` (migration 0003).
            models.Index(fields=["key"], name="idempotency_key_lookup"),
            models.Index(
                fields=["-expires_at"],
                name="idempotency_key_in_progress",
                condition=models.Q(status="in_progress"),
            ),
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
