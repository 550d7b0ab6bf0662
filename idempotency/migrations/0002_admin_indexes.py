"""Indexes for the operations console (issue 7): the exact search by key (the unique
constraint leads with the merchant) and the status filter in the admin's expiry order. Built
CONCURRENTLY, so applying this migration does not block writes (hence ``atomic = False``)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("idempotency", "0001_initial"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="idempotencykey",
            index=models.Index(fields=["key"], name="idempotency_key_lookup"),
        ),
        AddIndexConcurrently(
            model_name="idempotencykey",
            index=models.Index(
                fields=["status", "-expires_at"], name="idempotency_key_status_expiry"
            ),
        ),
    ]
