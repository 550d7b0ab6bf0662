"""One row per ledger audit run: when, over which window, and what it found.

The discrepancy rows are kept as JSON (at most :data:`STORED_ROWS_LIMIT`; the CSV file holds
all of them), so the admin shows the last result without a table per category.
"""

from __future__ import annotations

from django.db import models

#: Discrepancy (and unresolved) rows kept in the database per run; the CSV has every row.
STORED_ROWS_LIMIT = 1000


class AuditRun(models.Model):
    """The result of one ``audit_acquirer`` run (command, daily task or campaign)."""

    ran_at = models.DateTimeField(db_index=True)
    since = models.DateTimeField(help_text="Payments created from this instant were audited.")
    duration_seconds = models.FloatField(default=0.0)
    source = models.CharField(max_length=200, help_text="Where the acquirer's records came from.")
    triggered_by = models.CharField(max_length=32, help_text="command, task, ...")
    payments_checked = models.PositiveIntegerField(default=0)
    records_checked = models.PositiveIntegerField(
        default=0, help_text="Authorizations recorded by the acquirer in the window."
    )
    # Counts per category (ledger.services.Category).
    record_unknown_to_us = models.PositiveIntegerField(
        default=0, help_text="Acquirer records whose reference is none of our payments."
    )
    payment_unknown_to_acquirer = models.PositiveIntegerField(
        default=0, help_text="Succeeded or declined payments with no acquirer record."
    )
    multiple_records = models.PositiveIntegerField(
        default=0, help_text="Payments with more than one acquirer record (charged twice)."
    )
    status_mismatch = models.PositiveIntegerField(default=0)
    amount_mismatch = models.PositiveIntegerField(
        default=0, help_text="Amount or currency differs."
    )
    acquirer_reference_mismatch = models.PositiveIntegerField(default=0)
    # Amounts and refunds (issue 12, migration 0003).
    captured_amount_mismatch = models.PositiveIntegerField(
        default=0, help_text="The acquirer's captured total is not ours."
    )
    refunded_amount_mismatch = models.PositiveIntegerField(
        default=0, help_text="The acquirer's refunded total is not ours."
    )
    void_mismatch = models.PositiveIntegerField(
        default=0, help_text="Voided at the acquirer and not canceled here, or the reverse."
    )
    refund_unknown_to_us = models.PositiveIntegerField(
        default=0, help_text="Acquirer refunds whose reference is none of our refunds."
    )
    refund_unknown_to_acquirer = models.PositiveIntegerField(
        default=0, help_text="Succeeded refunds the acquirer has no record of."
    )
    refund_mismatch = models.PositiveIntegerField(
        default=0, help_text="Refund status, amount, acquirer id or count differs."
    )
    refunds_checked = models.PositiveIntegerField(default=0, help_text="Our refunds compared.")
    refund_records_checked = models.PositiveIntegerField(
        default=0, help_text="Refunds recorded by the acquirer in the window."
    )
    discrepancies_total = models.PositiveIntegerField(default=0)
    unresolved_total = models.PositiveIntegerField(
        default=0, help_text="Processing or needs_review payments: not discrepancies."
    )
    discrepancies = models.JSONField(default=list, blank=True)
    unresolved = models.JSONField(default=list, blank=True)
    csv_path = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-ran_at", "-id"]
        verbose_name = "ledger audit run"

    def __str__(self) -> str:
        verdict = (
            "clean"
            if self.discrepancies_total == 0
            else (f"{self.discrepancies_total} discrepancies")
        )
        return f"audit {self.ran_at:%Y-%m-%d %H:%M:%S} ({verdict})"

    @property
    def clean(self) -> bool:
        return self.discrepancies_total == 0
