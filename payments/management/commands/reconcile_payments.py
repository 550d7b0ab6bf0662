"""``python manage.py reconcile_payments [--payment ID] [--dry-run]``.

Runs the same reconciliation code as the Celery tasks, by hand, and prints what it did. With
``--dry-run`` it only looks processing payments up at the acquirer (the one given, or the 50
whose check comes first, due or not) and prints what it found and when each is due: no claim,
no write, no re-send.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db.models import F
from django.utils import timezone

from gateway_client import GatewayError
from observability.request_context import current_request_id
from payments.acquirer.client import acquirer_client, reconciliation_retry_policy
from payments.models import Payment, PaymentStatus
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    ReconciliationResult,
    reconciliation_run,
    reconciliation_sweep,
)

#: Processing payments a dry run looks up at most (those whose check comes first).
DRY_RUN_LIMIT = 50


class Command(BaseCommand):
    help = "Reconcile processing payments now (one, or one batch of the due ones)."

    def add_arguments(self, parser):
        parser.add_argument("--payment", metavar="ID", help="Reconcile this payment, due or not.")
        parser.add_argument(
            "--dry-run", action="store_true", help="Only look up and print; change nothing."
        )

    def handle(self, *args, payment: str | None, dry_run: bool, **options):
        policy = ReconciliationPolicy.from_settings()
        client = acquirer_client()
        retries = reconciliation_retry_policy()
        if dry_run:
            return self._dry_run(payment, client)
        if payment:
            report = reconciliation_run(
                payment, client=client, policy=policy, acquirer_policy=retries
            )
            if report.result is ReconciliationResult.NOT_CLAIMED:
                raise CommandError(
                    f"{payment} is not processing, does not exist, or is held by a worker."
                )
            results = [report]
        else:
            results = reconciliation_sweep(client=client, policy=policy, acquirer_policy=retries)
        for result in results:
            when = (
                f" next check {result.next_check_at:%Y-%m-%dT%H:%M:%SZ}"
                if result.next_check_at
                else ""
            )
            self.stdout.write(
                f"{result.payment_id}: {result.result.value} {result.detail}{when}".rstrip()
            )
        self.stdout.write(f"{len(results)} payment(s) reconciled.")

    def _dry_run(self, payment_id: str | None, client) -> None:
        """Look up the processing payments (one, or the 50 whose check comes first, due or
        not) and print what the acquirer has and when each is due; change nothing."""
        now = timezone.now()
        payments = Payment.objects.filter(status=PaymentStatus.PROCESSING)
        if payment_id:
            payments = payments.filter(id=payment_id)
        else:
            payments = payments.order_by(F("next_check_at").asc(nulls_first=True), "id")[
                :DRY_RUN_LIMIT
            ]
        count = due = 0
        for payment in payments:
            count += 1
            if payment.next_check_at is None or payment.next_check_at <= now:
                due += 1
                when = "due now"
            else:
                when = f"next check in {(payment.next_check_at - now).total_seconds():.0f} s"
            try:
                authorizations = client.lookup(
                    payment.id,
                    policy=reconciliation_retry_policy(),
                    request_id=current_request_id(),
                )
            except GatewayError as exc:
                found = f"look-up failed ({type(exc).__name__})"
            else:
                found = (
                    ", ".join(
                        f"{c.acquirer_reference} {'approved' if c.approved else 'declined'}"
                        for c in authorizations
                    )
                    or "not found"
                )
            self.stdout.write(
                f"{payment.id}: processing, {when}, {payment.reconciliation_attempts} "
                f"attempt(s); acquirer: {found}"
            )
        self.stdout.write(
            f"{count} processing payment(s) examined, {due} due now (dry run: nothing changed)."
        )
