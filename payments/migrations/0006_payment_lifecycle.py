"""Issue 12: manual capture, void and refunds (``PaymentOperation``), the payment's capture
method and amounts, the new statuses. Payments that succeeded before get amount_captured = amount
(they were captured in full), before the amount constraints are added.
"""

import django.db.models.deletion
from django.db import migrations, models


def captured_amount_of_succeeded_payments(apps, schema_editor) -> None:
    """A payment that succeeded before manual capture existed was captured in full."""
    Payment = apps.get_model("payments", "Payment")
    Payment.objects.filter(status="succeeded").update(amount_captured=models.F("amount"))


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency", "0002_admin_indexes"),
        ("merchants", "0001_initial"),
        ("payments", "0005_breaker_operator_permission"),
    ]

    operations = [
        migrations.CreateModel(
            name="PaymentOperation",
            fields=[
                (
                    "id",
                    models.CharField(
                        editable=False, max_length=32, primary_key=True, serialize=False
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("capture", "Capture"), ("void", "Void"), ("refund", "Refund")],
                        max_length=16,
                    ),
                ),
                (
                    "amount",
                    models.BigIntegerField(help_text="Minor units of the payment's currency."),
                ),
                ("reason", models.CharField(blank=True, max_length=32, null=True)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("needs_review", "Needs review"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("failure_code", models.CharField(blank=True, max_length=64, null=True)),
                (
                    "acquirer_reference",
                    models.CharField(
                        blank=True,
                        help_text="The acquirer's id (a refund's re_ id).",
                        max_length=64,
                        null=True,
                    ),
                ),
                ("acquirer_idempotency_key", models.CharField(max_length=64, unique=True)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                ("next_check_at", models.DateTimeField(blank=True, null=True)),
                ("reconciliation_attempts", models.PositiveIntegerField(default=0)),
                ("reconciliation_lease_until", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.RemoveConstraint(
            model_name="payment",
            name="payment_status_valid",
        ),
        migrations.AddField(
            model_name="payment",
            name="amount_captured",
            field=models.BigIntegerField(
                default=0, help_text="Minor units captured at the acquirer (0 before a capture)."
            ),
        ),
        migrations.AddField(
            model_name="payment",
            name="amount_refunded",
            field=models.BigIntegerField(
                default=0, help_text="Minor units of the succeeded refunds."
            ),
        ),
        migrations.AddField(
            model_name="payment",
            name="capture_method",
            field=models.CharField(
                choices=[("automatic", "Automatic"), ("manual", "Manual")],
                default="automatic",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="payment",
            name="status",
            field=models.CharField(
                choices=[
                    ("processing", "Processing"),
                    ("succeeded", "Succeeded"),
                    ("declined", "Declined"),
                    ("failed", "Failed"),
                    ("needs_review", "Needs review"),
                    ("requires_capture", "Requires capture"),
                    ("capture_pending", "Capture pending"),
                    ("void_pending", "Void pending"),
                    ("canceled", "Canceled"),
                ],
                default="processing",
                max_length=16,
            ),
        ),
        migrations.RunPython(captured_amount_of_succeeded_payments, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="payment",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        [
                            "processing",
                            "succeeded",
                            "declined",
                            "failed",
                            "needs_review",
                            "requires_capture",
                            "capture_pending",
                            "void_pending",
                            "canceled",
                        ],
                    )
                ),
                name="payment_status_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="payment",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("amount_captured__gte", 0),
                    ("amount_captured__lte", models.F("amount")),
                    ("amount_refunded__gte", 0),
                    ("amount_refunded__lte", models.F("amount_captured")),
                ),
                name="payment_amounts_consistent",
            ),
        ),
        migrations.AddConstraint(
            model_name="payment",
            constraint=models.CheckConstraint(
                condition=models.Q(("capture_method__in", ["automatic", "manual"])),
                name="payment_capture_method_valid",
            ),
        ),
        migrations.AddField(
            model_name="paymentoperation",
            name="idempotency_key",
            field=models.OneToOneField(
                blank=True,
                help_text="The key that created it; null for the beat's voids, or once expired.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="payment_operation",
                to="idempotency.idempotencykey",
            ),
        ),
        migrations.AddField(
            model_name="paymentoperation",
            name="payment",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="operations",
                to="payments.payment",
            ),
        ),
        migrations.AddIndex(
            model_name="paymentoperation",
            index=models.Index(
                fields=["payment", "kind", "-created_at", "-id"], name="operation_payment_kind"
            ),
        ),
        migrations.AddIndex(
            model_name="paymentoperation",
            index=models.Index(
                condition=models.Q(("status", "pending")),
                fields=["next_check_at"],
                name="operation_reconciliation_due",
            ),
        ),
        migrations.AddIndex(
            model_name="paymentoperation",
            index=models.Index(fields=["acquirer_reference"], name="operation_acquirer_reference"),
        ),
        migrations.AddConstraint(
            model_name="paymentoperation",
            constraint=models.CheckConstraint(
                condition=models.Q(("amount__gte", 1), ("amount__lte", 99999999999)),
                name="operation_amount_in_range",
            ),
        ),
        migrations.AddConstraint(
            model_name="paymentoperation",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["capture", "void", "refund"])),
                name="operation_kind_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="paymentoperation",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("status__in", ["pending", "succeeded", "failed", "needs_review"])
                ),
                name="operation_status_valid",
            ),
        ),
    ]
