"""The webhooks console's roles: ``support`` views endpoints, events, deliveries, attempts and
the operators' actions; ``operator`` also re-delivers events and enables endpoints again
(``webhooks.redeliver_event``, ``webhooks.enable_webhook_endpoint``). Created here when missing,
like payments' 0004/0007; running it again changes nothing."""

from django.db import migrations

VIEWED = ["webhookendpoint", "event", "delivery", "deliveryattempt", "operatoraction"]
ACTIONS = [
    ("webhookendpoint", "enable_webhook_endpoint", "Can enable a disabled webhook endpoint again"),
    ("event", "redeliver_event", "Can re-deliver a webhook event"),
]


def grant(apps, schema_editor) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")

    def permission(model: str, codename: str, name: str):
        content_type, _ = ContentType.objects.get_or_create(app_label="webhooks", model=model)
        found, _ = Permission.objects.get_or_create(
            content_type=content_type, codename=codename, defaults={"name": name}
        )
        return found

    views = [permission(m, f"view_{m}", f"Can view {m}") for m in VIEWED]
    actions = [permission(*action) for action in ACTIONS]
    support, _ = Group.objects.get_or_create(name="support")
    support.permissions.add(*views)
    operator, _ = Group.objects.get_or_create(name="operator")
    operator.permissions.add(*views, *actions)


class Migration(migrations.Migration):

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("webhooks", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='event',
            options={'ordering': ['-created_at', '-id'], 'permissions': [('redeliver_event', 'Can re-deliver a webhook event')]},
        ),
        migrations.AlterModelOptions(
            name='webhookendpoint',
            options={'ordering': ['-created_at', '-id'], 'permissions': [('enable_webhook_endpoint', 'Can enable a disabled webhook endpoint again')]},
        ),
        migrations.RunPython(grant, migrations.RunPython.noop),
    ]
