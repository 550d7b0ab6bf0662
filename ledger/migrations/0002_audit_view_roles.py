"""The ``support`` and ``operator`` groups (payments migration 0004) may view audit runs."""

from django.db import migrations

ROLES = ("support", "operator")


def grant_view(apps, schema_editor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    content_type, _ = ContentType.objects.get_or_create(app_label="ledger", model="auditrun")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type,
        codename="view_auditrun",
        defaults={"name": "Can view ledger audit run"},
    )
    for group in Group.objects.filter(name__in=ROLES):
        group.permissions.add(permission)


def revoke_view(apps, schema_editor) -> None:
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    for group in Group.objects.filter(name__in=ROLES):
        group.permissions.remove(
            *Permission.objects.filter(
                content_type__app_label="ledger", codename="view_auditrun"
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0001_initial"),
        ("payments", "0004_operations_roles"),
    ]

    operations = [migrations.RunPython(grant_view, revoke_view)]
