"""Reconciliation: resolving payments whose outcome at the acquirer is unknown.

A payment stays ``processing`` when the acquirer may have applied it but we do not know (a read
timeout, a 5xx, a reset after sending), or when the request died between phase 1 and phase 2.
Reconciliation resolves each such payment exactly once and never authorizes twice:

1. **Claim** (:func:`reconciliation_claim_due`, :func:`reconciliation_claim_payment`): in one
   short transaction, ``SELECT ... FOR UPDATE SKIP LOCKED`` the due payments, record a lease and
   count the attempt; commit. Two sweeps at once take disjoint payments; a killed worker's lease
   runs out and the payment is taken again, its attempt counter bounding the loop.
2. **Ask the acquirer** outside any transaction: look the payment up by our reference (the
   payment id). Found: record the outcome. Not found after a grace period (the acquirer's
   look-up can lag): re-send ``POST /charges`` with the payment's acquirer idempotency key, which
   the acquirer answers from its record if it has one, so a re-send never authorizes twice.
3. **Record** in one short transaction: the transition (only from ``processing``), its event,
   and the refreshed answer that a replay of the merchant's idempotency key returns.

A failing look-up or re-send schedules the next check with full-jitter backoff (bound 30 s
doubling per attempt, capped at 30 min), never before the acquirer's ``Retry-After`` (or a rate
gate's or breaker's "not before"). After a maximum age (6 h, well below the acquirer's key
retention: a re-send after the acquirer forgot the key could charge twice) or a maximum number
of attempts, the payment goes to ``needs_review`` for a human: logged, counted, never dropped.

The gateway client is the only layer that retries a single call; nothing here retries around
it, and Celery tasks never autoretry.

The claim, lease, backoff, reschedule, escalation and the order of the steps are the schedule
shared with operations (``payments.reconciliation.schedule``); this module says what is the
authorization's (:class:`PaymentReconciliation`): what to look up, what to re-send, what a
found authorization means, and the operators' look-up of a ``needs_review`` payment.
"""

from __future__ import annotations

import logging
import random as random_module
from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from gateway_client import (
    AcquirerClient,
    ActionRequired,
    Authorization,
    GatewayError,
    LookupUnsupported,
    PermanentError,
    RetryPolicy,
)
from observability.request_context import current_request_id
from payments.acquirer.authorize import authorization_request
from payments.acquirer.client import acquirer_client, reconciliation_retry_policy
from payments.core.payment_states import (
    UnexpectedStatus,
    payment_answer_store,
    payment_event_record,
    payment_lock,
    payment_lock_with_key,
    payment_transition,
)
from payments.models import Payment, PaymentEventType, PaymentStatus
from payments.reconciliation.actions import action_required_record
from payments.reconciliation.schedule import (
    AlreadyResolved,
    Check,
    Reconciliation,
    ReconciliationPolicy,
    ReconciliationReport,
    ReconciliationResult,
    acquirer_not_before,
    reconciliation_backoff,
    reconciliation_backoff_bound,
)

__all__ = [
    "UNRESOLVED",
    "PaymentReconciliation",
    "ReconciliationPolicy",
    "ReconciliationReport",
    "ReconciliationResult",
    "acquirer_not_before",
    "payment_reconcile",
    "reconciliation_backoff",
    "reconciliation_backoff_bound",
    "reconciliation_claim_due",
    "reconciliation_claim_payment",
    "reconciliation_run",
    "reconciliation_sweep",
]

logger = logging.getLogger(__name__)

#: The statuses a found authorization may resolve. ``reconciled`` events store how many the
#: acquirer had as ``authorizations_found`` (events before the rename say ``charges_found``;
#: both are shown as stored, in the admin's event timeline).
UNRESOLVED = (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW)


class PaymentReconciliation(Reconciliation[Payment]):
    """The reconciliation of ``processing`` payments (their authorization): looked up by the
    payment id, re-sent as ``POST /charges`` with the payment's acquirer idempotency key, and
    resolved by the authorization found. The schedule is :class:`Reconciliation`'s."""

    model = Payment
    pending_status = PaymentStatus.PROCESSING
    attempt_event = PaymentEventType.RECONCILIATION_ATTEMPT
    noun = "payment"
    logger = logger

    def load(self, pk: str) -> Payment:
        return Payment.objects.select_related("idempotency_key").get(pk=pk)

    def before_check(self, row: Payment, check: Check) -> ReconciliationReport | None:
        if row.status == PaymentStatus.NEEDS_REVIEW:
            return _look_up_for_review(
                row, client=check.client, acquirer_policy=check.acquirer_policy, now=check.now
            )
        if row.status != PaymentStatus.PROCESSING:
            return ReconciliationReport(row.pk, ReconciliationResult.ALREADY_RESOLVED, row.status)
        return None

    def look_up(self, row: Payment, check: Check) -> ReconciliationReport | None:
        if not check.client.dialect.supports_lookup:
            return None  # no look-up by our reference (Adyen): a same-key re-send instead
        authorizations = check.client.lookup(
            row.id, policy=check.acquirer_policy, request_id=current_request_id()
        )
        if not authorizations:
            return None
        return _record_authorization(
            row.pk,
            authorizations[0],
            how="lookup",
            authorizations_found=len(authorizations),
            now=check.clock(),
        )

    def resend(self, row: Payment, check: Check) -> ReconciliationReport:
        try:
            authorization = check.client.authorize(
                authorization_request(row),
                policy=check.acquirer_policy,
                request_id=current_request_id(),
            )
        except PermanentError as exc:
            return _record_rejection(row.pk, exc, check.clock())
        except GatewayError as exc:
            return self.reschedule(
                row,
                check,
                result=ReconciliationResult.RETRY_LATER,
                detail="re-send failed",
                not_before=acquirer_not_before(exc, check.now),
                error=exc,
            )
        return _record_authorization(
            row.pk, authorization, how="resend", authorizations_found=1, now=check.clock()
        )

    def lock_pending(self, pk: str) -> tuple[Payment, Payment]:
        try:
            payment = payment_lock(pk, expect=[PaymentStatus.PROCESSING])
        except UnexpectedStatus as exc:
            raise AlreadyResolved(exc.status) from exc
        return payment, payment

    def escalate_locked(self, pk: str, *, now: datetime, reason: str) -> None:
        try:
            payment, key = payment_lock_with_key(pk, expect=[PaymentStatus.PROCESSING])
        except UnexpectedStatus as exc:
            raise AlreadyResolved(exc.status) from exc
        payment_transition(
            payment=payment,
            to_status=PaymentStatus.NEEDS_REVIEW,
            event_type=PaymentEventType.NEEDS_REVIEW,
            now=now,
            data={"reason": reason, "attempts": payment.reconciliation_attempts},
            next_check_at=None,
            reconciliation_lease_until=None,
        )
        payment_answer_store(payment, key=key, now=now)


PAYMENTS = PaymentReconciliation()


def reconciliation_claim_due(*, now: datetime, policy: ReconciliationPolicy) -> list[str]:
    """Claim up to ``policy.batch_size`` due payments (``next_check_at <= now``), oldest due
    first, skipping rows other workers hold; lease them and count the attempt. Returns ids."""
    return PAYMENTS.claim_due(now=now, policy=policy)


def reconciliation_claim_payment(
    *, payment_id: str, now: datetime, policy: ReconciliationPolicy, include_review: bool = False
) -> bool:
    """Claim one payment whatever its ``next_check_at`` (the task enqueued after a 202, the
    command, an operator). False when it is resolved, unknown, or held by another worker.
    ``include_review`` also claims a ``needs_review`` payment (an operator asked)."""
    return PAYMENTS.claim(
        payment_id, now=now, policy=policy, statuses=UNRESOLVED if include_review else None
    )


def _record_authorization(
    payment_id: str,
    authorization: Authorization | ActionRequired,
    *,
    how: str,
    authorizations_found: int,
    now: datetime,
) -> ReconciliationReport:
    if isinstance(authorization, ActionRequired):
        # Held for the shopper (3-D Secure): requires_action, ended by the shopper's return,
        # a notification or the expiry sweep (payments.reconciliation.actions).
        status = action_required_record(payment_id, authorization, how=how, now=now)
        if status is None:
            current = Payment.objects.values_list("status", flat=True).get(pk=payment_id)
            return ReconciliationReport(payment_id, ReconciliationResult.ALREADY_RESOLVED, current)
        return ReconciliationReport(payment_id, ReconciliationResult.RESOLVED, status)
    to_status = PaymentStatus.SUCCEEDED if authorization.approved else PaymentStatus.DECLINED
    changes = {
        "acquirer_reference": authorization.acquirer_reference,
        "next_check_at": None,
        "reconciliation_lease_until": None,
    }
    if not authorization.approved:
        changes["decline_code"] = authorization.decline_code
    try:
        with transaction.atomic():
            payment, key = payment_lock_with_key(payment_id, expect=UNRESOLVED)
            payment_transition(
                payment=payment,
                to_status=to_status,
                event_type=PaymentEventType.RECONCILED,
                now=now,
                data={
                    "how": how,
                    "authorizations_found": authorizations_found,
                    "attempt": payment.reconciliation_attempts,
                },
                **changes,
            )
            payment_answer_store(payment, key=key, now=now)
    except UnexpectedStatus as exc:
        return ReconciliationReport(payment_id, ReconciliationResult.ALREADY_RESOLVED, exc.status)
    if authorizations_found > 1:
        logger.error(
            "payment %s has %d authorizations at the acquirer", payment_id, authorizations_found
        )
    logger.info("payment %s reconciled to %s by %s", payment_id, to_status, how)
    return ReconciliationReport(payment_id, ReconciliationResult.RESOLVED, to_status)


def _record_rejection(payment_id: str, error: GatewayError, now: datetime) -> ReconciliationReport:
    try:
        with transaction.atomic():
            payment, key = payment_lock_with_key(payment_id, expect=[PaymentStatus.PROCESSING])
            payment_transition(
                payment=payment,
                to_status=PaymentStatus.FAILED,
                event_type=PaymentEventType.RECONCILED,
                now=now,
                data={
                    "how": "resend_rejected",
                    "error": type(error).__name__,
                    "status_code": error.status_code,
                },
                failure_code="acquirer_rejected",
                next_check_at=None,
                reconciliation_lease_until=None,
            )
            payment_answer_store(payment, key=key, now=now)
    except UnexpectedStatus as exc:
        return ReconciliationReport(payment_id, ReconciliationResult.ALREADY_RESOLVED, exc.status)
    return ReconciliationReport(payment_id, ReconciliationResult.RESOLVED, PaymentStatus.FAILED)


def payment_reconcile(
    *,
    payment_id: str,
    client: AcquirerClient,
    policy: ReconciliationPolicy,
    acquirer_policy: RetryPolicy | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> ReconciliationReport:
    """Resolve one claimed payment (the caller holds its lease). Outside any transaction.

    Returns a :class:`ReconciliationReport`. Never raises for an acquirer failure: those
    schedule the next check. Re-sends only with the payment's own acquirer idempotency key.
    Each call to the acquirer runs under ``acquirer_policy`` (the client's retries are the only
    retries). An unexpected error frees the payment's lease (its ``next_check_at`` unchanged)
    and propagates.
    """
    return PAYMENTS.reconcile(
        payment_id,
        client=client,
        policy=policy,
        acquirer_policy=acquirer_policy,
        clock=clock,
        random=random,
    )


def _look_up_for_review(
    payment: Payment, *, client: AcquirerClient, acquirer_policy: RetryPolicy | None, now: datetime
) -> ReconciliationReport:
    """An operator asked to reconcile a ``needs_review`` payment: look it up, never re-send (the
    acquirer may have forgotten the key by now). Found: resolved. Otherwise it stays for review,
    with an event saying what the look-up found."""
    try:
        authorizations = client.lookup(
            payment.id, policy=acquirer_policy, request_id=current_request_id()
        )
    except LookupUnsupported:
        detail, error = "the acquirer has no look-up by our reference", None
    except GatewayError as exc:
        detail, error = "look-up failed", exc
    else:
        if authorizations:
            return _record_authorization(
                payment.pk,
                authorizations[0],
                how="lookup_after_review",
                authorizations_found=len(authorizations),
                now=now,
            )
        detail, error = "the acquirer has no record of it", None
    with transaction.atomic():
        locked = payment_lock(payment.pk)
        locked.reconciliation_lease_until = None
        locked.save(update_fields=["reconciliation_lease_until"])
        data = {
            "result": ReconciliationResult.NEEDS_REVIEW.value,
            "detail": detail,
            "operator_requested": True,
        }
        if error is not None:
            data |= {"error": type(error).__name__, "status_code": error.status_code}
        payment_event_record(
            payment=locked, event_type=PaymentEventType.RECONCILIATION_ATTEMPT, now=now, data=data
        )
    return ReconciliationReport(payment.pk, ReconciliationResult.NEEDS_REVIEW, detail)


def reconciliation_run(
    payment_id: str,
    *,
    include_review: bool = False,
    client: AcquirerClient | None = None,
    policy: ReconciliationPolicy | None = None,
    acquirer_policy: RetryPolicy | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> ReconciliationReport:
    """Claim one payment whatever its ``next_check_at`` and reconcile it (the task enqueued
    after a 202 or by an operator, and ``manage.py reconcile_payments --payment``).

    ``include_review`` also takes a ``needs_review`` payment (an operator asked: a look-up
    only). Returns a report with :attr:`ReconciliationResult.NOT_CLAIMED` when the payment is
    resolved, unknown or held by another worker, so a duplicate or redelivered message does
    nothing. The payment is looked up and re-sent at its own acquirer (``Payment.acquirer``;
    ``client`` is used when it is that acquirer's). ``client``, ``policy`` and
    ``acquirer_policy`` default to the ones the settings describe
    (:func:`~payments.acquirer.client.acquirer_client`,
    :meth:`ReconciliationPolicy.from_settings`, the reconciliation retry policy).
    """
    policy = policy or ReconciliationPolicy.from_settings()
    if not reconciliation_claim_payment(
        payment_id=payment_id, now=clock(), policy=policy, include_review=include_review
    ):
        return ReconciliationReport(payment_id, ReconciliationResult.NOT_CLAIMED)
    return payment_reconcile(
        payment_id=payment_id,
        client=client or acquirer_client(),
        policy=policy,
        acquirer_policy=acquirer_policy or reconciliation_retry_policy(),
        clock=clock,
        random=random,
    )


def reconciliation_sweep(
    *,
    client: AcquirerClient,
    policy: ReconciliationPolicy,
    acquirer_policy: RetryPolicy | None = None,
    clock: Callable[[], datetime] = timezone.now,
    random: Callable[[], float] = random_module.random,
) -> list[ReconciliationReport]:
    """Claim one batch of due payments and reconcile each; return what happened to each."""
    return PAYMENTS.sweep(
        client=client, policy=policy, acquirer_policy=acquirer_policy, clock=clock, random=random
    )
