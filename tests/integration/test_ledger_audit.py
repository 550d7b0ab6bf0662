"""The ledger audit against a real sandbox acquirer and PostgreSQL: every discrepancy category,
the clean case, unresolved payments, the CSV, the command's exit code, the task and the admin."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import uuid
from datetime import timedelta
from io import StringIO
from pathlib import Path

import httpx
import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

if not apps.is_installed("ledger"):  # until config lists the app (or with ledger_settings)
    pytest.skip(
        "ledger is not in INSTALLED_APPS: DJANGO_SETTINGS_MODULE=tests.campaigns.ledger_settings",
        allow_module_level=True,
    )

from acquirers.specs import parse_acquirers
from ledger.acquirer_records import (
    AcquirerRecordsError,
    SandboxAcquirerRecords,
)
from ledger.models import AuditRun
from ledger.services import CSV_COLUMNS, Category, audit_acquirer, audit_acquirer_run
from ledger.sources import acquirer_records_from_settings
from ledger.tasks import audit_acquirer_daily
from payments.models import Payment
from tests.factories import PaymentFactory
from tests.support.processes import ROOT, service_env

pytestmark = pytest.mark.django_db(transaction=True)

LEDGER_LOCAL_SETTINGS = "tests.campaigns.ledger_local_settings"


def acquirer_record(sandbox, reference: str, *, amount=1999, currency="EUR", token="tok_visa"):
    """Record an authorization at the sandbox directly (as if someone else had sent it)."""
    response = httpx.post(
        f"{sandbox.url}/charges",
        json={
            "amount": amount,
            "currency": currency,
            "payment_method": token,
            "reference": reference,
        },
        headers={**sandbox.auth_headers(), "Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return response.json()


def paid(merchant_a, token: str = "tok_visa", **body) -> Payment:
    """A payment made through the API (so the sandbox holds its record)."""
    response = merchant_a.create_payment(
        {"amount": 1999, "currency": "EUR", "payment_method": token, **body}
    )
    assert response.status_code == 201, response.content
    return Payment.objects.get(pk=response.json()["id"])


def since_a_minute_ago():
    return timezone.now() - timedelta(minutes=1)


def categories(report) -> dict[str, int]:
    return {category.value: count for category, count in report.counts.items() if count}


@pytest.fixture
def audit_dir(settings, tmp_path) -> Path:
    settings.LEDGER_AUDIT_CSV_DIR = str(tmp_path / "audits")
    return tmp_path / "audits"


# --- categories ----------------------------------------------------------------------------


def test_clean_when_every_payment_matches_its_record(sandbox, merchant_a):
    """Approved and declined payments made through the API match the sandbox: clean."""
    paid(merchant_a)
    paid(merchant_a, "tok_decline")
    report = audit_acquirer(since=since_a_minute_ago())
    assert report.clean
    assert report.payments_checked == 2
    assert report.records_checked == 2
    assert report.payments_by_status == {"succeeded": 1, "declined": 1}


def test_manual_payments_held_and_voided_match_their_approved_record(sandbox, merchant_a):
    """A manual payment's authorization is approved at the acquirer whether it is held
    (``requires_capture``) or voided (``canceled``): clean."""
    paid(merchant_a, capture_method="manual")
    voided = paid(merchant_a, capture_method="manual")
    response = merchant_a.client.post(
        f"/payments/{voided.id}/void", {}, format="json", HTTP_IDEMPOTENCY_KEY="void"
    )
    assert response.status_code == 200, response.content
    report = audit_acquirer(since=since_a_minute_ago())
    assert report.clean, report.discrepancies
    assert report.payments_by_status == {"requires_capture": 1, "canceled": 1}


def test_a_record_of_no_payment_of_ours_is_reported(sandbox, merchant_a):
    """A record whose reference is none of our payments: record_unknown_to_us."""
    paid(merchant_a)
    record = acquirer_record(sandbox, "pay_000000000000000000000000")
    report = audit_acquirer(since=since_a_minute_ago())
    assert categories(report) == {"record_unknown_to_us": 1}
    (finding,) = report.discrepancies
    assert finding.payment_id is None
    assert finding.acquirer_references == (record["id"],)


def test_a_succeeded_payment_without_a_record_is_reported(sandbox, merchant_a):
    """Succeeded (or declined) here, nothing at the acquirer: payment_unknown_to_acquirer."""
    payment = PaymentFactory(merchant=merchant_a.merchant, acquirer_reference="ch_x")
    declined = PaymentFactory(merchant=merchant_a.merchant, status="declined")
    report = audit_acquirer(since=since_a_minute_ago())
    assert categories(report) == {"payment_unknown_to_acquirer": 2}
    assert {d.payment_id for d in report.discrepancies} == {payment.pk, declined.pk}


def test_two_records_for_one_payment_are_reported(sandbox, merchant_a):
    """A second record with the payment id as reference: multiple_records (charged twice)."""
    payment = paid(merchant_a)
    acquirer_record(sandbox, payment.pk)
    report = audit_acquirer(since=since_a_minute_ago())
    assert categories(report) == {"multiple_records": 1}
    (finding,) = report.discrepancies
    assert finding.payment_id == payment.pk
    assert len(finding.acquirer_references) == 2


def test_two_records_of_an_unresolved_payment_are_reported_too(sandbox, merchant_a):
    """Charged twice is a discrepancy whatever our status: a processing payment with two
    records is reported (and listed as unresolved)."""
    payment = PaymentFactory(merchant=merchant_a.merchant, status="processing", amount=1999)
    acquirer_record(sandbox, payment.pk)
    acquirer_record(sandbox, payment.pk)
    report = audit_acquirer(since=since_a_minute_ago())
    assert categories(report) == {"multiple_records": 1}
    assert [u.payment_id for u in report.unresolved] == [payment.pk]


@pytest.mark.parametrize(
    ("our_status", "token", "detail"),
    [
        ("declined", "tok_visa", "declined here, approved at the acquirer"),
        ("succeeded", "tok_decline", "succeeded here, declined at the acquirer"),
        ("failed", "tok_visa", "failed (acquirer_unavailable) here, approved at the acquirer"),
    ],
)
def test_a_status_that_differs_is_reported(sandbox, merchant_a, our_status, token, detail):
    """Ours succeeded/declined/failed against the acquirer's approved/declined: status_mismatch."""
    payment = PaymentFactory(
        merchant=merchant_a.merchant,
        status=our_status,
        amount=1999,
        failure_code="acquirer_unavailable" if our_status == "failed" else None,
    )
    record = acquirer_record(sandbox, payment.pk, token=token)
    Payment.objects.filter(pk=payment.pk).update(acquirer_reference=record["id"])
    report = audit_acquirer(since=since_a_minute_ago())
    assert categories(report) == {"status_mismatch": 1}
    assert report.discrepancies[0].detail == detail


def test_a_failed_payment_without_a_record_is_clean(sandbox, merchant_a):
    """Failed without sending (no record at the acquirer) is what failed means: clean."""
    PaymentFactory(
        merchant=merchant_a.merchant, status="failed", failure_code="acquirer_unavailable"
    )
    assert audit_acquirer(since=since_a_minute_ago()).clean


@pytest.mark.parametrize(("amount", "currency"), [(2000, "EUR"), (1999, "USD")])
def test_an_amount_or_currency_that_differs_is_reported(sandbox, merchant_a, amount, currency):
    """The acquirer recorded another amount or currency: amount_mismatch."""
    payment = PaymentFactory(merchant=merchant_a.merchant, amount=1999, currency="EUR")
    record = acquirer_record(sandbox, payment.pk, amount=amount, currency=currency)
    Payment.objects.filter(pk=payment.pk).update(acquirer_reference=record["id"])
    report = audit_acquirer(since=since_a_minute_ago())
    assert categories(report) == {"amount_mismatch": 1}
    assert report.discrepancies[0].acquirer_amounts == (f"{amount} {currency}",)


def test_a_stored_acquirer_reference_that_differs_is_reported(sandbox, merchant_a):
    """Our acquirer_reference is not the id of the acquirer's record."""
    payment = paid(merchant_a)
    Payment.objects.filter(pk=payment.pk).update(acquirer_reference="ch_someone_else")
    report = audit_acquirer(since=since_a_minute_ago())
    assert categories(report) == {"acquirer_reference_mismatch": 1}


def test_processing_and_needs_review_payments_are_unresolved_not_discrepancies(sandbox, merchant_a):
    """Unknown outcomes are listed apart, with what the acquirer holds; the audit stays clean."""
    processing = PaymentFactory(merchant=merchant_a.merchant, status="processing", amount=1999)
    acquirer_record(sandbox, processing.pk)
    review = PaymentFactory(merchant=merchant_a.merchant, status="needs_review")
    report = audit_acquirer(since=since_a_minute_ago())
    assert report.clean
    assert {(u.payment_id, u.status, u.acquirer_records) for u in report.unresolved} == {
        (processing.pk, "processing", 1),
        (review.pk, "needs_review", 0),
    }


def test_a_payment_older_than_the_window_with_a_record_inside_it_is_matched(sandbox, merchant_a):
    """A late re-send: the payment predates ``since``, its record does not. Matched by id, not
    reported as unknown."""
    old = PaymentFactory(
        merchant=merchant_a.merchant,
        amount=1999,
        created_at=timezone.now() - timedelta(hours=3),
    )
    record = acquirer_record(sandbox, old.pk)
    Payment.objects.filter(pk=old.pk).update(acquirer_reference=record["id"])
    report = audit_acquirer(since=since_a_minute_ago())
    assert report.clean
    assert report.payments_checked == 1


def test_payments_and_records_before_the_window_are_left_out(sandbox, merchant_a):
    """A payment without a record created before ``since`` is not audited."""
    PaymentFactory(merchant=merchant_a.merchant, created_at=timezone.now() - timedelta(hours=3))
    report = audit_acquirer(since=since_a_minute_ago())
    assert report.clean
    assert report.payments_checked == 0


def test_every_category_at_once_is_counted(sandbox, merchant_a):
    """One of each: the counts say so and the discrepancies are sorted by category."""
    acquirer_record(sandbox, "pay_unknown")
    PaymentFactory(merchant=merchant_a.merchant)  # no record
    twice = paid(merchant_a)
    acquirer_record(sandbox, twice.pk)
    wrong_status = PaymentFactory(merchant=merchant_a.merchant, status="declined", amount=1999)
    acquirer_record(sandbox, wrong_status.pk)
    wrong_amount = PaymentFactory(merchant=merchant_a.merchant, amount=5)
    acquirer_record(sandbox, wrong_amount.pk)
    report = audit_acquirer(since=since_a_minute_ago())
    counts = categories(report)
    assert counts["record_unknown_to_us"] == 1
    assert counts["payment_unknown_to_acquirer"] == 1
    assert counts["multiple_records"] == 1
    assert counts["status_mismatch"] == 1
    assert counts["amount_mismatch"] == 1
    order = [d.category for d in report.discrepancies]
    assert order == sorted(order, key=list(Category).index)


# --- the records source --------------------------------------------------------------------


def test_records_are_read_page_by_page(sandbox, merchant_a):
    """The sandbox listing is paged; every record comes back, oldest first."""
    for _ in range(5):
        paid(merchant_a)
    source = SandboxAcquirerRecords(base_url=sandbox.url, api_key=sandbox.api_key, page_size=2)
    records = list(source.records_since(since_a_minute_ago()))
    assert len(records) == 5
    assert [r.created_at for r in records] == sorted(r.created_at for r in records)
    assert all(r.idempotency_key.startswith("authorize-pay_") for r in records)


def test_unreadable_records_raise_without_the_api_key(sandbox):
    """A wrong key (401) or nobody listening: AcquirerRecordsError, the key never in it."""
    wrong = SandboxAcquirerRecords(base_url=sandbox.url, api_key="sk_wrong_secret_123")
    with pytest.raises(AcquirerRecordsError) as refused:
        list(wrong.records_since(since_a_minute_ago()))
    assert "401" in str(refused.value)
    assert "sk_wrong_secret_123" not in str(refused.value)
    nobody = SandboxAcquirerRecords(base_url="http://127.0.0.1:9", api_key="sk_wrong_secret_123")
    with pytest.raises(AcquirerRecordsError) as unreachable:
        list(nobody.records_since(since_a_minute_ago()))
    assert "sk_wrong_secret_123" not in str(unreachable.value)


def test_the_source_comes_from_settings(sandbox):
    """By default the sandbox listing at ACQUIRER_BASE_URL with ACQUIRER_API_KEY."""
    source = acquirer_records_from_settings()
    assert isinstance(source, SandboxAcquirerRecords)
    assert sandbox.url in source.name


# --- CSV, stored run, command, task ---------------------------------------------------------


def test_csv_has_a_header_and_one_row_per_discrepancy(sandbox, merchant_a, tmp_path):
    """The CSV columns, and the row of a double record."""
    payment = paid(merchant_a)
    acquirer_record(sandbox, payment.pk)
    _report, run = audit_acquirer_run(
        since=since_a_minute_ago(), triggered_by="test", csv_path=tmp_path / "a.csv"
    )
    with (tmp_path / "a.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert len(rows) == 1
    row = rows[0]
    assert row["category"] == "multiple_records"
    assert row["payment_id"] == payment.pk
    assert row["our_status"] == "succeeded"
    assert row["our_amount"] == "1999"
    assert row["acquirer_records"] == "2"
    assert row["acquirer_statuses"] == "approved;approved"
    assert row["acquirer_amounts"] == "1999 EUR;1999 EUR"
    assert run.csv_path == str(tmp_path / "a.csv")


def test_csv_of_a_clean_audit_is_just_the_header(sandbox, merchant_a, tmp_path):
    """Clean: the file exists with the header only."""
    paid(merchant_a)
    audit_acquirer_run(since=since_a_minute_ago(), triggered_by="test", csv_path=tmp_path / "c.csv")
    assert (tmp_path / "c.csv").read_text().splitlines() == [",".join(CSV_COLUMNS)]


def test_the_run_is_stored_with_its_counts_and_rows(sandbox, merchant_a, tmp_path):
    """AuditRun: window, counts per category, discrepancy rows as JSON, unresolved."""
    PaymentFactory(merchant=merchant_a.merchant)
    PaymentFactory(merchant=merchant_a.merchant, status="processing")
    since = since_a_minute_ago()
    audit_acquirer_run(since=since, triggered_by="test", csv_path=tmp_path / "r.csv")
    run = AuditRun.objects.get()
    assert run.since == since
    assert run.payment_unknown_to_acquirer == 1
    assert run.discrepancies_total == 1
    assert run.unresolved_total == 1
    assert run.discrepancies[0]["category"] == "payment_unknown_to_acquirer"
    assert run.unresolved[0]["status"] == "processing"
    assert not run.clean


def test_command_clean_exits_0_and_prints_the_summary(sandbox, merchant_a, tmp_path):
    """Clean: exit status 0 (no SystemExit), a summary, the CSV path, a stored run."""
    paid(merchant_a)
    out = StringIO()
    call_command(
        "audit_acquirer", "--since-hours", "1", "--csv", str(tmp_path / "x.csv"), stdout=out
    )
    text = out.getvalue()
    assert "result: clean" in text
    assert "payments checked: 1" in text
    assert f"csv: {tmp_path / 'x.csv'}" in text
    assert AuditRun.objects.get().triggered_by == "command"


def test_command_with_discrepancies_exits_1(sandbox, merchant_a, tmp_path):
    """Any discrepancy: exit status 1, after printing the summary and writing the CSV."""
    PaymentFactory(merchant=merchant_a.merchant)
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("audit_acquirer", "--csv", str(tmp_path / "y.csv"), stdout=out)
    assert exited.value.code == 1
    assert "payment_unknown_to_acquirer" in out.getvalue()
    assert "result: 1 discrepancies" in out.getvalue()
    assert len((tmp_path / "y.csv").read_text().splitlines()) == 2


def test_command_since_takes_an_iso_time(sandbox, merchant_a, tmp_path):
    """--since with an ISO 8601 time: older payments are outside the window."""
    PaymentFactory(merchant=merchant_a.merchant, created_at=timezone.now() - timedelta(hours=2))
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    out = StringIO()
    call_command("audit_acquirer", "--since", since, "--csv", str(tmp_path / "z.csv"), stdout=out)
    assert "payments checked: 0" in out.getvalue()


def test_command_json_prints_the_whole_report(sandbox, merchant_a, tmp_path, audit_dir):
    """--json: counts, discrepancies and the CSV path (default directory) as JSON."""
    PaymentFactory(merchant=merchant_a.merchant, status="processing")
    out = StringIO()
    call_command("audit_acquirer", "--json", "--no-record", stdout=out)
    report = json.loads(out.getvalue())
    assert report["clean"] is True
    assert report["counts"] == {category.value: 0 for category in Category}
    assert len(report["unresolved"]) == 1
    assert report["csv"].startswith(str(audit_dir))
    assert not AuditRun.objects.exists()


def test_command_exits_2_when_the_records_cannot_be_read(settings, tmp_path):
    """Nobody listening at the acquirer: status 2 and no run stored (a partial audit lies)."""
    settings.ACQUIRER_BASE_URL = "http://127.0.0.1:9"
    with pytest.raises(SystemExit) as exited:
        _run_from_argv(["audit_acquirer", "--csv", str(tmp_path / "n.csv")])
    assert exited.value.code == 2
    assert not AuditRun.objects.exists()


def _run_from_argv(argv: list[str]) -> None:
    """Run a command as manage.py does, so CommandError.returncode becomes the exit status."""
    from django.core.management import ManagementUtility

    ManagementUtility(["manage.py", *argv]).execute()


@pytest.mark.django_db(transaction=True)
def test_manage_py_exit_status_is_1_with_discrepancies_and_0_without(sandbox, merchant_a, tmp_path):
    """The real process: `manage.py audit_acquirer` exits 1, then 0 once the window is clean."""
    payment = PaymentFactory(merchant=merchant_a.merchant, amount=1999)
    env = service_env(
        DJANGO_SETTINGS_MODULE=LEDGER_LOCAL_SETTINGS,
        ACQUIRER_BASE_URL=sandbox.url,
        ACQUIRER_API_KEY=sandbox.api_key,
    )
    command = [sys.executable, "manage.py", "audit_acquirer", "--since-hours", "1"]
    dirty = subprocess.run(
        [*command, "--csv", str(tmp_path / "1.csv")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert dirty.returncode == 1, dirty.stderr
    assert "payment_unknown_to_acquirer" in dirty.stdout
    record = acquirer_record(sandbox, payment.pk)
    Payment.objects.filter(pk=payment.pk).update(acquirer_reference=record["id"])
    clean = subprocess.run(
        [*command, "--csv", str(tmp_path / "0.csv")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "result: clean" in clean.stdout


def test_daily_task_stores_a_run_and_returns_the_discrepancy_count(sandbox, merchant_a, audit_dir):
    """The beat task audits the last 25 h, writes its CSV in the audits directory, records it."""
    PaymentFactory(merchant=merchant_a.merchant, created_at=timezone.now() - timedelta(hours=24))
    assert audit_acquirer_daily() == 1
    run = AuditRun.objects.get()
    assert run.triggered_by == "task"
    assert (timezone.now() - run.since) > timedelta(hours=24, minutes=59)
    assert Path(run.csv_path).parent == audit_dir
    assert Path(run.csv_path).exists()


# --- admin ----------------------------------------------------------------------------------


@pytest.fixture
def admin_user_client(client):
    user = User.objects.create_superuser("root", password="pw")
    client.force_login(user)
    return client


def test_admin_shows_the_last_result_read_only(sandbox, merchant_a, admin_user_client, tmp_path):
    """The list (newest first), the run's page with its rows, /latest/; no add or delete."""
    payment = PaymentFactory(merchant=merchant_a.merchant)
    audit_acquirer_run(since=since_a_minute_ago(), triggered_by="test", csv_path=tmp_path / "1.csv")
    paid(merchant_a)
    Payment.objects.filter(pk=payment.pk).delete()
    audit_acquirer_run(since=since_a_minute_ago(), triggered_by="test", csv_path=tmp_path / "2.csv")
    first, last = AuditRun.objects.order_by("ran_at")
    listing = admin_user_client.get("/admin/ledger/auditrun/")
    assert listing.status_code == 200
    assert list(listing.context["cl"].result_list) == [last, first]
    latest = admin_user_client.get("/admin/ledger/auditrun/latest/")
    assert latest.status_code == 302
    assert latest["Location"] == f"/admin/ledger/auditrun/{last.pk}/change/"
    page = admin_user_client.get(f"/admin/ledger/auditrun/{first.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert payment.pk in html
    assert "payment_unknown_to_acquirer" in html
    assert admin_user_client.get("/admin/ledger/auditrun/add/").status_code == 403
    assert admin_user_client.post(f"/admin/ledger/auditrun/{first.pk}/delete/").status_code == 403


def test_support_role_may_view_audit_runs(sandbox, client, tmp_path):
    """The support group (roles migration) can open the runs; a staff user without it cannot."""
    import importlib

    from django.apps import apps
    from django.contrib.auth.models import Group

    importlib.import_module("payments.migrations.0004_operations_roles").create_roles(apps, None)
    importlib.import_module("ledger.migrations.0002_audit_view_roles").grant_view(apps, None)
    audit_acquirer_run(since=since_a_minute_ago(), triggered_by="test", csv_path=tmp_path / "s.csv")
    support = User.objects.create_user("support-1", password="pw", is_staff=True)
    support.groups.add(Group.objects.get(name="support"))
    client.force_login(support)
    assert client.get("/admin/ledger/auditrun/latest/").status_code == 302
    assert client.get("/admin/ledger/auditrun/").status_code == 200
    nobody = User.objects.create_user("staff-1", password="pw", is_staff=True)
    client.force_login(nobody)
    assert client.get("/admin/ledger/auditrun/").status_code == 403
    assert client.get("/admin/ledger/auditrun/latest/").status_code == 403


def test_a_stripe_acquirer_is_audited_from_its_listings_and_one_unreadable_fails_the_audit(
    settings, sandbox, merchant_a
):
    """A Stripe acquirer beside the sandbox has a source of its records now (its listings,
    ledger/stripe_records.py): when its address answers nothing, the audit fails as a whole
    rather than reporting the sandbox alone as if Stripe had been checked; the message names
    neither the key nor a body. The sandbox alone is still audited on its own."""
    settings.ACQUIRERS = parse_acquirers(
        json.dumps(
            [
                {"name": "sandbox", "base_url": sandbox.url, "api_key": sandbox.api_key},
                {
                    "name": "stripe-eu",
                    "type": "stripe",
                    "base_url": "http://127.0.0.1:9",
                    "api_key_env": "STRIPE_KEY",
                    "api_version": "2024-06-20",
                },
            ]
        ),
        environ={"STRIPE_KEY": "sk_test_51NeverShownInTheReport"},
    )
    paid(merchant_a)
    with pytest.raises(AcquirerRecordsError) as failed:
        audit_acquirer(since=since_a_minute_ago())
    assert str(failed.value) == (
        "Could not read the listing /v1/payment_intents of http://127.0.0.1:9: ConnectError."
    )
    alone = audit_acquirer(since=since_a_minute_ago(), acquirer="sandbox")
    assert alone.clean, [d.as_row() for d in alone.discrepancies]
    assert (alone.payments_checked, alone.records_checked, alone.not_audited) == (1, 1, [])
