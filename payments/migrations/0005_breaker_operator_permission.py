"""The resilience page's actions (issue 7): ``payments.operate_breaker``, for the ``operator``
group only.

It allows force-open, disable and reset of the acquirer's circuit breakers on the admin's
resilience page (``/admin/payments/resilience/``). ``support`` keeps its view permissions and
may read the page, never act. The permission hangs on the payment content type, like the
other payment actions of migration 0004.

Also makes the content type the page's audit entries use (``payments | circuitbreaker``, a
content type without a model: admin history rows with ``object_id`` = the endpoint group).
Running it again changes nothing.
"""

from django.db import migrations

PERMISSION = (
    "payments",
    "payment",
    "operate_breaker",
    "Can force open, disable and reset the acquirer circuit breakers",
)
GROUP = "operator"
AUDIT_CONTENT_TYPE = ("payments", "circuitbreaker")


def grant_operate_breaker(apps, schema_editor) -> None:
    """Create the permission (and the audit content type) and give it to ``operator``."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    app_label, model, codename, name = PERMISSION
    content_type, _ = ContentType.objects.get_or_create(app_label=app_label, model=model)
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename=codename, defaults={"name": name}
    )
    ContentType.objects.get_or_create(app_label=AUDIT_CONTENT_TYPE[0], model=AUDIT_CONTENT_TYPE[1])
    group, _ = Group.objects.get_or_create(name=GROUP)
    group.permissions.add(permission)


def revoke_operate_breaker(apps, schema_editor) -> None:
    """Delete the permission (which takes it from every group and user). The audit content
    type stays: admin history rows point at it."""
    Permission = apps.get_model("auth", "Permission")
    app_label, model, codename, _ = PERMISSION
    Permission.objects.filter(
        content_type__app_label=app_label, content_type__model=model, codename=codename
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("payments", "0004_operations_roles"),
    ]

    operations = [migrations.RunPython(grant_operate_breaker, revoke_operate_breaker)]
