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
BREAKER_MIGRATION = importlib.import_module("payments.migrations.0005_breaker_operator_permission")


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


#: JavaScript: does an element's content fit its box (no horizontal scrolling, nothing cut)?
FITS = "el => el.scrollWidth <= el.clientWidth + 1"
#: JavaScript: the number of lines an element's text takes.
LINES = """el => { const range = document.createRange(); range.selectNodeContents(el);
  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size; }"""
#: JavaScript: is an element inside the visible box of its closest `selector` ancestor?
INSIDE = """(el, selector) => { const box = el.closest(selector).getBoundingClientRect();
  const r = el.getBoundingClientRect();
  return r.left >= box.left - 1 && r.right <= box.right + 1; }"""


def test_console_layout_at_1400_px(live_server, sync_playwright, screenshots):
    """At 1400 px: the payments list shows every column (its date columns included) without
    wrapping an amount; the attempts table shows its wait column whole; a breaker's actions
    ("Force open" with its peers) sit on one line."""
    shots = screenshots.parent / "admin_layout"
    shots.mkdir(exist_ok=True)
    ROLES_MIGRATION.create_roles(apps, None)
    BREAKER_MIGRATION.grant_operate_breaker(apps, None)
    operator = User.objects.create_user("omar", password="correct-horse-2", is_staff=True)
    operator.groups.add(Group.objects.get(name="operator"))
    payment = PaymentFactory(status="succeeded", amount=123_456_789, currency="EUR")
    PaymentFactory(status="needs_review", amount=1234, currency="KWD", reference="ord-2026-0042")
    step = {
        "attempt": 1, "sent": True, "started_at": 1_796_000_000.123, "elapsed": 3.016,
        "outcome": "ResponseTimeoutError", "error": "ResponseTimeoutError", "decision": "retry",
        "wait": 0.187, "wait_source": "retry-after", "budget_retries": 99.0,
        "gate_remaining": 12.5, "breaker_state": "half_open",
    }  # fmt: skip
    PaymentEvent.objects.create(
        payment=payment, type="acquirer_attempt", created_at=payment.created_at,
        data={"operation": "authorize", "outcome": "approved", "status_code": 201,
              "attempt_log": [step, {**step, "attempt": 2, "outcome": "approved", "error": None,
                                     "status_code": 201, "decision": "return"}]},
    )  # fmt: skip

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(15_000)
            page.goto(f"{live_server.url}/admin/login/?next=/admin/payments/payment/")
            page.fill("#id_username", "omar")
            page.fill("#id_password", "correct-horse-2")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/payments/payment/")
            page.screenshot(path=str(shots / "10-list-1400.png"), full_page=True)
            results = page.locator("#changelist .results")
            assert results.evaluate(FITS), "the payments list scrolls: columns are hidden"
            headers = page.locator("#result_list thead th")
            assert {"CREATED (UTC)", "UPDATED (UTC)"} <= {
                text.strip().upper() for text in headers.all_inner_texts()
            }
            for index in range(headers.count()):
                assert headers.nth(index).evaluate(INSIDE, ".results")
            amounts = page.locator("#result_list td.field-display_amount")
            assert [amounts.nth(i).evaluate(LINES) for i in range(amounts.count())] == [1, 1]

            page.goto(f"{live_server.url}/admin/payments/payment/{quote(payment.pk)}/change/")
            table = page.locator("table.payment-attempts")
            page.screenshot(path=str(shots / "11-attempts-1400.png"), full_page=True)
            assert table.locator("tbody tr").count() == 2
            wait = table.locator("thead th", has_text="wait").first
            assert wait.evaluate(INSIDE, "fieldset"), "the wait column is cut off"
            assert table.locator("thead th").last.evaluate(INSIDE, "fieldset")

            page.goto(f"{live_server.url}/admin/payments/resilience/")
            page.screenshot(path=str(shots / "12-resilience-1400.png"), full_page=True)
            actions = page.locator("#breaker-authorize .breaker-action")
            labels = actions.all_inner_texts()
            assert "Force open" in " ".join(labels) and len(labels) >= 3
            tops = {round(actions.nth(i).bounding_box()["y"]) for i in range(actions.count())}
            assert len(tops) == 1, f"the actions {labels} wrap onto {len(tops)} lines"
        finally:
            browser.close()
