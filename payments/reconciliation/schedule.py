"""The reconciliation schedule and loop shared by payments and operations.

A row whose outcome at the acquirer is unknown (a ``processing`` payment, a ``pending``
capture, void or refund) carries its own schedule: ``next_check_at`` (when to look next),
``reconciliation_attempts`` (how many checks were claimed) and ``reconciliation_lease_until``
(which check owns it now). :class:`Reconciliation` runs that schedule over one model; the two
reconciliations (``payments.reconciliation.payments`` for authorizations,
``payments.reconciliation.operations`` for operations) subclass it and say only what is theirs:
what to look up, what a found record means, what to re-send, and how to lock and escalate a row.

1. **Claim** (:meth:`Reconciliation.claim_due`, :meth:`Reconciliation.claim`): in one short
   transaction, ``SELECT ... FOR UPDATE SKIP LOCKED`` the due rows, record a lease and count the
   attempt; commit. Two sweeps at once take disjoint rows; a killed worker's lease runs out and
   the row is taken again, its attempt counter bounding the loop.
2. **Check** (:meth:`Reconciliation.reconcile`), outside any transaction: a row whose merchant
   request still holds its idempotency key is left to that request; otherwise look it up at the
   acquirer; found: record it; no trace within the grace period: wait; after it: re-send with
   the row's own acquirer idempotency key. A provider with no look-up (Adyen) goes straight to
   the re-send after the grace period; a row the acquirer accepted without its outcome (Adyen's
   ``received``) is awaited (:meth:`Reconciliation.awaited`), never re-sent. An unexpected error
   frees the lease at once.
3. **Reschedule** a failed or inconclusive check with full-jitter backoff (bound
   ``min(cap, base * 2**attempt)``), never before the acquirer's ``Retry-After`` (or a rate
   gate's or breaker's "not before"); **escalate** to ``needs_review`` after the maximum age or
   number of attempts: never re-sent that late (the acquirer may have forgotten the key), logged,
   counted, never dropped.

The gateway client is the only layer that retries a single call; nothing here retries around
it.
"""

from __future__ import annotations

import abc
import enum
import logging
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import F, Q

from gateway_client import AcquirerClient, GatewayError, RetryPolicy
from idempotency.models import IdempotencyKey
from observability.trace_context import PAYMENT_ID, payment_trace_span
from payments.acquirer.client import client_for
from payments.core.payment_states import payment_event_record
from payments.models import Payment, PaymentEventType

__all__ = [
    "AlreadyResolved",
    "Check",
    "Reconciliation",
    "ReconciliationPolicy",
    "ReconciliationReport",
    "ReconciliationResult",
    "acquirer_not_before",
    "reconciliation_backoff",
    "reconciliation_backoff_bound",
]


@dataclass(frozen=True)
class ReconciliationPolicy:
    """When and how often reconciliation looks at a row. Durations in seconds.

    ``grace``: how long after creation a row the acquirer does not know is left alone before it
    is re-sent (look-ups lag). ``backoff_base``/``backoff_cap``: full-jitter backoff between
    failed checks, bound ``min(cap, base * 2**attempt)``. ``max_age``/``max_attempts``: then
    ``needs_review``. ``lease``: how long a claim owns a row (above the longest check).
    ``batch_size``: rows per sweep claim. ``first_check_delay``: countdown of the task enqueued
    right after a 202. ``lock_timeout``: an idempotency key locked more recently than this
    belongs to a live request, which reconciliation leaves alone.
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


def acquirer_not_before(error: GatewayError, now: datetime) -> datetime | None:
    """The instant the acquirer (or the rate gate, or the breaker) said not to call before."""
    not_before = getattr(error, "not_before", None)
    if isinstance(not_before, datetime):
        return not_before
    retry_after = getattr(error, "retry_after", None)
    if isinstance(retry_after, (int, float)) and retry_after > 0:
        return now + timedelta(seconds=retry_after)
    return None


class ReconciliationResult(enum.Enum):
    """What one reconciliation of one payment or operation did."""

    RESOLVED = "resolved"  #: the outcome is now recorded (succeeded, declined or failed).
    ALREADY_RESOLVED = "already_resolved"  #: nothing to do.
    NOT_CLAIMED = "not_claimed"  #: another worker holds it, or it is not due.
    IN_FLIGHT = "in_flight"  #: a live API request owns its key: checked later.
    WAITING = "waiting"  #: not found yet, within the grace period.
    RETRY_LATER = "retry_later"  #: the look-up or re-send failed: next check scheduled.
    NEEDS_REVIEW = "needs_review"  #: too old or too many attempts: handed to a human.


@dataclass(frozen=True)
class ReconciliationReport:
    """What reconciling one row did, for logs, metrics, the command and tests. ``payment_id``
    is the id of the row reconciled: a payment's, or an operation's (``op_``/``re_``)."""

    payment_id: str
    result: ReconciliationResult
    detail: str = ""
    next_check_at: datetime | None = None


class AlreadyResolved(Exception):
    """Raised by a :class:`Reconciliation`'s lock when the locked row is no longer unresolved
    (an outcome was recorded meanwhile); ``detail`` is what the report says (its status, or
    empty). The caller's transaction rolls back, having written nothing."""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        super().__init__(detail)


@dataclass(frozen=True)
class Check:
    """One check of one claimed row: the instant it started (``now``), and what it runs with
    (the injected clock and random source, the policies, the acquirer client)."""

    now: datetime
    clock: Callable[[], datetime]
    random: Callable[[], float]
    policy: ReconciliationPolicy
    client: AcquirerClient
    acquirer_policy: RetryPolicy | None


Row = TypeVar("Row", bound=models.Model)


class Reconciliation(abc.ABC, Generic[Row]):
    """The schedule and the check of one model's unresolved rows (see the module's docstring).

    A subclass names the ``model`` (with ``status``, ``created_at``, ``idempotency_key``,
    ``next_check_at``, ``reconciliation_attempts`` and ``reconciliation_lease_until``), the
    ``pending_status`` that is reconciled, the payment event a rescheduled check appends
    (``attempt_event``), the ``noun`` and ``logger`` of its log lines, and implements the
    abstract methods: what is theirs to look up, record, re-send, lock and escalate.
    """

    model: ClassVar[type[models.Model]]
    pending_status: ClassVar[str]
    attempt_event: ClassVar[PaymentEventType]
    noun: ClassVar[str]
    logger: ClassVar[logging.Logger]

    # --- What a subclass says ------------------------------------------------------------------

    @abc.abstractmethod
    def load(self, pk: str) -> Row:
        """The row ``pk`` with what the check reads (its key, its payment), without a lock."""

    @abc.abstractmethod
    def before_check(self, row: Row, check: Check) -> ReconciliationReport | None:
        """The report when ``row`` is not to be checked as a pending row (resolved meanwhile,
        or another path), else None."""

    @abc.abstractmethod
    def look_up(self, row: Row, check: Check) -> ReconciliationReport | None:
        """Look ``row`` up at the acquirer; record what was found and report it, or None when
        the acquirer has no record. Raises the gateway's errors (the look-up failed)."""

    @abc.abstractmethod
    def resend(self, row: Row, check: Check) -> ReconciliationReport:
        """Re-send ``row``'s request with its own acquirer idempotency key and record the
        outcome (or :meth:`reschedule` when it stays unknown)."""

    @abc.abstractmethod
    def lock_pending(self, pk: str) -> tuple[Payment, Row]:
        """Inside a transaction: lock the row (and what its order requires) and return the
        payment whose timeline gets the events, and the row. Raises :class:`AlreadyResolved`
        when the row is no longer ``pending_status``."""

    @abc.abstractmethod
    def escalate_locked(self, pk: str, *, now: datetime, reason: str) -> None:
        """Inside a transaction: lock the row, move it to ``needs_review`` with ``reason``, and
        refresh the answer a replay returns. Raises :class:`AlreadyResolved`."""

    def attempt_data(self, row: Row) -> dict[str, Any]:
        """What a rescheduled check's event says about the row, before the common fields."""
        return {}

    def awaited(self, row: Row, check: Check) -> str | None:
        """Why ``row``'s outcome is to be awaited rather than looked up or re-sent (the
        acquirer accepted it and says the outcome later: Adyen's ``received``), or None (the
        default). An awaited row is rescheduled (``waiting``) until the maximum age or
        attempts, then escalated; never re-sent."""
        return None

    # --- The schedule --------------------------------------------------------------------------

    def _claimable(self, now: datetime, statuses: Collection[str] | None) -> Q:
        return Q(status__in=list(statuses or [self.pending_status])) & (
            Q(reconciliation_lease_until__isnull=True) | Q(reconciliation_lease_until__lte=now)
        )

    def _lease(self, ids: list[str], now: datetime, policy: ReconciliationPolicy) -> None:
        self.model._default_manager.filter(id__in=ids).update(
            reconciliation_lease_until=now + timedelta(seconds=policy.lease),
            reconciliation_attempts=F("reconciliation_attempts") + 1,
        )

    def claim_due(self, *, now: datetime, policy: ReconciliationPolicy) -> list[str]:
        """Claim up to ``policy.batch_size`` due rows (``next_check_at <= now``), oldest due
        first, skipping rows other workers hold; lease them and count the attempt. Returns their
        ids. (The row only: a payment is locked when an operation's outcome is recorded.)"""
        with transaction.atomic():
            ids = list(
                self.model._default_manager.select_for_update(skip_locked=True, no_key=True)
                .filter(self._claimable(now, None), next_check_at__lte=now)
                .order_by("next_check_at")
                .values_list("id", flat=True)[: policy.batch_size]
            )
            self._lease(ids, now, policy)
        return ids

    def claim(
        self,
        pk: str,
        *,
        now: datetime,
        policy: ReconciliationPolicy,
        statuses: Collection[str] | None = None,
    ) -> bool:
        """Claim the row ``pk`` whatever its ``next_check_at`` (a task enqueued after a 202, a
        command, an operator): False when it is not in ``statuses`` (default the pending status)
        or another worker holds it."""
        with transaction.atomic():
            claimed = (
                self.model._default_manager.select_for_update(skip_locked=True, no_key=True)
                .filter(self._claimable(now, statuses), id=pk)
                .exists()
            )
            if claimed:
                self._lease([pk], now, policy)
        return claimed

    def reschedule(
        self,
        row: Row,
        check: Check,
        *,
        result: ReconciliationResult,
        detail: str,
        not_before: datetime | None = None,
        error: GatewayError | None = None,
    ) -> ReconciliationReport:
        """Free the lease and set the next check: a full-jitter backoff after the row's
        attempts, never before ``not_before``; an event on the payment says why (``result``,
        ``detail``, the ``error``'s type and status code)."""
        now, policy = check.now, check.policy
        attempts = row.reconciliation_attempts  # type: ignore[attr-defined]
        wait = reconciliation_backoff(
            max(attempts - 1, 0),
            base=policy.backoff_base,
            cap=policy.backoff_cap,
            random=check.random,
        )
        next_check_at = now + timedelta(seconds=wait)
        if not_before is not None and not_before > next_check_at:
            next_check_at = not_before
        try:
            with transaction.atomic():
                payment, locked = self.lock_pending(row.pk)
                locked.next_check_at = next_check_at  # type: ignore[attr-defined]
                locked.reconciliation_lease_until = None  # type: ignore[attr-defined]
                locked.save(update_fields=["next_check_at", "reconciliation_lease_until"])
                data = self.attempt_data(locked) | {
                    "result": result.value,
                    "detail": detail,
                    "attempt": locked.reconciliation_attempts,  # type: ignore[attr-defined]
                    "next_check_in_seconds": round((next_check_at - now).total_seconds(), 3),
                }
                if error is not None:
                    data |= {"error": type(error).__name__, "status_code": error.status_code}
                payment_event_record(
                    payment=payment, event_type=self.attempt_event, now=now, data=data
                )
        except AlreadyResolved as exc:
            return ReconciliationReport(row.pk, ReconciliationResult.ALREADY_RESOLVED, exc.detail)
        return ReconciliationReport(row.pk, result, detail, next_check_at)

    def escalate(self, row: Row, *, now: datetime, reason: str) -> ReconciliationReport:
        """Hand the row to a human (``needs_review``, see :meth:`escalate_locked`), logged."""
        try:
            with transaction.atomic():
                self.escalate_locked(row.pk, now=now, reason=reason)
        except AlreadyResolved as exc:
            return ReconciliationReport(row.pk, ReconciliationResult.ALREADY_RESOLVED, exc.detail)
        self.logger.warning("%s %s needs review: %s", self.noun, row.pk, reason)
        return ReconciliationReport(row.pk, ReconciliationResult.NEEDS_REVIEW, reason)

    # --- The check -----------------------------------------------------------------------------

    def reconcile(
        self,
        pk: str,
        *,
        client: AcquirerClient,
        policy: ReconciliationPolicy,
        acquirer_policy: RetryPolicy | None,
        clock: Callable[[], datetime],
        random: Callable[[], float],
    ) -> ReconciliationReport:
        """Check one claimed row (the caller holds its lease). Outside any transaction
        (``RuntimeError`` otherwise). Never raises for an acquirer failure: those schedule the
        next check. An unexpected error (a bug, a lost database) frees the row for the next
        sweep at once rather than when the lease runs out, and propagates."""
        if connection.in_atomic_block:
            raise RuntimeError("Reconciliation calls the acquirer: never inside a transaction.")
        try:
            check = Check(clock(), clock, random, policy, client, acquirer_policy)
            return self._check(pk, check)
        except Exception:
            self.model._default_manager.filter(pk=pk).update(reconciliation_lease_until=None)
            raise

    @staticmethod
    def payment_of(row: Row) -> Payment:
        """``row`` itself when it is a payment, else the payment of the operation ``row``."""
        return row if isinstance(row, Payment) else row.payment  # type: ignore[attr-defined]

    def acquirer_of(self, row: Row) -> str:
        """The acquirer that holds ``row`` (a payment's ``acquirer``; an operation's payment's):
        every look-up and re-send of it goes there."""
        return self.payment_of(row).acquirer

    def _at_acquirer(self, row: Row, check: Check) -> Check:
        """``check`` with the client of ``row``'s acquirer (``client_for``): the caller's
        client when it is that acquirer's, else the process's, with the caller's deadline,
        server wait and concurrency wait on that acquirer's own retry policy."""
        client = client_for(self.acquirer_of(row), check.client)
        if client is check.client:
            return check
        given = check.acquirer_policy
        acquirer_policy = (
            None
            if given is None
            else client.policy.replace(
                deadline=given.deadline,
                max_server_wait=given.max_server_wait,
                concurrency_wait=given.concurrency_wait,
            )
        )
        return replace(check, client=client, acquirer_policy=acquirer_policy)

    def _check(self, pk: str, check: Check) -> ReconciliationReport:
        """:meth:`_check_row` in a span of the payment's trace (the row's payment's stored
        ``trace_context``, whoever runs the check; ADR 0044), with the decision on it."""
        row = self.load(pk)
        payment = self.payment_of(row)
        found = {PAYMENT_ID: payment.pk, "payments.reconciliation.row": pk}
        with payment_trace_span(f"reconcile {self.noun}", payment.trace_context, found) as span:
            report = self._check_row(row, check)
            span.set_attributes(
                {"payments.reconciliation.result": report.result.value,
                 "payments.reconciliation.detail": report.detail}
            )  # fmt: skip
            return report

    def _check_row(self, row: Row, check: Check) -> ReconciliationReport:
        now, policy = check.now, check.policy
        check = self._at_acquirer(row, check)
        early = self.before_check(row, check)
        if early is not None:
            return early
        key: IdempotencyKey | None = row.idempotency_key  # type: ignore[attr-defined]
        lock_timeout = timedelta(seconds=policy.lock_timeout)
        if (
            key is not None
            and key.status == IdempotencyKey.Status.IN_PROGRESS
            and key.locked_at is not None
            and key.locked_at > now - lock_timeout
        ):
            return self.reschedule(
                row,
                check,
                result=ReconciliationResult.IN_FLIGHT,
                detail="a request holds the idempotency key",
                not_before=key.locked_at + lock_timeout,
            )
        created_at: datetime = row.created_at  # type: ignore[attr-defined]
        age = (now - created_at).total_seconds()
        if age >= policy.max_age:
            give_up = f"unresolved after {age:.0f} s (the maximum age)"
        elif row.reconciliation_attempts > policy.max_attempts:  # type: ignore[attr-defined]
            give_up = f"unresolved after {policy.max_attempts} reconciliation attempts"
        else:
            give_up = ""
        awaited = self.awaited(row, check)
        if awaited is not None:
            if give_up:
                return self.escalate(row, now=now, reason=f"{give_up}; {awaited}")
            return self.reschedule(row, check, result=ReconciliationResult.WAITING, detail=awaited)
        try:
            found = self.look_up(row, check)
        except GatewayError as exc:
            if give_up:
                return self.escalate(row, now=now, reason=f"{give_up}; the last look-up failed")
            return self.reschedule(
                row,
                check,
                result=ReconciliationResult.RETRY_LATER,
                detail="look-up failed",
                not_before=acquirer_not_before(exc, now),
                error=exc,
            )
        if found is not None:
            return found
        if give_up:  # never re-send this late: the acquirer may have forgotten the key
            no_record = (
                "the acquirer has no record of it"
                if check.client.dialect.supports_lookup
                else "the acquirer has no look-up by our reference (re-sent with the same key)"
            )
            return self.escalate(row, now=now, reason=f"{give_up}; {no_record}")
        if age < policy.grace:
            return self.reschedule(
                row,
                check,
                result=ReconciliationResult.WAITING,
                detail="not found yet; within the grace period",
                not_before=created_at + timedelta(seconds=policy.grace),
            )
        return self.resend(row, check)

    def run(
        self,
        pk: str,
        *,
        client: AcquirerClient,
        policy: ReconciliationPolicy,
        acquirer_policy: RetryPolicy | None,
        clock: Callable[[], datetime],
        random: Callable[[], float],
        statuses: Collection[str] | None = None,
    ) -> ReconciliationReport:
        """Claim the row ``pk`` whatever its ``next_check_at`` (see :meth:`claim`) and check it;
        :attr:`ReconciliationResult.NOT_CLAIMED` when it could not be claimed, so a duplicate or
        redelivered message does nothing."""
        if not self.claim(pk, now=clock(), policy=policy, statuses=statuses):
            return ReconciliationReport(pk, ReconciliationResult.NOT_CLAIMED)
        return self.reconcile(
            pk,
            client=client,
            policy=policy,
            acquirer_policy=acquirer_policy,
            clock=clock,
            random=random,
        )

    def sweep(
        self,
        *,
        client: AcquirerClient,
        policy: ReconciliationPolicy,
        acquirer_policy: RetryPolicy | None,
        clock: Callable[[], datetime],
        random: Callable[[], float],
    ) -> list[ReconciliationReport]:
        """Claim one batch of due rows and check each; return what happened to each."""
        return [
            self.reconcile(
                pk,
                client=client,
                policy=policy,
                acquirer_policy=acquirer_policy,
                clock=clock,
                random=random,
            )
            for pk in self.claim_due(now=clock(), policy=policy)
        ]
