"""A merchant's preferred acquirer order (payments/acquirer/routing.py, ADR 0023)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("merchants", "0002_limits_and_key_lifetimes")]

    operations = [
        migrations.AddField(
            model_name="merchant",
            name="acquirer_order",
            field=models.CharField(
                blank=True,
                default="",
                help_text="Acquirer names (ACQUIRERS) to try first, comma-separated, in order; "
                "the others follow by priority. Empty: priority order. Unknown names are "
                "ignored.",
                max_length=255,
            ),
        ),
    ]
