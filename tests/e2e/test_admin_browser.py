"""The operations console in a real browser: Debian's Chromium, headless, driven by Playwright.

Needs the ``playwright`` Python package and ``/usr/bin/chromium`` (Debian's ``chromium``
package; Playwright's own browser download is not used). The test installs nothing: without
them it is skipped, except under CI (``CI=true``), where it fails so a missing install step is
seen. Screenshots go to ``$TEST_ARTIFACTS_DIR/admin_browser`` (default: the test's tmp dir).
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User

from payments.models import PaymentEvent
from tests.factories import PaymentFactory

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROLES_MIGRATION = importlib.import_module("payments.migrations.0004_operations_roles")


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI must install it: see docs/operations.md)")
    pytest.skip(reason)


@pytest.fixture
def sync_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed")
    if not CHROMIUM.exists():
        _missing(f"{CHROMIUM} is missing (apt-get install chromium)")
    return sync_playwright


@pytest.fixture
def screenshots(tmp_path) -> Path:
    root = Path(os.environ.get("TEST_ARTIFACTS_DIR", tmp_path))
    folder = root / "admin_browser"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_operator_reconciles_a_needs_review_payment(live_server, sync_playwright, screenshots):
    """Log in as an operator, filter needs_review, open the payment, Reconcile now with a note,
    and see the new event in its timeline."""
    # Everything touching the database happens outside Playwright's event loop.
    ROLES_MIGRATION.create_roles(apps, None)
    operator = User.objects.create_user("olga", password="correct-horse-1", is_staff=True)
    operator.groups.add(Group.objects.get(name="operator"))
    stuck = PaymentFactory(status="needs_review", amount=1234, currency="KWD", reference="ord-9")
    PaymentFactory(status="succeeded", reference="ord-10")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(15_000)
            page.goto(f"{live_server.url}/admin/login/?next=/admin/payments/payment/")
            page.fill("#id_username", "olga")
            page.fill("#id_password", "correct-horse-1")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/payments/payment/")
            page.screenshot(path=str(screenshots / "01-payments.png"), full_page=True)

            page.click("#changelist-filter >> text=Needs review")
            page.wait_for_url(re.compile(r"status=needs_review"))
            rows = page.locator("#result_list tbody tr")
            assert rows.count() == 1
            assert "1.234 KWD" in rows.first.inner_text()
            page.screenshot(path=str(screenshots / "02-needs-review.png"), full_page=True)

            page.click(f"#result_list >> text={stuck.pk}")
            page.wait_for_url(re.compile(rf"/{quote(stuck.pk)}/change/"))
            page.click("a.payment-action >> text=Reconcile now")
            page.wait_for_url(re.compile(rf"/{quote(stuck.pk)}/reconcile/$"))
            page.fill("#id_note", "Acquirer says it is still pending; ticket OPS-7")
            page.screenshot(path=str(screenshots / "03-reconcile-form.png"), full_page=True)
            page.click("input[name=confirm]")
            page.wait_for_url(re.compile(rf"/{quote(stuck.pk)}/change/$"))

            timeline = page.locator("table.payment-timeline").inner_text()
            assert "operator_reconcile_requested" in timeline
            assert "olga" in timeline and "ticket OPS-7" in timeline
            page.screenshot(path=str(screenshots / "04-event-recorded.png"), full_page=True)
        finally:
            browser.close()

    event = PaymentEvent.objects.get(payment=stuck, type="operator_reconcile_requested")
    assert event.data == {
        "operator": "olga",
        "note": "Acquirer says it is still pending; ticket OPS-7",
    }
    assert sorted(p.name for p in screenshots.iterdir()) == [
        "01-payments.png",
        "02-needs-review.png",
        "03-reconcile-form.png",
        "04-event-recorded.png",
    ]
