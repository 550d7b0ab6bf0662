"""Issue 14: rotating and revoking merchants' API keys is its own role, not the operator's.

* ``merchants.manage_api_keys`` (on the API key model; "Rotate API key", "Revoke") replaces
  ``merchants.rotate_api_key``, which migration 0004 gave the ``operator`` group: that one is
  deleted, so no group or user keeps it.
* The ``key_manager`` group: view merchants and their API keys (by prefix), and
  ``merchants.manage_api_keys``. Whoever holds it can act as a merchant through the API (a new
  key is shown to them once), so it is given to few people, apart from the operators.

Created here when missing, like 0004/0005/0007; running it again changes nothing; reversing it
gives ``operator`` back ``merchants.rotate_api_key`` and deletes ``key_manager``.
"""

from django.db import migrations

GROUP = "key_manager"
NEW = ("merchants", "apikey", "manage_api_keys", "Can rotate and revoke merchants' API keys")
OLD = ("merchants", "merchant", "rotate_api_key", "Can rotate and revoke API keys")
VIEWED = [("merchants", "merchant", "merchant"), ("merchants", "apikey", "API key")]


def _permission(apps, app_label: str, model: str, codename: str, name: str):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    content_type, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename=codename, defaults={"name": name}
    )
    return permission


def create_key_manager(apps, schema_editor) -> None:
    """Create ``key_manager`` with its permissions; delete ``merchants.rotate_api_key``."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    permissions = [
        _permission(apps, app, model, f"view_{model}", f"Can view {verbose}")
        for app, model, verbose in VIEWED
    ] + [_permission(apps, *NEW)]
    group, _ = Group.objects.get_or_create(name=GROUP)
    group.permissions.add(*permissions)
    app_label, model, codename, _ = OLD
    Permission.objects.filter(
        content_type__app_label=app_label, content_type__model=model, codename=codename
    ).delete()


def remove_key_manager(apps, schema_editor) -> None:
    """Delete ``key_manager``; ``operator`` gets ``merchants.rotate_api_key`` back."""
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name=GROUP).delete()
    operator = Group.objects.filter(name="operator").first()
    if operator is not None:
        operator.permissions.add(_permission(apps, *OLD))


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("merchants", "0002_limits_and_key_lifetimes"),
        ("payments", "0007_refunds_console"),
    ]

    operations = [migrations.RunPython(create_key_manager, remove_key_manager)]
