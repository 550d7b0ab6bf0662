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

Payments still ``processing`` or in ``needs_review`` are not discrepancies: their outcome is
not known yet (reconciliation, or a human, decides it). They are listed as *unresolved*, with
what the acquirer holds for them, so an operator resolving one sees it. The two checks that do
not depend on knowing the outcome (several records, wrong amount) apply to them too.

A payment created before ``since`` whose record falls in the window (a late re-send by
reconciliation) is looked up by its id and compared, so a window boundary never invents an
unknown record. Records are read from ``since - skew`` to absorb clock differences between
the acquirer and us; an unknown record older than ``since`` is outside the window and ignored.

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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.acquirer_records import AcquirerRecord, AcquirerRecords, acquirer_records_from_settings
from ledger.models import STORED_ROWS_LIMIT, AuditRun
from payments.models import Payment, PaymentStatus

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


#: What each category means, for summaries and the admin.
CATEGORY_LABELS: dict[Category, str] = {
    Category.RECORD_UNKNOWN_TO_US: "acquirer records of no payment of ours",
    Category.PAYMENT_UNKNOWN_TO_ACQUIRER: "succeeded/declined payments the acquirer does not know",
    Category.MULTIPLE_RECORDS: "payments with more than one acquirer record",
    Category.STATUS_MISMATCH: "status differs",
    Category.AMOUNT_MISMATCH: "amount or currency differs",
    Category.ACQUIRER_REFERENCE_MISMATCH: "stored acquirer reference differs",
}

#: The acquirer status each final status of ours must have (None: no record at all). A manual
#: payment's authorization is approved whatever its capture state: held, being captured or
#: voided, or voided.
EXPECTED_RECORD_STATUS: dict[str, str | None] = {
    PaymentStatus.SUCCEEDED: "approved",
    PaymentStatus.DECLINED: "declined",
    PaymentStatus.FAILED: None,
    PaymentStatus.REQUIRES_CAPTURE: "approved",
    PaymentStatus.CAPTURE_PENDING: "approved",
    PaymentStatus.VOID_PENDING: "approved",
    PaymentStatus.CANCELED: "approved",
}
UNRESOLVED_STATUSES = (PaymentStatus.PROCESSING, PaymentStatus.NEEDS_REVIEW)

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


@dataclass(frozen=True)
class Discrepancy:
    """One finding. Fields of ours are None for a record unknown to us."""

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
    """A payment whose outcome is not known yet, with what the acquirer holds for it."""

    payment_id: str
    status: str
    created_at: str
    acquirer_records: int
    acquirer_statuses: tuple[str, ...] = ()

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
    payments_by_status: dict[str, int] = field(default_factory=dict)
    discrepancies: list[Discrepancy] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)
    duration_seconds: float = 0.0

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
            "payments_by_status": dict(sorted(self.payments_by_status.items())),
            "counts": {category.value: count for category, count in self.counts.items()},
            "discrepancies_total": len(self.discrepancies),
            "clean": self.clean,
            "discrepancies": [item.as_row() for item in self.discrepancies],
            "unresolved": [item.as_row() for item in self.unresolved],
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
)


def _payments(queryset) -> Iterable[_Payment]:
    for values in queryset.values_list(*_PAYMENT_FIELDS).iterator(chunk_size=2000):
        yield _Payment(*values)


def _compare(payment: _Payment, records: list[AcquirerRecord]) -> list[Discrepancy]:
    """The discrepancies of one payment of ours with its records (maybe none)."""

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
    return found


def audit_acquirer(
    *,
    since: datetime,
    records: AcquirerRecords | None = None,
    clock: Callable[[], datetime] = timezone.now,
    skew: timedelta = DEFAULT_SKEW,
) -> AuditReport:
    """Compare the payments created since ``since`` (aware) with the acquirer's records.

    ``records`` is the source (:func:`acquirer_records_from_settings` by default). Reads only;
    writes nothing. Raises :class:`ledger.acquirer_records.AcquirerRecordsError` when the
    records cannot be read.
    """
    if since.tzinfo is None:
        raise ValueError("since must be timezone-aware")
    started = time.monotonic()
    source = records if records is not None else acquirer_records_from_settings()
    report = AuditReport(since=since, ran_at=clock(), source=source.name)

    by_reference: dict[str, list[AcquirerRecord]] = defaultdict(list)
    for record in source.records_since(since - skew):
        by_reference[record.reference].append(record)
    report.records_checked = sum(
        1 for records_ in by_reference.values() for r in records_ if r.created_at >= since
    )

    payments: dict[str, _Payment] = {
        p.id: p for p in _payments(Payment.objects.filter(created_at__gte=since))
    }
    outside = [reference for reference in by_reference if reference not in payments]
    for start in range(0, len(outside), _ID_CHUNK):
        chunk = outside[start : start + _ID_CHUNK]
        payments.update((p.id, p) for p in _payments(Payment.objects.filter(id__in=chunk)))

    by_status: dict[str, int] = defaultdict(int)
    for payment in payments.values():
        records_ = by_reference.get(payment.id, [])
        by_status[payment.status] += 1
        report.discrepancies.extend(_compare(payment, records_))
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
    report.payments_checked = len(payments)
    report.payments_by_status = dict(by_status)
    report.discrepancies.sort(key=lambda d: (list(Category).index(d.category), d.payment_id or ""))
    report.unresolved.sort(key=lambda u: (u.created_at, u.payment_id))
    report.duration_seconds = time.monotonic() - started
    return report


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
