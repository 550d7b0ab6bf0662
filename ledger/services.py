"""The ledger audit: our payments against the acquirer's records.

:func:`audit_acquirer` reads every payment created since ``since`` and every record the
acquirer made since then (:mod:`ledger.acquirer_records`), matches them by our reference (the
payment id, sent as the acquirer's ``reference``) and reports, by :class:`Category`:

* ``record_unknown_to_us``: the acquirer recorded an authorization whose reference is none of
  our payments (money moved that we cannot account for);
* ``payment_unknown_to_acquirer``: a payment we record as ``succeeded`` or ``declined`` that
  the acquirer has no record of;
* ``multiple_records``: more than one record for one payment (charged twice), whatever our
  status;
* ``status_mismatch``: ``succeeded`` here but declined there, ``declined`` here but approved
  there, or ``failed`` here (never sent, or refused) while the acquirer recorded it;
* ``amount_mismatch``: a record whose amount or currency is not the payment's;
* ``acquirer_reference_mismatch``: the acquirer id we stored is not the id of its record.

Amounts, not just presence (issue 12), per payment with one record of the right amount:

* ``captured_amount_mismatch``: the acquirer's ``amount_captured`` is not ours (``succeeded``:
  what we captured; ``requires_capture`` and ``canceled``: 0);
* ``refunded_amount_mismatch``: the acquirer's ``amount_refunded`` (its succeeded refunds) is not
  our ``amount_refunded`` (checked when none of the payment's refunds is unresolved);
* ``void_mismatch``: voided at the acquirer but not ``canceled`` here, or ``canceled`` here and
  not voided there;

and per refund, matched by our refund id (the refund's ``reference`` at the acquirer):

* ``refund_unknown_to_us``: a refund at the acquirer whose reference is none of our refunds;
* ``refund_unknown_to_acquirer``: a refund we record as ``succeeded`` that the acquirer has no
  record of;
* ``refund_mismatch``: the acquirer has it, but not as we do: ``succeeded`` here and ``failed``
  there (or the reverse: money returned that we count as not refunded), another amount or
  currency, more than one succeeded record, or another acquirer id than the one we stored.

Captures, voids and refunds still ``pending`` or in ``needs_review`` are unresolved, like
payments: listed with the operation's id and kind, not discrepancies (a payment in
``capture_pending`` / ``void_pending`` is not compared on its capture state).

Payments still ``processing`` or in ``needs_review`` are not discrepancies: their outcome is
not known yet (reconciliation, or a human, decides it). They are listed as *unresolved*, with
what the acquirer holds for them, so an operator resolving one sees it. The two checks that do
not depend on knowing the outcome (several records, wrong amount) apply to them too.

A payment created before ``since`` whose record falls in the window (a late re-send by
reconciliation) is looked up by its id and compared, so a window boundary never invents an
unknown record. A payment created before ``since`` with only a refund in the window is looked
up for that refund, which is compared, but the payment itself is not: its charge record may
predate the records read, and the boundary must not invent an unknown payment either.
Records are read from ``since - skew`` to absorb clock differences between the acquirer and us;
an unknown record older than ``since`` is outside the window and ignored.

:func:`audit_write_csv` writes the discrepancies as CSV; :func:`audit_run_record` stores a run
as a :class:`ledger.models.AuditRun`; :func:`audit_acquirer_run` does all three.
"""

from __future__ import annotations

import csv
import enum
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ledger.acquirer_records import (
    AcquirerRecord,
    AcquirerRecords,
    AcquirerRefundRecord,
)
from ledger.disputes import DisputeCounts, dispute_counts
from ledger.models import STORED_ROWS_LIMIT, AuditRun
from ledger.sources import acquirer_records_from_settings
from payments.acquirer.client import acquirer_spec, acquirer_specs
from payments.models import (
    OperationKind,
    OperationStatus,
    Payment,
    PaymentOperation,
    PaymentStatus,
)

logger = logging.getLogger(__name__)

#: Records are read from this long before ``since`` (clock differences with the acquirer).
DEFAULT_SKEW = timedelta(minutes=5)
#: Payment ids looked up per query when records point outside the window.
_ID_CHUNK = 1000


class Category(enum.StrEnum):
    """A kind of discrepancy. The value is the column name in ``AuditRun`` and the CSV code."""

    RECORD_UNKNOWN_TO_US = "record_unknown_to_us"
    PAYMENT_UNKNOWN_TO_ACQUIRER = "payment_unknown_to_acquirer"
    MULTIPLE_RECORDS = "multiple_records"
    STATUS_MISMATCH = "status_mismatch"
    AMOUNT_MISMATCH = "amount_mismatch"
    ACQUIRER_REFERENCE_MISMATCH = "acquirer_reference_mismatch"
    CAPTURED_AMOUNT_MISMATCH = "captured_amount_mismatch"
    REFUNDED_AMOUNT_MISMATCH = "refunded_amount_mismatch"
    VOID_MISMATCH = "void_mismatch"
    REFUND_UNKNOWN_TO_US = "refund_unknown_to_us"
    REFUND_UNKNOWN_TO_ACQUIRER = "refund_unknown_to_acquirer"
    REFUND_MISMATCH = "refund_mismatch"


#: What each category means, for summaries and the admin.
CATEGORY_LABELS: dict[Category, str] = {
    Category.RECORD_UNKNOWN_TO_US: "acquirer records of no payment of ours",
    Category.PAYMENT_UNKNOWN_TO_ACQUIRER: "succeeded/declined payments the acquirer does not know",
    Category.MULTIPLE_RECORDS: "payments with more than one acquirer record",
    Category.STATUS_MISMATCH: "status differs",
    Category.AMOUNT_MISMATCH: "amount or currency differs",
    Category.ACQUIRER_REFERENCE_MISMATCH: "stored acquirer reference differs",
    Category.CAPTURED_AMOUNT_MISMATCH: "captured total differs",
    Category.REFUNDED_AMOUNT_MISMATCH: "refunded total differs",
    Category.VOID_MISMATCH: "voided there, not canceled here (or the reverse)",
    Category.REFUND_UNKNOWN_TO_US: "acquirer refunds of no refund of ours",
    Category.REFUND_UNKNOWN_TO_ACQUIRER: "succeeded refunds the acquirer does not know",
    Category.REFUND_MISMATCH: "refund status, amount or count differs",
}

#: The acquirer status each status of ours must have (None: no record at all). A manual
#: payment's authorization was approved whatever happened to it later.
EXPECTED_RECORD_STATUS: dict[str, str | None] = {
    PaymentStatus.SUCCEEDED: "approved",
    PaymentStatus.DECLINED: "declined",
    PaymentStatus.FAILED: None,
    PaymentStatus.REQUIRES_CAPTURE: "approved",
    PaymentStatus.CAPTURE_PENDING: "approved",
    PaymentStatus.VOID_PENDING: "approved",
    PaymentStatus.CANCELED: "approved",
    # Held for the shopper (3-D Secure, ADR 0049); a customer action that expired unfinished is
    # canceled here and there (EXPIRED_ACTION_RECORD_STATUS).
    PaymentStatus.REQUIRES_ACTION: "requires_action",
}
#: The acquirer status of a payment ``canceled`` because its customer action expired.
EXPIRED_ACTION_RECORD_STATUS = "canceled"
UNRESOLVED_STATUSES = (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW)
#: A capture or void was sent and its outcome is not known: the capture state is not compared.
OPERATION_PENDING_STATUSES = (PaymentStatus.CAPTURE_PENDING, PaymentStatus.VOID_PENDING)
#: Statuses whose capture state is compared: what the acquirer must show captured and voided.
EXPECTED_CAPTURE_STATE = {
    PaymentStatus.SUCCEEDED: ("amount_captured", False),
    PaymentStatus.REQUIRES_CAPTURE: (0, False),
    PaymentStatus.CANCELED: (0, True),
}
UNRESOLVED_OPERATION_STATUSES = (OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW)

CSV_COLUMNS = (
    "category",
    "payment_id",
    "merchant_id",
    "our_status",
    "our_amount",
    "our_currency",
    "our_acquirer_reference",
    "payment_created_at",
    "acquirer_records",
    "acquirer_references",
    "acquirer_statuses",
    "acquirer_amounts",
    "detail",
    "refund_id",
)


@dataclass(frozen=True, slots=True)
class _Payment:
    id: str
    merchant_id: int
    status: str
    amount: int
    currency: str
    acquirer_reference: str | None
    failure_code: str | None
    created_at: datetime
    amount_captured: int
    amount_refunded: int
    decline_code: str | None = None


@dataclass(frozen=True, slots=True)
class _Refund:
    id: str
    payment_id: str
    status: str
    amount: int
    acquirer_reference: str | None
    created_at: datetime


@dataclass(frozen=True)
class Discrepancy:
    """One finding. Fields of ours are None for a record unknown to us.

    ``our_amount`` and ``acquirer_amounts`` hold the amounts compared: the authorized amount,
    or for ``captured_amount_mismatch`` / ``refunded_amount_mismatch`` the totals. For the
    refund categories ``refund_id`` is our refund id (the acquirer's reference for one unknown
    to us) and ``our_status``, ``our_amount`` and ``our_acquirer_reference`` are the refund's.
    """

    category: Category
    payment_id: str | None
    detail: str
    merchant_id: int | None = None
    our_status: str | None = None
    our_amount: int | None = None
    our_currency: str | None = None
    our_acquirer_reference: str | None = None
    payment_created_at: str | None = None
    acquirer_references: tuple[str, ...] = ()
    acquirer_statuses: tuple[str, ...] = ()
    acquirer_amounts: tuple[str, ...] = ()
    refund_id: str | None = None

    def as_row(self) -> dict:
        """A flat, JSON- and CSV-ready dict (lists joined with ``;``)."""
        row = asdict(self)
        row["category"] = self.category.value
        row["acquirer_records"] = len(self.acquirer_references)
        for name in ("acquirer_references", "acquirer_statuses", "acquirer_amounts"):
            row[name] = ";".join(row[name])
        return {column: row[column] for column in CSV_COLUMNS}


@dataclass(frozen=True)
class Unresolved:
    """A payment, or a capture, void or refund of one (``operation_id``, ``kind``), whose
    outcome is not known yet, with what the acquirer holds for it (for a refund: its refund
    records)."""

    payment_id: str
    status: str
    created_at: str
    acquirer_records: int
    acquirer_statuses: tuple[str, ...] = ()
    operation_id: str = ""
    kind: str = ""

    def as_row(self) -> dict:
        row = asdict(self)
        row["acquirer_statuses"] = ";".join(self.acquirer_statuses)
        return row


@dataclass
class AuditReport:
    """What :func:`audit_acquirer` found. ``clean`` when there is no discrepancy."""

    since: datetime
    ran_at: datetime
    source: str
    payments_checked: int = 0
    records_checked: int = 0
    refunds_checked: int = 0
    refund_records_checked: int = 0
    payments_by_status: dict[str, int] = field(default_factory=dict)
    discrepancies: list[Discrepancy] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    duration_seconds: float = 0.0
    #: The audited payments' disputes (ledger/disputes.py): counted, not matched.
    disputes: DisputeCounts = field(default_factory=DisputeCounts)
    #: Acquirers left out, each as "name: why" (no source of its records is configured).
    not_audited: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.discrepancies

    @property
    def counts(self) -> dict[Category, int]:
        """Discrepancies per category, every category present (0 when none)."""
        counts = dict.fromkeys(Category, 0)
        for discrepancy in self.discrepancies:
            counts[discrepancy.category] += 1
        return counts

    def summary_lines(self) -> list[str]:
        """A human summary: the window, the figures, and one line per category."""
        lines = [
            f"ledger audit since {_iso(self.since)} (ran {_iso(self.ran_at)}, "
            f"{self.duration_seconds:.2f} s), records from {self.source}",
            f"payments checked: {self.payments_checked} "
            + "("
            + ", ".join(f"{k} {v}" for k, v in sorted(self.payments_by_status.items()))
            + ")",
            f"acquirer records checked: {self.records_checked}",
            f"refunds checked: {self.refunds_checked}, "
            f"acquirer refund records checked: {self.refund_records_checked}",
        ]
        for category, count in self.counts.items():
            lines.append(f"  {category.value:<28} {count:>6}  {CATEGORY_LABELS[category]}")
        by_status: dict[str, int] = defaultdict(int)
        for item in self.unresolved:
            by_status[item.status] += 1
        lines.append(
            f"unresolved (not discrepancies): {len(self.unresolved)}"
            + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(by_status.items())) + ")"
               if by_status else "")
        )  # fmt: skip
        lines.append(self.disputes.summary())
        if self.not_audited:
            lines.append("not audited: " + "; ".join(self.not_audited))
        lines.append(
            "result: clean" if self.clean else f"result: {len(self.discrepancies)} discrepancies"
        )
        return lines

    def as_json(self) -> dict:
        """The whole report as a JSON-ready dict (``--json`` of the command)."""
        return {
            "since": _iso(self.since),
            "ran_at": _iso(self.ran_at),
            "source": self.source,
            "duration_seconds": round(self.duration_seconds, 3),
            "payments_checked": self.payments_checked,
            "records_checked": self.records_checked,
            "refunds_checked": self.refunds_checked,
            "refund_records_checked": self.refund_records_checked,
            "payments_by_status": dict(sorted(self.payments_by_status.items())),
            "counts": {category.value: count for category, count in self.counts.items()},
            "discrepancies_total": len(self.discrepancies),
            "clean": self.clean,
            "discrepancies": [item.as_row() for item in self.discrepancies],
            "unresolved": [item.as_row() for item in self.unresolved],
            "disputes": self.disputes.as_json(),
            "not_audited": list(self.not_audited),
        }


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


_PAYMENT_FIELDS = (
    "id",
    "merchant_id",
    "status",
    "amount",
    "currency",
    "acquirer_reference",
    "failure_code",
    "created_at",
    "amount_captured",
    "amount_refunded",
    "decline_code",
)
_REFUND_FIELDS = ("id", "payment_id", "status", "amount", "acquirer_reference", "created_at")


_R = TypeVar("_R", AcquirerRecord, AcquirerRefundRecord)


def _by_reference(records: Iterable[_R], since: datetime) -> tuple[dict[str, list[_R]], int]:
    """The acquirer's records grouped by their reference (our id), and how many fall in the
    window (the others were read only because of the skew margin)."""
    grouped: dict[str, list[_R]] = defaultdict(list)
    in_window = 0
    for record in records:
        grouped[record.reference].append(record)
        in_window += record.created_at >= since
    return grouped, in_window


def _chunks(ids: list[str]) -> Iterable[list[str]]:
    """``ids`` in lists of at most ``_ID_CHUNK`` (one ``IN (...)`` query each)."""
    for start in range(0, len(ids), _ID_CHUNK):
        yield ids[start : start + _ID_CHUNK]


def _payments(queryset) -> Iterable[_Payment]:
    for values in queryset.values_list(*_PAYMENT_FIELDS).iterator(chunk_size=2000):
        yield _Payment(*values)


def _refunds(queryset) -> Iterable[_Refund]:
    queryset = queryset.filter(kind=OperationKind.REFUND).values_list(*_REFUND_FIELDS)
    for values in queryset.iterator(chunk_size=2000):
        yield _Refund(*values)


def _compare(
    payment: _Payment, records: list[AcquirerRecord], *, refunds_unresolved: bool = False
) -> list[Discrepancy]:
    """The discrepancies of one payment of ours with its records (maybe none).
    ``refunds_unresolved``: one of its refunds is pending or in review (its refunded total is
    then not compared)."""

    def finding(category: Category, detail: str) -> Discrepancy:
        return Discrepancy(
            category=category,
            payment_id=payment.id,
            detail=detail,
            merchant_id=payment.merchant_id,
            our_status=payment.status,
            our_amount=payment.amount,
            our_currency=payment.currency,
            our_acquirer_reference=payment.acquirer_reference,
            payment_created_at=_iso(payment.created_at),
            acquirer_references=tuple(r.acquirer_reference for r in records),
            acquirer_statuses=tuple(r.status for r in records),
            acquirer_amounts=tuple(f"{r.amount} {r.currency}" for r in records),
        )

    found: list[Discrepancy] = []
    if len(records) > 1:
        found.append(
            finding(Category.MULTIPLE_RECORDS, f"{len(records)} acquirer records for one payment")
        )
    wrong_amount = [
        r for r in records if (r.amount, r.currency) != (payment.amount, payment.currency)
    ]
    if wrong_amount:
        found.append(
            finding(
                Category.AMOUNT_MISMATCH,
                f"ours {payment.amount} {payment.currency}, the acquirer's "
                + ", ".join(f"{r.amount} {r.currency}" for r in wrong_amount),
            )
        )
    if payment.status in UNRESOLVED_STATUSES:
        return found

    expected = EXPECTED_RECORD_STATUS.get(payment.status)
    if payment.status == PaymentStatus.CANCELED and payment.decline_code == "action_expired":
        expected = EXPIRED_ACTION_RECORD_STATUS
    statuses = {r.status for r in records}
    if expected is None:
        if records:
            why = f" ({payment.failure_code})" if payment.failure_code else ""
            found.append(
                finding(
                    Category.STATUS_MISMATCH,
                    f"{payment.status}{why} here, {'/'.join(sorted(statuses))} at the acquirer",
                )
            )
        return found
    if not records:
        found.append(
            finding(
                Category.PAYMENT_UNKNOWN_TO_ACQUIRER,
                f"{payment.status} here, no record at the acquirer",
            )
        )
        return found
    if statuses != {expected}:
        found.append(
            finding(
                Category.STATUS_MISMATCH,
                f"{payment.status} here, {'/'.join(sorted(statuses))} at the acquirer",
            )
        )
    if payment.acquirer_reference not in {r.acquirer_reference for r in records}:
        found.append(
            finding(
                Category.ACQUIRER_REFERENCE_MISMATCH,
                f"stored acquirer reference {payment.acquirer_reference or '(none)'} is not "
                "the id of the acquirer's record",
            )
        )
    if len(records) == 1 and not wrong_amount and statuses == {expected}:
        found.extend(_compare_capture_state(payment, records[0], refunds_unresolved, finding))
    return found


def _compare_capture_state(
    payment: _Payment,
    record: AcquirerRecord,
    refunds_unresolved: bool,
    finding: Callable[..., Discrepancy],
) -> list[Discrepancy]:
    """Captured and refunded totals and the void, for a payment with its one record of the
    right amount (the record's capture state as reported; None: not reported, not compared)."""
    found: list[Discrepancy] = []
    expected = EXPECTED_CAPTURE_STATE.get(payment.status)
    if expected is None:  # declined, or a capture or void still pending
        return found
    captured, voided = expected
    captured = payment.amount_captured if captured == "amount_captured" else captured
    currency = payment.currency
    if record.voided is not None and record.voided != voided:
        there = "voided" if record.voided else "not voided"
        found.append(finding(Category.VOID_MISMATCH, f"{payment.status} here, {there} there"))
    if record.amount_captured is not None and record.amount_captured != captured:
        found.append(
            replace(
                finding(
                    Category.CAPTURED_AMOUNT_MISMATCH,
                    f"captured {captured} {currency} here, "
                    f"{record.amount_captured} {currency} at the acquirer",
                ),
                our_amount=captured,
                acquirer_amounts=(f"{record.amount_captured} {currency}",),
            )
        )
    if (
        not refunds_unresolved
        and record.amount_refunded is not None
        and record.amount_refunded != payment.amount_refunded
    ):
        found.append(
            replace(
                finding(
                    Category.REFUNDED_AMOUNT_MISMATCH,
                    f"refunded {payment.amount_refunded} {currency} here, "
                    f"{record.amount_refunded} {currency} at the acquirer",
                ),
                our_amount=payment.amount_refunded,
                acquirer_amounts=(f"{record.amount_refunded} {currency}",),
            )
        )
    return found


def _compare_refund(
    refund: _Refund, payment: _Payment | None, records: list[AcquirerRefundRecord]
) -> list[Discrepancy]:
    """The discrepancies of one refund of ours with the acquirer's refund records that carry
    its id as their reference (maybe none)."""
    currency = payment.currency if payment is not None else None

    def finding(category: Category, detail: str) -> Discrepancy:
        return Discrepancy(
            category=category,
            payment_id=refund.payment_id,
            detail=detail,
            merchant_id=payment.merchant_id if payment is not None else None,
            our_status=refund.status,
            our_amount=refund.amount,
            our_currency=currency,
            our_acquirer_reference=refund.acquirer_reference,
            payment_created_at=_iso(payment.created_at) if payment is not None else None,
            acquirer_references=tuple(r.acquirer_reference for r in records),
            acquirer_statuses=tuple(r.status for r in records),
            acquirer_amounts=tuple(f"{r.amount} {r.currency}" for r in records),
            refund_id=refund.id,
        )

    succeeded = [r for r in records if r.status == "succeeded"]
    if len(succeeded) > 1:
        return [finding(Category.REFUND_MISMATCH, f"refunded {len(succeeded)} times there")]
    if refund.status in UNRESOLVED_OPERATION_STATUSES:
        return []
    if refund.status == OperationStatus.FAILED:
        if succeeded:
            return [finding(Category.REFUND_MISMATCH, "failed here, succeeded at the acquirer")]
        return []
    if not records:
        return [finding(Category.REFUND_UNKNOWN_TO_ACQUIRER, "succeeded here, no record there")]
    if not succeeded:
        return [finding(Category.REFUND_MISMATCH, "succeeded here, failed at the acquirer")]
    (record,) = succeeded
    problems = []
    if (record.amount, record.currency) != (refund.amount, currency):
        problems.append(
            f"amount {refund.amount} {currency} here, {record.amount} {record.currency} there"
        )
    if refund.acquirer_reference != record.acquirer_reference:
        problems.append(
            f"stored acquirer reference {refund.acquirer_reference or '(none)'} is not the "
            "acquirer's refund id"
        )
    return [finding(Category.REFUND_MISMATCH, "; ".join(problems))] if problems else []


def audit_acquirer(
    *,
    since: datetime,
    records: AcquirerRecords | None = None,
    clock: Callable[[], datetime] = timezone.now,
    skew: timedelta = DEFAULT_SKEW,
    acquirer: str | None = None,
) -> AuditReport:
    """Compare the payments created since ``since`` (aware) with the acquirers' records.

    ``records`` is the source of one acquirer; ``acquirer`` names it (only its payments are
    compared with it: ``Payment.acquirer``). With neither, every configured acquirer
    (``ACQUIRERS``) is audited against its own records
    (:func:`acquirer_records_from_settings`) and the reports merged (:func:`audit_acquirers`).
    A payment of another acquirer that this one recorded as approved is a
    ``multiple_records`` discrepancy: authorized at two acquirers. Its declined records there
    are expected (a soft decline that failed over). Reads only; writes nothing. Raises
    :class:`ledger.acquirer_records.AcquirerRecordsError` when the records cannot be read.
    """
    if since.tzinfo is None:
        raise ValueError("since must be timezone-aware")
    if records is None and acquirer is None:
        return audit_acquirers(since=since, clock=clock, skew=skew)
    started = time.monotonic()
    if records is None:
        configured = getattr(settings, "ACQUIRERS", None)
        records = acquirer_records_from_settings(acquirer_spec(acquirer) if configured else None)
        if records is None:
            return AuditReport(
                since=since,
                ran_at=clock(),
                source=f"{acquirer}: not audited",
                not_audited=[_not_audited(acquirer or "")],
            )
    source = records
    report = AuditReport(
        since=since,
        ran_at=clock(),
        source=source.name if acquirer is None else f"{acquirer}: {source.name}",
    )

    by_reference, report.records_checked = _by_reference(source.records_since(since - skew), since)

    ours = Payment.objects.all() if acquirer is None else Payment.objects.filter(acquirer=acquirer)
    payments: dict[str, _Payment] = {p.id: p for p in _payments(ours.filter(created_at__gte=since))}
    for chunk in _chunks([reference for reference in by_reference if reference not in payments]):
        payments.update((p.id, p) for p in _payments(ours.filter(id__in=chunk)))
    if acquirer is not None:
        _records_of_payments_elsewhere(report, acquirer, by_reference, payments)
    # The payments compared with their charge records: those created in the window and those
    # whose record was read. A payment looked up below only for a refund in the window may
    # have its charge record before ``since - skew``, which was not read: comparing it would
    # report a charge the acquirer does hold as unknown to it.
    compared = set(payments)

    refund_records, report.refund_records_checked = _by_reference(
        source.refunds_since(since - skew), since
    )
    # Our refunds: those of the audited payments, those created in the window, and those the
    # acquirer's refund records name (a late re-send of an older refund).
    # Each acquirer's refunds are audited against its own records.
    operations = (
        PaymentOperation.objects.all()
        if acquirer is None
        else PaymentOperation.objects.filter(payment__acquirer=acquirer)
    )
    refunds: dict[str, _Refund] = {
        r.id: r
        for r in _refunds(
            operations.filter(Q(created_at__gte=since) | Q(payment__created_at__gte=since))
        )
    }
    for chunk in _chunks([reference for reference in refund_records if reference not in refunds]):
        refunds.update((r.id, r) for r in _refunds(operations.filter(id__in=chunk)))
    for chunk in _chunks([r.payment_id for r in refunds.values() if r.payment_id not in payments]):
        payments.update((p.id, p) for p in _payments(ours.filter(id__in=chunk)))
    _audit_refunds(report, payments, refunds, refund_records, since)
    refunds_unresolved = {
        r.payment_id for r in refunds.values() if r.status in UNRESOLVED_OPERATION_STATUSES
    }
    _list_unresolved_operations(report, payments, refund_records)

    by_status: dict[str, int] = defaultdict(int)
    for payment in payments.values():
        if payment.id not in compared:
            continue
        records_ = by_reference.get(payment.id, [])
        by_status[payment.status] += 1
        report.discrepancies.extend(
            _compare(payment, records_, refunds_unresolved=payment.id in refunds_unresolved)
        )
        if payment.status in UNRESOLVED_STATUSES:
            report.unresolved.append(
                Unresolved(
                    payment_id=payment.id,
                    status=payment.status,
                    created_at=_iso(payment.created_at),
                    acquirer_records=len(records_),
                    acquirer_statuses=tuple(r.status for r in records_),
                )
            )
    for reference, records_ in by_reference.items():
        if reference in payments:
            continue
        in_window = [r for r in records_ if r.created_at >= since]
        if not in_window:
            continue  # read only because of the skew margin
        report.discrepancies.append(
            Discrepancy(
                category=Category.RECORD_UNKNOWN_TO_US,
                payment_id=None,
                detail=f"reference {reference!r} is none of our payments",
                acquirer_references=tuple(r.acquirer_reference for r in in_window),
                acquirer_statuses=tuple(r.status for r in in_window),
                acquirer_amounts=tuple(f"{r.amount} {r.currency}" for r in in_window),
            )
        )
    report.payments_checked = len(compared)
    report.payments_by_status = dict(by_status)
    report.disputes = dispute_counts(compared)
    report.discrepancies.sort(key=lambda d: (list(Category).index(d.category), d.payment_id or ""))
    report.unresolved.sort(key=lambda u: (u.created_at, u.payment_id))
    report.duration_seconds = time.monotonic() - started
    return report


def _not_audited(acquirer: str) -> str:
    spec = acquirer_spec(acquirer)
    return f"{acquirer}: no source of its records for type {spec.type} (LEDGER_ACQUIRER_RECORDS)"


def _records_of_payments_elsewhere(
    report: AuditReport,
    acquirer: str,
    by_reference: dict[str, list[AcquirerRecord]],
    payments: dict[str, _Payment],
) -> None:
    """Records at ``acquirer`` of payments held by another acquirer: taken out of
    ``by_reference`` (they are no "record unknown to us"); an approved one is a
    ``multiple_records`` discrepancy (the payment was authorized at two acquirers), declined
    ones are the expected trace of a soft decline that failed over."""
    unknown = [reference for reference in by_reference if reference not in payments]
    for chunk in _chunks(unknown):
        elsewhere = Payment.objects.filter(id__in=chunk).exclude(acquirer=acquirer)
        for payment_id, holder in elsewhere.values_list("id", "acquirer"):
            records = by_reference.pop(payment_id)
            approved = [r for r in records if r.status == "approved"]
            if approved:
                report.discrepancies.append(
                    Discrepancy(
                        category=Category.MULTIPLE_RECORDS,
                        payment_id=payment_id,
                        detail=f"approved at {acquirer} although the payment is at {holder}: "
                        "authorized at two acquirers",
                        acquirer_references=tuple(r.acquirer_reference for r in approved),
                        acquirer_statuses=tuple(r.status for r in approved),
                        acquirer_amounts=tuple(f"{r.amount} {r.currency}" for r in approved),
                    )
                )


def audit_acquirers(
    *,
    since: datetime,
    clock: Callable[[], datetime] = timezone.now,
    skew: timedelta = DEFAULT_SKEW,
) -> AuditReport:
    """:func:`audit_acquirer` of every configured acquirer against its own records, merged into
    one report (counts added, findings joined; ``source`` names each acquirer's). With one
    acquirer, that acquirer's report. An acquirer without a source of its records
    (:func:`ledger.sources.acquirer_records_from_settings`: every type has one today) is left
    out and named in ``not_audited``. Raises ``AcquirerRecordsError`` as the audit does."""
    configured = getattr(settings, "ACQUIRERS", None)
    reports, not_audited = [], []
    for spec in acquirer_specs():
        records = acquirer_records_from_settings(spec if configured else None)
        if records is None:
            not_audited.append(_not_audited(spec.name))
            continue
        reports.append(
            audit_acquirer(since=since, records=records, acquirer=spec.name, clock=clock, skew=skew)
        )
    if len(reports) == 1 and not not_audited:
        return reports[0]
    merged = AuditReport(
        since=since,
        ran_at=reports[0].ran_at if reports else clock(),
        source="; ".join(r.source for r in reports) or "none",
        not_audited=not_audited,
    )
    by_status: dict[str, int] = defaultdict(int)
    for report in reports:
        merged.payments_checked += report.payments_checked
        merged.records_checked += report.records_checked
        merged.refunds_checked += report.refunds_checked
        merged.refund_records_checked += report.refund_records_checked
        merged.discrepancies.extend(report.discrepancies)
        merged.unresolved.extend(report.unresolved)
        merged.duration_seconds += report.duration_seconds
        merged.disputes.add(report.disputes)
        for status, count in report.payments_by_status.items():
            by_status[status] += count
    merged.payments_by_status = dict(by_status)
    merged.discrepancies.sort(key=lambda d: (list(Category).index(d.category), d.payment_id or ""))
    merged.unresolved.sort(key=lambda u: (u.created_at, u.payment_id))
    return merged


def _audit_refunds(
    report: AuditReport,
    payments: dict[str, _Payment],
    refunds: dict[str, _Refund],
    refund_records: dict[str, list[AcquirerRefundRecord]],
    since: datetime,
) -> None:
    """Compare each refund of ours with its records; report the records of no refund of ours
    (in the window) as ``refund_unknown_to_us``, with the payment whose charge they refunded
    when we know it."""
    report.refunds_checked = len(refunds)
    for refund in refunds.values():
        payment = payments.get(refund.payment_id)
        report.discrepancies.extend(
            _compare_refund(refund, payment, refund_records.get(refund.id, []))
        )
    unknown = {
        reference: [r for r in rows if r.created_at >= since]
        for reference, rows in refund_records.items()
        if reference not in refunds
    }
    unknown = {reference: rows for reference, rows in unknown.items() if rows}
    charges = {r.charge for rows in unknown.values() for r in rows}
    payment_of_charge = dict(
        Payment.objects.filter(acquirer_reference__in=charges).values_list(
            "acquirer_reference", "id"
        )
    )
    for reference, rows in unknown.items():
        report.discrepancies.append(
            Discrepancy(
                category=Category.REFUND_UNKNOWN_TO_US,
                payment_id=payment_of_charge.get(rows[0].charge),
                detail=f"refund reference {reference!r} of charge {rows[0].charge} is none of "
                "our refunds",
                acquirer_references=tuple(r.acquirer_reference for r in rows),
                acquirer_statuses=tuple(r.status for r in rows),
                acquirer_amounts=tuple(f"{r.amount} {r.currency}" for r in rows),
                refund_id=reference,
            )
        )


def _list_unresolved_operations(
    report: AuditReport,
    payments: dict[str, _Payment],
    refund_records: dict[str, list[AcquirerRefundRecord]],
) -> None:
    """List the audited payments' pending and needs_review captures, voids and refunds as
    unresolved (not discrepancies), a refund with the acquirer's records of it."""
    for chunk in _chunks(list(payments)):
        rows = PaymentOperation.objects.filter(
            payment_id__in=chunk,
            status__in=UNRESOLVED_OPERATION_STATUSES,
        ).values_list("id", "payment_id", "kind", "status", "created_at")
        for operation_id, payment_id, kind, status, created_at in rows:
            held = refund_records.get(operation_id, []) if kind == OperationKind.REFUND else []
            report.unresolved.append(
                Unresolved(
                    payment_id=payment_id,
                    status=status,
                    created_at=_iso(created_at),
                    acquirer_records=len(held),
                    acquirer_statuses=tuple(r.status for r in held),
                    operation_id=operation_id,
                    kind=kind,
                )
            )


def audit_write_csv(report: AuditReport, path: Path) -> Path:
    """Write the discrepancies of ``report`` to ``path`` as CSV (a header row, then one row per
    discrepancy; just the header when clean). Creates the parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for discrepancy in report.discrepancies:
            writer.writerow(discrepancy.as_row())
    return path


def audit_run_record(
    report: AuditReport, *, triggered_by: str, csv_path: Path | str | None = None
) -> AuditRun:
    """Store ``report`` as an :class:`AuditRun` (rows beyond STORED_ROWS_LIMIT only in the CSV)."""
    counts = report.counts
    with transaction.atomic():
        return AuditRun.objects.create(
            ran_at=report.ran_at,
            since=report.since,
            duration_seconds=report.duration_seconds,
            source=report.source[:200],
            triggered_by=triggered_by,
            payments_checked=report.payments_checked,
            records_checked=report.records_checked,
            refunds_checked=report.refunds_checked,
            refund_records_checked=report.refund_records_checked,
            discrepancies_total=len(report.discrepancies),
            unresolved_total=len(report.unresolved),
            discrepancies=[d.as_row() for d in report.discrepancies[:STORED_ROWS_LIMIT]],
            unresolved=[u.as_row() for u in report.unresolved[:STORED_ROWS_LIMIT]],
            csv_path=str(csv_path or ""),
            **{category.value: count for category, count in counts.items()},
        )


def audit_csv_path(ran_at: datetime) -> Path:
    """Where a run's CSV goes by default: ``LEDGER_AUDIT_CSV_DIR`` (``audits/`` in the project
    by default), named after the run's time."""
    directory = getattr(settings, "LEDGER_AUDIT_CSV_DIR", "") or (
        Path(settings.BASE_DIR) / "audits"
    )
    return Path(directory) / f"audit-{ran_at.astimezone(UTC):%Y%m%dT%H%M%SZ}.csv"


def audit_acquirer_run(
    *,
    since: datetime,
    triggered_by: str,
    csv_path: Path | None = None,
    records: AcquirerRecords | None = None,
) -> tuple[AuditReport, AuditRun]:
    """Audit, write the CSV (``csv_path`` or :func:`audit_csv_path`) and record the run."""
    report = audit_acquirer(since=since, records=records)
    path = audit_write_csv(report, csv_path or audit_csv_path(report.ran_at))
    run = audit_run_record(report, triggered_by=triggered_by, csv_path=path)
    if report.clean:
        logger.info(
            "ledger audit since %s: clean (%d payments, %d acquirer records, %d unresolved)",
            _iso(since), report.payments_checked, report.records_checked, len(report.unresolved),
        )  # fmt: skip
    else:
        logger.error(
            "ledger audit since %s: %d discrepancies %s; see %s",
            _iso(since),
            len(report.discrepancies),
            {c.value: n for c, n in report.counts.items() if n},
            path,
        )
    return report, run
