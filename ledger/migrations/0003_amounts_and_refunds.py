"""Issue 12: the ledger audit compares amounts and refunds: counts of the new discrepancy kinds
and the refunds compared, per run."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0002_audit_view_roles"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditrun",
            name="captured_amount_mismatch",
            field=models.PositiveIntegerField(
                default=0, help_text="The acquirer's captured total is not ours."
            ),
        ),
        migrations.AddField(
            model_name="auditrun",
            name="refund_mismatch",
            field=models.PositiveIntegerField(
                default=0, help_text="Refund status, amount, acquirer id or count differs."
            ),
        ),
        migrations.AddField(
            model_name="auditrun",
            name="refund_records_checked",
            field=models.PositiveIntegerField(
                default=0, help_text="Refunds recorded by the acquirer in the window."
            ),
        ),
        migrations.AddField(
            model_name="auditrun",
            name="refund_unknown_to_acquirer",
            field=models.PositiveIntegerField(
                default=0, help_text="Succeeded refunds the acquirer has no record of."
            ),
        ),
        migrations.AddField(
            model_name="auditrun",
            name="refund_unknown_to_us",
            field=models.PositiveIntegerField(
                default=0, help_text="Acquirer refunds whose reference is none of our refunds."
            ),
        ),
        migrations.AddField(
            model_name="auditrun",
            name="refunded_amount_mismatch",
            field=models.PositiveIntegerField(
                default=0, help_text="The acquirer's refunded total is not ours."
            ),
        ),
        migrations.AddField(
            model_name="auditrun",
            name="refunds_checked",
            field=models.PositiveIntegerField(default=0, help_text="Our refunds compared."),
        ),
        migrations.AddField(
            model_name="auditrun",
            name="void_mismatch",
            field=models.PositiveIntegerField(
                default=0, help_text="Voided at the acquirer and not canceled here, or the reverse."
            ),
        ),
    ]
