"""Issue 12, the operations console: the refunds list and the admin refund.

* ``Refund``: a proxy of ``PaymentOperation`` (the ``refund`` rows), for the refunds list.
* Indexes the list needs at millions of rows: its ordering and status filter per kind, and a
  small partial index of the operations in ``needs_review`` (the banner and the payments
  list's "operation needs review" filter).
* ``payments.refund_payment`` ("Refund" on a payment's admin page, through the API's refund
  service), given to the ``operator`` group only; ``support`` keeps its view permissions.
  Created here when missing, like 0004/0005; running it again changes nothing.
"""

from django.db import migrations, models

PERMISSION = ("payments", "payment", "refund_payment", "Can refund a payment from the admin")
GROUP = "operator"


def grant_refund(apps, schema_editor) -> None:
    """Create ``payments.refund_payment`` and give it to ``operator``."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    app_label, model, codename, name = PERMISSION
    content_type, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename=codename, defaults={"name": name}
    )
    group, _ = Group.objects.get_or_create(name=GROUP)
    group.permissions.add(permission)


def revoke_refund(apps, schema_editor) -> None:
    """Delete the permission (which takes it from every group and user)."""
    Permission = apps.get_model("auth", "Permission")
    app_label, model, codename, _ = PERMISSION
    Permission.objects.filter(
        content_type__app_label=app_label, content_type__model=model, codename=codename
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("idempotency", "0002_admin_indexes"),
        ("payments", "0006_payment_lifecycle"),
    ]

    operations = [
        migrations.CreateModel(
            name="Refund",
            fields=[],
            options={
                "verbose_name": "refund",
                "ordering": ["-created_at", "-id"],
                "proxy": True,
                "indexes": [],
                "constraints": [],
            },
            bases=("payments.paymentoperation",),
        ),
        migrations.AddIndex(
            model_name="paymentoperation",
            index=models.Index(
                fields=["kind", "-created_at", "-id"], name="operation_kind_created"
            ),
        ),
        migrations.AddIndex(
            model_name="paymentoperation",
            index=models.Index(
                fields=["kind", "status", "-created_at", "-id"], name="operation_kind_status"
            ),
        ),
        migrations.AddIndex(
            model_name="paymentoperation",
            index=models.Index(
                condition=models.Q(("status", "needs_review")),
                fields=["payment"],
                name="operation_needs_review",
            ),
        ),
        migrations.RunPython(grant_refund, revoke_refund),
    ]
