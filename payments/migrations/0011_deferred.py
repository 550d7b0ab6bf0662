# Deferred submission (payments/deferral.py, ADR 0024): the `deferred` status, the merchant's
# consent, and the schedule on the row (not_before, indexed for the deferred sweep).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('payments', '0010_acquirers'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='payment',
            name='payment_status_valid',
        ),
        migrations.AddField(
            model_name='payment',
            name='allow_deferred',
            field=models.BooleanField(default=False, help_text='The merchant allowed deferral: when no acquirer can take it now, it waits (deferred) instead of failing, and a retry with its key never sends it.'),
        ),
        migrations.AddField(
            model_name='payment',
            name='deferred_attempts',
            field=models.PositiveIntegerField(default=0, help_text='Submissions of a deferred payment that were certainly not applied.'),
        ),
        migrations.AddField(
            model_name='payment',
            name='not_before',
            field=models.DateTimeField(blank=True, help_text='A deferred payment is submitted at this time or later (null otherwise).', null=True),
        ),
        migrations.AlterField(
            model_name='payment',
            name='status',
            field=models.CharField(choices=[('processing', 'Processing'), ('deferred', 'Deferred'), ('succeeded', 'Succeeded'), ('declined', 'Declined'), ('failed', 'Failed'), ('needs_review', 'Needs review'), ('requires_capture', 'Requires capture'), ('capture_pending', 'Capture pending'), ('void_pending', 'Void pending'), ('canceled', 'Canceled')], default='processing', max_length=16),
        ),
        migrations.AddIndex(
            model_name='payment',
            index=models.Index(condition=models.Q(('status', 'deferred')), fields=['not_before'], name='payment_deferred_due'),
        ),
        migrations.AddConstraint(
            model_name='payment',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['processing', 'deferred', 'succeeded', 'declined', 'failed', 'needs_review', 'requires_capture', 'capture_pending', 'void_pending', 'canceled'])), name='payment_status_valid'),
        ),
    ]
