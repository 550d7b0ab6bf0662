"""``python manage.py submit_deferred_payments``: one deferred sweep by hand.

The same code as beat's task (``payments.authorization.deferred_sweep.deferred_sweep``): expires
the deferred
payments past ``DEFERRED_MAX_AGE_SECONDS`` and submits up to ``DEFERRED_BATCH_SIZE`` due ones,
stopping when the breaker or the rate gate refuses; prints what it did.
"""

from django.core.management.base import BaseCommand

from payments.authorization.deferral import DeferralPolicy
from payments.authorization.deferred_sweep import deferred_sweep


class Command(BaseCommand):
    help = "Submit the due deferred payments now (one sweep), at the acquirer's pace."

    def handle(self, *args, **options):
        report = deferred_sweep(policy=DeferralPolicy.from_settings())
        self.stdout.write(
            f"submitted {len(report.submitted)}, deferred again {len(report.deferred_again)}, "
            f"expired {len(report.expired)}, stopped: {report.stopped or '-'}"
        )
