"""Indexes for the operations console (issue 7): every admin filter, ordering and exact search
answers through an index at millions of rows. Built CONCURRENTLY, so applying this migration
does not block writes to the payments table (hence ``atomic = False``)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("payments", "0002_reconciliation_schedule"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(fields=["-created_at", "-id"], name="payment_created"),
        ),
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(
                fields=["status", "-created_at", "-id"], name="payment_status_created"
            ),
        ),
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(
                fields=["currency", "-created_at", "-id"], name="payment_currency_created"
            ),
        ),
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(fields=["reference"], name="payment_reference_lookup"),
        ),
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(fields=["acquirer_reference"], name="payment_acquirer_reference"),
        ),
    ]
