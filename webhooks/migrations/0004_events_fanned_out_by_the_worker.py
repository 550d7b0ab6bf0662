"""Events fanned out by the worker (issue 26, ADR 0042): the payment's transaction writes the
event only; a worker expands it into one delivery per endpoint and sets ``fanned_out_at``.

Every event written before this migration already has its deliveries (they were inserted in
the change's transaction), so each is marked fanned out at its own ``created_at`` before the
partial index of the unexpanded ones is built (it starts empty).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("merchants", "0003_acquirer_order"),
        ("webhooks", "0003_fewer_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="fanned_out_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When a worker expanded it into its deliveries; null until then (ADR "
                "0042). Set at once when no endpoint was subscribed.",
                null=True,
            ),
        ),
        migrations.RunSQL(
            "UPDATE webhooks_event SET fanned_out_at = created_at WHERE fanned_out_at IS NULL",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("fanned_out_at__isnull", True)),
                fields=["created_at"],
                name="event_fan_out_pending",
            ),
        ),
    ]
