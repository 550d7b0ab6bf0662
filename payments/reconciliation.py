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
"""

from __future__ import annotations

import enum
import logging
import math
import random as random_module
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from gateway_client import (
    AcquirerClient,
    Authorization,
    GatewayError,
    PermanentError,
    RetryPolicy,
)
from idempotency.models import IdempotencyKey
from payments.acquirer.authorize import authorization_request
from payments.acquirer.client import acquirer_client, reconciliation_retry_policy
from payments.lifecycle import (
    UnexpectedStatus,
    payment_answer_store,
    payment_event_record,
    payment_lock,
    payment_lock_with_key,
    payment_transition,
)
from payments.models import Payment, PaymentEventType, PaymentStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconciliationPolicy:
    """When and how often reconciliation looks at a payment. Durations in seconds.

    ``grace``: how long after creation a payment the acquirer does not know is left alone before
    it is re-sent (look-ups lag). ``backoff_base``/``backoff_cap``: full-jitter backoff between
    failed checks, bound ``min(cap, base * 2**attempt)``. ``max_age``/``max_attempts``: then
    ``needs_review``. ``lease``: how long a claim owns a payment (above the longest check).
    ``batch_size``: payments per sweep claim. ``first_check_delay``: countdown of the task
    enqueued right after a 202. ``lock_timeout``: an idempotency key locked more recently than
    this belongs to a live request, which reconciliation leaves alone.
    """

    grace: float = 60.0
    backoff_base: float = 30.0
    backoff_cap: float = 1800.0
    max_age: float = 6 * 3600.0
    max_attempts: int = 40
    lease: float = 300.0
    batch_size: int = 5
    first_check_delay: float = 2.0
    lock_timeout: float = 60.0

    @classmethod
    def from_settings(cls) -> ReconciliationPolicy:
        """Build the policy from the ``RECONCILIATION_*`` settings."""
        return cls(
            grace=settings.RECONCILIATION_GRACE_SECONDS,
            backoff_base=settings.RECONCILIATION_BACKOFF_BASE_SECONDS,
            backoff_cap=settings.RECONCILIATION_BACKOFF_CAP_SECONDS,
            max_age=settings.RECONCILIATION_MAX_AGE_SECONDS,
            max_attempts=settings.RECONCILIATION_MAX_ATTEMPTS,
            lease=settings.RECONCILIATION_LEASE_SECONDS,
            batch_size=settings.RECONCILIATION_BATCH_SIZE,
            first_check_delay=settings.RECONCILIATION_FIRST_CHECK_SECONDS,
            lock_timeout=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS,
        )


def reconciliation_backoff_bound(attempt: int, *, base: float, cap: float) -> float:
    """The upper bound, in seconds, of the wait after failed check number ``attempt`` (0-based):
    ``min(cap, base * 2**attempt)``, computed without overflow for any ``attempt``."""
    if attempt < 0:
        raise ValueError("attempt must be >= 0")
    if base >= cap or attempt >= math.log2(cap / base) + 1:
        return cap
    return min(cap, base * 2.0**attempt)


def reconciliation_backoff(
    attempt: int, *, base: float, cap: float, random: Callable[[], float]
) -> float:
    """A full-jitter wait in seconds: ``uniform(0, bound)`` with ``random()`` in [0, 1)."""
    return random() * reconciliation_backoff_bound(attempt, base=base, cap=cap)


class ReconciliationResult(enum.Enum):
    """What one reconciliation of one payment did."""

    RESOLVED = "resolved"  #: the outcome is now recorded (succeeded, declined or failed).
    ALREADY_RESOLVED = "already_resolved"  #: nothing to do.
    NOT_CLAIMED = "not_claimed"  #: another worker holds it, or it is not due.
    IN_FLIGHT = "in_flight"  #: a live API request owns its key: checked later.
    WAITING = "waiting"  #: not found yet, within the grace period.
    RETRY_LATER = "retry_later"  #: the look-up or re-send failed: next check scheduled.
    NEEDS_REVIEW = "needs_review"  #: too old or too many attempts: handed to a human.


@dataclass(frozen=True)
class ReconciliationReport:
    """What reconciling one payment did, for logs, metrics, the command and tests."""

    payment_id: str
    result: ReconciliationResult
    detail: str = ""
    next_check_at: datetime | None = None


def _claimable(now: datetime) -> Q:
    return Q(status=PaymentStatus.PROCESSING) & (
        Q(reconciliation_lease_until__isnull=True) | Q(reconciliation_lease_until__lte=now)
    )


def reconciliation_claim_due(*, now: datetime, policy: ReconciliationPolicy) -> list[str]:
    """Claim up to ``policy.batch_size`` due payments (``next_check_at <= now``), oldest due
    first, skipping rows other workers hold; lease them and count the attempt. Returns ids."""
    with transaction.atomic():
        ids = list(
            Payment.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(_claimable(now), next_check_at__lte=now)
            .order_by("next_check_at")
            .values_list("id", flat=True)[: policy.batch_size]
        )
        Payment.objects.filter(id__in=ids).update(
            reconciliation_lease_until=now + timedelta(seconds=policy.lease),
            reconciliation_attempts=F("reconciliation_attempts") + 1,
        )
    return ids


def reconciliation_claim_payment(
    *, payment_id: str, now: datetime, policy: ReconciliationPolicy, include_review: bool = False
) -> bool:
    """Claim one payment whatever its ``next_check_at`` (the task enqueued after a 202, the
    command, an operator). False when it is resolved, unknown, or held by another worker.
    ``include_review`` also claims a ``needs_review`` payment (an operator asked)."""
    claimable = _claimable(now)
    if include_review:
        claimable = Q(status__in=[PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW]) & (
            Q(reconciliation_lease_until__isnull=True) | Q(reconciliation_lease_until__lte=now)
        )
    with transaction.atomic():
        claimed = (
            Payment.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(claimable, id=payment_id)
            .exists()
        )
        if claimed:
            Payment.objects.filter(id=payment_id).update(
                reconciliation_lease_until=now + timedelta(seconds=policy.lease),
                reconciliation_attempts=F("reconciliation_attempts") + 1,
            )
    return claimed


#: The statuses a found authorization may resolve. ``reconciled`` events store how many the
#: acquirer had as ``authorizations_found`` (events before the rename say ``charges_found``;
#: both are shown as stored, in the admin's event timeline).
UNRESOLVED = (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW)


def _record_authorization(
    payment_id: str,
    authorization: Authorization,
    *,
    how: str,
    authorizations_found: int,
    now: datetime,
) -> ReconciliationReport:
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


def acquirer_not_before(error: GatewayError, now: datetime) -> datetime | None:
    """The instant the acquirer (or the rate gate, or the breaker) said not to call before."""
    not_before = getattr(error, "not_before", None)
    if isinstance(not_before, datetime):
        return not_before
    retry_after = getattr(error, "retry_after", None)
    if isinstance(retry_after, (int, float)) and retry_after > 0:
        return now + timedelta(seconds=retry_after)
    return None


def _reschedule(
    payment: Payment,
    *,
    now: datetime,
    policy: ReconciliationPolicy,
    random: Callable[[], float],
    result: ReconciliationResult,
    detail: str,
    not_before: datetime | None = None,
    error: GatewayError | None = None,
) -> ReconciliationReport:
    wait = reconciliation_backoff(
        max(payment.reconciliation_attempts - 1, 0),
        base=policy.backoff_base,
        cap=policy.backoff_cap,
        random=random,
    )
    next_check_at = now + timedelta(seconds=wait)
    if not_before is not None and not_before > next_check_at:
        next_check_at = not_before
    try:
        with transaction.atomic():
            locked = payment_lock(payment.pk, expect=[PaymentStatus.PROCESSING])
            locked.next_check_at = next_check_at
            locked.reconciliation_lease_until = None
            locked.save(update_fields=["next_check_at", "reconciliation_lease_until"])
            data = {
                "result": result.value,
                "detail": detail,
                "attempt": locked.reconciliation_attempts,
                "next_check_in_seconds": round((next_check_at - now).total_seconds(), 3),
            }
            if error is not None:
                data |= {"error": type(error).__name__, "status_code": error.status_code}
            payment_event_record(
                payment=locked,
                event_type=PaymentEventType.RECONCILIATION_ATTEMPT,
                now=now,
                data=data,
            )
    except UnexpectedStatus as exc:
        return ReconciliationReport(payment.pk, ReconciliationResult.ALREADY_RESOLVED, exc.status)
    return ReconciliationReport(payment.pk, result, detail, next_check_at)


def _escalate(payment: Payment, *, now: datetime, reason: str) -> ReconciliationReport:
    try:
        with transaction.atomic():
            locked, key = payment_lock_with_key(payment.pk, expect=[PaymentStatus.PROCESSING])
            payment_transition(
                payment=locked,
                to_status=PaymentStatus.NEEDS_REVIEW,
                event_type=PaymentEventType.NEEDS_REVIEW,
                now=now,
                data={"reason": reason, "attempts": locked.reconciliation_attempts},
                next_check_at=None,
                reconciliation_lease_until=None,
            )
            payment_answer_store(locked, key=key, now=now)
    except UnexpectedStatus as exc:
        return ReconciliationReport(payment.pk, ReconciliationResult.ALREADY_RESOLVED, exc.status)
    logger.warning("payment %s needs review: %s", payment.pk, reason)
    return ReconciliationReport(payment.pk, ReconciliationResult.NEEDS_REVIEW, reason)


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
    retries).
    """
    if connection.in_atomic_block:
        raise RuntimeError("Reconciliation calls the acquirer: never inside a transaction.")
    try:
        return _reconcile(payment_id, client, policy, acquirer_policy, clock, random)
    except Exception:
        # An unexpected error (a bug, a lost database): free the payment for the next sweep
        # now rather than when the lease runs out; its next_check_at is unchanged.
        Payment.objects.filter(pk=payment_id).update(reconciliation_lease_until=None)
        raise


def _reconcile(
    payment_id: str,
    client: AcquirerClient,
    policy: ReconciliationPolicy,
    acquirer_policy: RetryPolicy | None,
    clock: Callable[[], datetime],
    random: Callable[[], float],
) -> ReconciliationReport:
    now = clock()
    payment = Payment.objects.select_related("idempotency_key").get(pk=payment_id)
    if payment.status == PaymentStatus.NEEDS_REVIEW:
        return _look_up_for_review(payment, client=client, acquirer_policy=acquirer_policy, now=now)
    if payment.status != PaymentStatus.PROCESSING:
        return ReconciliationReport(
            payment_id, ReconciliationResult.ALREADY_RESOLVED, payment.status
        )

    key = payment.idempotency_key
    if (
        key is not None
        and key.status == IdempotencyKey.Status.IN_PROGRESS
        and key.locked_at is not None
        and key.locked_at > now - timedelta(seconds=policy.lock_timeout)
    ):
        return _reschedule(
            payment, now=now, policy=policy, random=random, result=ReconciliationResult.IN_FLIGHT,
            detail="a request holds the idempotency key",
            not_before=key.locked_at + timedelta(seconds=policy.lock_timeout),
        )  # fmt: skip

    age = (now - payment.created_at).total_seconds()
    if age >= policy.max_age:
        give_up = f"unresolved after {age:.0f} s (the maximum age)"
    elif payment.reconciliation_attempts > policy.max_attempts:
        give_up = f"unresolved after {policy.max_attempts} reconciliation attempts"
    else:
        give_up = ""

    try:
        authorizations = client.lookup(payment.id, policy=acquirer_policy)
    except GatewayError as exc:
        if give_up:
            return _escalate(payment, now=now, reason=f"{give_up}; the last look-up failed")
        return _reschedule(
            payment, now=now, policy=policy, random=random, result=ReconciliationResult.RETRY_LATER,
            detail="look-up failed", not_before=acquirer_not_before(exc, now), error=exc,
        )  # fmt: skip
    if authorizations:
        return _record_authorization(
            payment.pk,
            authorizations[0],
            how="lookup",
            authorizations_found=len(authorizations),
            now=clock(),
        )
    if give_up:  # never re-send this late: the acquirer may have forgotten the key
        return _escalate(payment, now=now, reason=f"{give_up}; the acquirer has no record of it")
    if age < policy.grace:
        return _reschedule(
            payment, now=now, policy=policy, random=random, result=ReconciliationResult.WAITING,
            detail="not found yet; within the grace period",
            not_before=payment.created_at + timedelta(seconds=policy.grace),
        )  # fmt: skip

    try:
        authorization = client.authorize(authorization_request(payment), policy=acquirer_policy)
    except PermanentError as exc:
        return _record_rejection(payment.pk, exc, clock())
    except GatewayError as exc:
        return _reschedule(
            payment, now=now, policy=policy, random=random, result=ReconciliationResult.RETRY_LATER,
            detail="re-send failed", not_before=acquirer_not_before(exc, now), error=exc,
        )  # fmt: skip
    return _record_authorization(
        payment.pk, authorization, how="resend", authorizations_found=1, now=clock()
    )


def _look_up_for_review(
    payment: Payment, *, client: AcquirerClient, acquirer_policy: RetryPolicy | None, now: datetime
) -> ReconciliationReport:
    """An operator asked to reconcile a ``needs_review`` payment: look it up, never re-send (the
    acquirer may have forgotten the key by now). Found: resolved. Otherwise it stays for review,
    with an event saying what the look-up found."""
    try:
        authorizations = client.lookup(payment.id, policy=acquirer_policy)
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
    nothing. ``client``, ``policy`` and ``acquirer_policy`` default to the ones the settings
    describe (:func:`~payments.acquirer.client.acquirer_client`,
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
    ids = reconciliation_claim_due(now=clock(), policy=policy)
    return [
        payment_reconcile(
            payment_id=pid,
            client=client,
            policy=policy,
            acquirer_policy=acquirer_policy,
            clock=clock,
            random=random,
        )
        for pid in ids
    ]
