"""The operations console's roles (issue 7), as groups with permissions:

* ``support``: view payments, their events, idempotency keys, merchants and API keys (by
  prefix); no action.
* ``operator``: the same, plus the actions: ``payments.reconcile_payment`` ("Reconcile now"),
  ``payments.resolve_payment`` ("Resolve as ... after manual check") and
  ``merchants.rotate_api_key`` ("Rotate API key", "Revoke").

Nobody gets add/change/delete on payments, events or idempotency keys: the admin refuses them
anyway. Permissions are created here when missing (the post-migrate signal that normally makes
the view permissions runs only after every migration). Running it again changes nothing.
"""

from django.db import migrations

# (app_label, model, verbose name) of the models the roles look at.
VIEWED = [
    ("payments", "payment", "payment"),
    ("payments", "paymentevent", "payment event"),
    ("idempotency", "idempotencykey", "idempotency key"),
    ("merchants", "merchant", "merchant"),
    ("merchants", "apikey", "API key"),
]
# (app_label, model, codename, name) of the actions' custom permissions.
ACTIONS = [
    ("payments", "payment", "reconcile_payment", "Can request reconciliation of a payment"),
    ("payments", "payment", "resolve_payment", "Can resolve a needs_review payment"),
    ("merchants", "merchant", "rotate_api_key", "Can rotate and revoke API keys"),
]
ROLES = {
    "support": [(app, f"view_{model}") for app, model, _ in VIEWED],
    "operator": [(app, f"view_{model}") for app, model, _ in VIEWED]
    + [(app, codename) for app, _, codename, _ in ACTIONS],
}


def create_roles(apps, schema_editor) -> None:
    """Create (or complete) the ``support`` and ``operator`` groups and their permissions."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")

    permissions = {}
    wanted = [
        (app, model, f"view_{model}", f"Can view {verbose}") for app, model, verbose in VIEWED
    ]
    for app, model, codename, name in wanted + ACTIONS:
        content_type, _ = ContentType.objects.get_or_create(app_label=app, model=model)
        permission, _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
        permissions[(app, codename)] = permission
    for role, keys in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*(permissions[key] for key in keys))


def remove_roles(apps, schema_editor) -> None:
    """Delete the two groups and the actions' custom permissions."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    Group.objects.filter(name__in=ROLES).delete()
    for app, model, codename, _ in ACTIONS:
        Permission.objects.filter(
            content_type__app_label=app, content_type__model=model, codename=codename
        ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("merchants", "0001_initial"),
        ("idempotency", "0002_admin_indexes"),
        ("payments", "0003_admin_indexes"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
