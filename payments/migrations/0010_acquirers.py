"""Several acquirers (ADR 0023): each payment names the acquirer that holds it.

Existing payments were all made at the one acquirer there was: they get the first acquirer in
routing order (``payments.acquirer.client.default_acquirer_name``: the ``ACQUIRERS`` setting's
first, else ``ACQUIRER_NAME``), so their captures, refunds and reconciliation keep going there.
"""

from django.db import migrations, models


def name_the_default_acquirer(apps, schema_editor):
    from django.conf import settings

    configured = getattr(settings, "ACQUIRERS", None)
    name = configured[0].name if configured else settings.ACQUIRER_NAME
    apps.get_model("payments", "Payment").objects.filter(acquirer="").update(acquirer=name)


class Migration(migrations.Migration):
    dependencies = [("payments", "0009_merge_key_manager_and_request_id")]

    operations = [
        migrations.AddField(
            model_name="payment",
            name="acquirer",
            field=models.CharField(
                default="",
                help_text="The configured acquirer (ACQUIRERS name) that holds or may hold the "
                "payment.",
                max_length=32,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(name_the_default_acquirer, migrations.RunPython.noop, elidable=True),
    ]
