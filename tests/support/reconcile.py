"""One reconciliation of one payment or operation, now, as the connectors' tests run it: claimed
5 s ahead of the wall clock (past any grace and key lock the policy allows), checked with the
process's client of its acquirer, a fixed clock and random source."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from payments.acquirer.client import acquirer_client
from payments.reconciliation.operations import operation_claim, operation_reconcile
from payments.reconciliation.payments import (
    ReconciliationPolicy,
    ReconciliationResult,
    payment_reconcile,
    reconciliation_claim_payment,
)

__all__ = ["reconcile_operation", "reconcile_payment"]


def reconcile_payment(payment_id: str, policy: ReconciliationPolicy) -> ReconciliationResult:
    """Claim and reconcile the payment once; its result (AssertionError if not claimed)."""
    at = timezone.now() + timedelta(seconds=5)
    assert reconciliation_claim_payment(payment_id=payment_id, now=at, policy=policy)
    return payment_reconcile(
        payment_id=payment_id, client=acquirer_client(), policy=policy,
        clock=lambda: at, random=lambda: 0.5,
    ).result  # fmt: skip


def reconcile_operation(operation_id: str, policy: ReconciliationPolicy) -> ReconciliationResult:
    """Claim and reconcile the operation once; its result (AssertionError if not claimed)."""
    at = timezone.now() + timedelta(seconds=5)
    assert operation_claim(operation_id=operation_id, now=at, policy=policy)
    return operation_reconcile(
        operation_id=operation_id, client=acquirer_client(), policy=policy,
        clock=lambda: at, random=lambda: 0.5,
    ).result  # fmt: skip
