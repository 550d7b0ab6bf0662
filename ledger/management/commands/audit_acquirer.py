"""``python manage.py audit_acquirer [--since ISO8601 | --since-hours N] [--csv PATH] [--json]``.

Compares the payments created since then with the acquirer's records (``ledger.services``),
prints a summary (or the whole report as JSON with ``--json``), writes every discrepancy to a
CSV file (``--csv``, else ``LEDGER_AUDIT_CSV_DIR/audit-<time>.csv``), stores the run (shown in
the admin; ``--no-record`` skips that) and exits with status 0 when clean, 1 when there are
discrepancies, 2 when the acquirer's records could not be read.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ledger.acquirer_records import AcquirerRecordsError
from ledger.services import (
    audit_acquirer,
    audit_csv_path,
    audit_run_record,
    audit_write_csv,
)

DEFAULT_SINCE_HOURS = 24.0


def _since_value(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"--since: {text!r} is not an ISO 8601 time.", returncode=2) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.get_current_timezone())
    return moment


class Command(BaseCommand):
    help = (
        "Compare our payments with the acquirer's records; print a summary, write a CSV of the "
        "discrepancies; exit 1 when there are any (2 when the records cannot be read)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        window = parser.add_mutually_exclusive_group()
        window.add_argument(
            "--since",
            metavar="ISO8601",
            help="Audit payments created from this time (UTC unless an offset is given).",
        )
        window.add_argument(
            "--since-hours",
            type=float,
            metavar="N",
            help=f"Audit the last N hours (default {DEFAULT_SINCE_HOURS:g}).",
        )
        parser.add_argument(
            "--csv", metavar="PATH", help="Write the discrepancies here (default: audits dir)."
        )
        parser.add_argument(
            "--json", action="store_true", help="Print the whole report as JSON instead."
        )
        parser.add_argument(
            "--no-record", action="store_true", help="Do not store the run for the admin."
        )

    def handle(self, *args, **options) -> None:
        if options["since"]:
            since = _since_value(options["since"])
        else:
            hours = options["since_hours"]
            hours = DEFAULT_SINCE_HOURS if hours is None else hours
            if hours <= 0:
                raise CommandError("--since-hours must be > 0.", returncode=2)
            since = timezone.now() - timedelta(hours=hours)
        try:
            report = audit_acquirer(since=since)
        except AcquirerRecordsError as exc:
            raise CommandError(f"audit not run: {exc}", returncode=2) from exc
        path = Path(options["csv"]) if options["csv"] else audit_csv_path(report.ran_at)
        audit_write_csv(report, path)
        if not options["no_record"]:
            audit_run_record(report, triggered_by="command", csv_path=path)
        if options["json"]:
            self.stdout.write(json.dumps({**report.as_json(), "csv": str(path)}, indent=1))
        else:
            for line in report.summary_lines():
                self.stdout.write(line)
            self.stdout.write(f"csv: {path}")
        if not report.clean:
            sys.stdout.flush()
            self.stdout.flush()
            sys.exit(1)
