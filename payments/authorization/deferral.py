"""The ``deferred`` state's transactions and schedule (ADR 0024).

A payment whose merchant sent ``"allow_deferred": true`` and that no acquirer could take now
(the ``authorize`` breaker open before anything was sent, or a first attempt certainly not
applied: gate closed beyond the deadline, budget empty, refused connection, ``503``/``429``)
is ``deferred``: **not sent anywhere yet** (unlike ``processing``, where an acquirer may have
it). Its schedule lives on its row in PostgreSQL, like reconciliation's: ``not_before`` (the
partial index ``payment_deferred_due``), ``deferred_attempts``, and the creation time that
bounds it (:attr:`DeferralPolicy.max_age`).

* :func:`payment_defer`: ``processing -> deferred`` (or ``-> failed acquirer_unavailable`` past
  the maximum age), with the next ``not_before``, and the answer a replay of the merchant's key
  returns (``202`` with the payment ``deferred``).
* :func:`deferred_take`: the submission's phase 1, one short transaction: claim the most
  overdue deferred payment (``FOR UPDATE SKIP LOCKED``), move it ``deferred -> processing`` with
  a ``next_check_at`` (if the worker dies before recording the outcome, reconciliation resolves
  it at the acquirer), and store the ``202 processing`` answer; commit.
* :func:`deferred_expire_due`: ``deferred -> failed`` for the payments past the maximum age,
  whatever the acquirer's state (an open breaker never holds an expiry back).

The sweep that submits them is ``payments.authorization.deferred_sweep``. Nothing here calls the
acquirer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from payments.core.answers import Answered
from payments.core.attempts import AcquirerAttempt
from payments.core.payment_states import (
    payment_answer_store,
    payment_event_record,
    payment_lock_with_key,
    payment_transition,
)
from payments.models import Payment, PaymentEventType, PaymentStatus
from payments.reconciliation.schedule import reconciliation_backoff

__all__ = [
    "DEFERRED_FAILURE_CODE",
    "DeferralPolicy",
    "Taken",
    "deferral_not_before",
    "deferred_expire_due",
    "deferred_take",
    "payment_defer",
]

#: The failure code of a deferred payment that was never sent within the maximum age.
DEFERRED_FAILURE_CODE = "acquirer_unavailable"


@dataclass(frozen=True)
class DeferralPolicy:
    """When deferred payments are submitted. Durations in seconds.

    ``max_age``: after this long since creation, a payment still deferred fails
    ``acquirer_unavailable``. ``backoff_base``/``backoff_cap``: the full-jitter wait before the
    next submission after deferral number ``n`` (0-based), ``uniform(0, min(cap, base * 2**n))``,
    never before the acquirer's (or the breaker's, or the gate's) own wait. ``batch_size``: at
    most this many submissions per sweep. ``submit_rate``: fleet-wide submissions per second
    (0: none of our own). ``check_after``: the ``next_check_at`` a submission takes, so
    reconciliation looks at it only if its worker died (above the client's deadline).
    """

    max_age: float = 4 * 3600.0
    backoff_base: float = 30.0
    backoff_cap: float = 900.0
    batch_size: int = 20
    submit_rate: int = 5
    check_after: float = 60.0

    @classmethod
    def from_settings(cls) -> DeferralPolicy:
        """Build the policy from the ``DEFERRED_*`` settings (``check_after``: the idempotency
        key's lock timeout, as phase 1 of the create flow uses)."""
        return cls(
            max_age=settings.DEFERRED_MAX_AGE_SECONDS,
            backoff_base=settings.DEFERRED_BACKOFF_BASE_SECONDS,
            backoff_cap=settings.DEFERRED_BACKOFF_CAP_SECONDS,
            batch_size=settings.DEFERRED_BATCH_SIZE,
            submit_rate=settings.DEFERRED_SUBMIT_RATE_PER_SECOND,
            check_after=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS,
        )

    def expires_at(self, payment: Payment) -> datetime:
        """The instant ``payment`` fails if it is still deferred: creation + ``max_age``."""
        return payment.created_at + timedelta(seconds=self.max_age)


def deferral_not_before(
    *,
    now: datetime,
    deferrals: int,
    wait: float | None,
    expires_at: datetime,
    policy: DeferralPolicy,
    random: Callable[[], float],
) -> datetime:
    """The next submission time after ``deferrals`` earlier deferrals: ``now`` + a full-jitter
    backoff (``random()`` in [0, 1)), at least ``now + wait`` (seconds: the breaker's, gate's or
    acquirer's own wait, None when unknown), at most ``expires_at`` (the sweep then expires it
    on time)."""
    jitter = reconciliation_backoff(
        deferrals, base=policy.backoff_base, cap=policy.backoff_cap, random=random
    )
    not_before = now + timedelta(seconds=max(jitter, wait or 0.0))
    return min(not_before, expires_at)


def payment_defer(
    payment_id: str,
    *,
    attempt: AcquirerAttempt | None,
    reason: str,
    wait: float | None,
    now: datetime,
    policy: DeferralPolicy,
    random: Callable[[], float],
) -> Answered:
    """Defer the ``processing`` payment ``payment_id`` whose submission was certainly not
    applied (``attempt``, recorded as its ``acquirer_attempt`` event; None when nothing was
    sent at all) in one transaction under the payment's and its key's locks.

    ``reason``: why (``circuit_open``, ``not_sent``, ...), in the ``payment_deferred`` event.
    ``wait``: seconds the acquirer, gate or breaker asked for (a floor of ``not_before``).
    Past ``policy.max_age`` the payment fails ``acquirer_unavailable`` instead. A payment no
    longer ``processing``, or one a reconciliation worker holds (it may be re-sending it), is
    left as it is. The answer for the merchant's key is stored either way; returns it.
    """
    with transaction.atomic():
        payment, key = payment_lock_with_key(payment_id)
        if attempt is not None:
            payment_event_record(
                payment=payment,
                event_type=PaymentEventType.ACQUIRER_ATTEMPT,
                now=now,
                data=attempt.as_event_data(),
            )
        leased = (
            payment.reconciliation_lease_until is not None
            and payment.reconciliation_lease_until > now
        )
        if payment.status == PaymentStatus.PROCESSING and not leased:
            expires_at = policy.expires_at(payment)
            if now >= expires_at:
                payment_transition(
                    payment=payment,
                    to_status=PaymentStatus.FAILED,
                    event_type=PaymentEventType.AUTHORIZATION_NOT_SENT,
                    now=now,
                    data={"reason": reason, "deferred_attempts": payment.deferred_attempts},
                    failure_code=DEFERRED_FAILURE_CODE,
                    next_check_at=None,
                    not_before=None,
                )
            else:
                not_before = deferral_not_before(
                    now=now,
                    deferrals=payment.deferred_attempts,
                    wait=wait,
                    expires_at=expires_at,
                    policy=policy,
                    random=random,
                )
                payment_transition(
                    payment=payment,
                    to_status=PaymentStatus.DEFERRED,
                    event_type=PaymentEventType.PAYMENT_DEFERRED,
                    now=now,
                    data={
                        "reason": reason,
                        "not_before": not_before.isoformat(),
                        "deferral": payment.deferred_attempts + 1,
                    },
                    not_before=not_before,
                    deferred_attempts=payment.deferred_attempts + 1,
                    next_check_at=None,
                )
        response = payment_answer_store(payment, key=key, now=now)
    return Answered(payment=payment, response=response)


@dataclass(frozen=True)
class Taken:
    """What :func:`deferred_take` claimed: the ``payment``, now ``processing`` (to submit), or
    ``failed`` when it had passed the maximum age (``expired``: nothing to send)."""

    payment: Payment
    expired: bool


def _due(now: datetime):
    return Payment.objects.select_for_update(skip_locked=True, no_key=True).filter(
        status=PaymentStatus.DEFERRED, not_before__lte=now
    )


def _expire_locked(pk: str, *, now: datetime) -> Payment:
    """Inside a transaction: ``deferred -> failed acquirer_unavailable``, the answer stored."""
    payment, key = payment_lock_with_key(pk, expect=[PaymentStatus.DEFERRED])
    payment_transition(
        payment=payment,
        to_status=PaymentStatus.FAILED,
        event_type=PaymentEventType.DEFERRED_EXPIRED,
        now=now,
        data={"deferred_attempts": payment.deferred_attempts},
        failure_code=DEFERRED_FAILURE_CODE,
        not_before=None,
    )
    payment_answer_store(payment, key=key, now=now)
    return payment


def deferred_take(*, now: datetime, policy: DeferralPolicy) -> Taken | None:
    """Claim the most overdue deferred payment (``not_before <= now``), skipping rows other
    sweeps hold, and commit it ``processing`` (``deferred_submitted`` event, ``not_before``
    cleared, ``next_check_at = now + policy.check_after``, the ``202`` answer stored for its
    key); or ``failed`` when past ``policy.max_age``. None when nothing is due. One short
    transaction: the caller submits it afterwards, outside any transaction."""
    with transaction.atomic():
        claimed = _due(now).order_by("not_before").values_list("pk", flat=True).first()
        if claimed is None:
            return None
        payment, key = payment_lock_with_key(claimed, expect=[PaymentStatus.DEFERRED])
        if now >= policy.expires_at(payment):
            return Taken(_expire_locked(claimed, now=now), expired=True)
        payment_transition(
            payment=payment,
            to_status=PaymentStatus.PROCESSING,
            event_type=PaymentEventType.DEFERRED_SUBMITTED,
            now=now,
            data={"submission": payment.deferred_attempts + 1},
            not_before=None,
            next_check_at=now + timedelta(seconds=policy.check_after),
        )
        payment_answer_store(payment, key=key, now=now)
    return Taken(payment, expired=False)


def deferred_expire_due(*, now: datetime, policy: DeferralPolicy) -> list[str]:
    """Fail up to ``policy.batch_size`` deferred payments past ``policy.max_age`` (their
    ``not_before`` is capped at that instant, so the due index finds them), skipping rows other
    sweeps hold; each ``failed acquirer_unavailable`` with its answer stored and its
    ``payment.failed`` webhook event. Returns their ids."""
    cutoff = now - timedelta(seconds=policy.max_age)
    with transaction.atomic():
        ids = list(
            _due(now)
            .filter(created_at__lte=cutoff)
            .order_by("not_before")
            .values_list("pk", flat=True)[: policy.batch_size]
        )
        for pk in ids:
            _expire_locked(pk, now=now)
    return ids
