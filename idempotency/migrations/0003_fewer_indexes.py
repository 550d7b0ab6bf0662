"""Fewer index entries per idempotency key (issue 18, ADR 0030): each index costs an entry on
the claim's INSERT and another on the answer's UPDATE (it changes ``status``, so it is never
HOT).

* The foreign-key index on ``merchant_id`` goes: the unique ``(merchant_id, key)`` starts with
  it and serves every look-up by merchant (the merchant's ``CASCADE`` included).
* ``idempotency_key_status_expiry`` (status, expires_at DESC) becomes
  ``idempotency_key_in_progress`` (expires_at DESC) ``WHERE status = 'in_progress'``: the
  console's ``in_progress`` filter (the few keys of running or crashed requests) reads it as
  before; a key is written there once, by its claim, and not again when it completes. The
  ``completed`` filter (nearly every key) walks the ``expires_at`` index, which the console's
  default ordering, the expired filter and the purge already use.

Built and dropped CONCURRENTLY (``atomic = False``), the new index first; reversible.
"""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

#: The foreign-key index Django created for ``merchant`` (its migration state drops it here).
MERCHANT_INDEX = "idempotency_idempotencykey_merchant_id_d49118ca"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("idempotency", "0002_admin_indexes"),
        ("merchants", "0001_initial"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="idempotencykey",
            index=models.Index(
                condition=models.Q(("status", "in_progress")),
                fields=["-expires_at"],
                name="idempotency_key_in_progress",
            ),
        ),
        RemoveIndexConcurrently(model_name="idempotencykey", name="idempotency_key_status_expiry"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="idempotencykey",
                    name="merchant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        to="merchants.merchant",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX CONCURRENTLY IF EXISTS "{MERCHANT_INDEX}"',
                    reverse_sql=f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{MERCHANT_INDEX}" '
                    'ON "idempotency_idempotencykey" (merchant_id)',
                ),
            ],
        ),
    ]
