"""The operations console for payments: list, filters, searches, detail, actions, query bounds."""

from __future__ import annotations

import importlib
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.admin import CappedCountPaginator
from idempotency.models import IdempotencyKey
from payments.models import Payment, PaymentEvent
from tests.factories import MerchantFactory, PaymentFactory
from tests.support.api import PAYMENT_BODY
from tests.support.processes import ROOT

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/payments/payment/"
ROLES_MIGRATION = importlib.import_module("payments.migrations.0004_operations_roles")


def detail_url(payment: Payment) -> str:
    return f"{LIST_URL}{quote(payment.pk)}/change/"


def staff_client(client, role: str):
    """A logged-in staff user in ``role`` (the groups come from the roles data migration)."""
    ROLES_MIGRATION.create_roles(apps, None)
    user = User.objects.create_user(f"{role}-1", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    return client


@pytest.fixture
def operator(client):
    return staff_client(client, "operator")


@pytest.fixture
def support(client):
    return staff_client(client, "support")


def needs_review_payment(**kwargs) -> Payment:
    """A needs_review payment with a completed idempotency key holding the 202."""
    merchant = kwargs.pop("merchant", None) or MerchantFactory()
    now = timezone.now()
    key = IdempotencyKey.objects.create(
        merchant=merchant, key=f"key-{now.timestamp()}", method="POST", route="/payments",
        request_fingerprint="f" * 64, status="completed", response_status=202,
        response_body=b"{}", created_at=now, completed_at=now, expires_at=now + timedelta(days=1),
    )  # fmt: skip
    return PaymentFactory(merchant=merchant, status="needs_review", idempotency_key=key, **kwargs)


def listed_ids(response) -> set[str]:
    return {p.pk for p in response.context["cl"].result_list}


# --- list ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [(1999, "EUR", "19.99 EUR"), (500, "JPY", "500 JPY"), (1234, "KWD", "1.234 KWD")],
)
def test_list_formats_amounts_with_the_currency_exponent(support, amount, currency, shown):
    """1999 EUR -> 19.99, 500 JPY -> 500, 1234 KWD -> 1.234."""
    PaymentFactory(amount=amount, currency=currency)
    assert shown in support.get(LIST_URL).content.decode()


def test_list_shows_the_decline_or_failure_code(support):
    """The code column holds the decline code (or the failure code)."""
    PaymentFactory(status="declined", decline_code="insufficient_funds")
    PaymentFactory(status="failed", failure_code="acquirer_rejected")
    page = support.get(LIST_URL).content.decode()
    assert "insufficient_funds" in page and "acquirer_rejected" in page


def test_needs_review_is_the_first_status_filter(support):
    """The status filter lists needs_review (and stuck processing) before the others."""
    filters = support.get(LIST_URL).context["cl"].filter_specs
    status = next(f for f in filters if f.title == "status")
    assert [value for value, _ in status.lookup_choices][:2] == ["needs_review", "stuck"]


def test_needs_review_banner_counts_and_links_them(support):
    """The list page says how many payments need review and links the filter."""
    needs_review_payment()
    needs_review_payment()
    page = support.get(LIST_URL).content.decode()
    assert 'id="needs-review-banner"' in page and "2 payments need review" in page
    assert "?status=needs_review" in page


def test_status_filter_lists_only_that_status(support):
    """?status=needs_review lists needs_review payments only."""
    wanted = needs_review_payment()
    PaymentFactory(status="succeeded")
    assert listed_ids(support.get(LIST_URL, {"status": "needs_review"})) == {wanted.pk}


def test_stuck_filter_lists_old_processing_payments(support):
    """ "Processing, stuck" lists processing payments older than 15 minutes only."""
    old = PaymentFactory(status="processing", created_at=timezone.now() - timedelta(hours=1))
    PaymentFactory(status="processing")
    assert listed_ids(support.get(LIST_URL, {"status": "stuck"})) == {old.pk}


def test_merchant_filter_lists_that_merchants_payments(support):
    """?merchant__id__exact= lists one merchant's payments."""
    wanted = PaymentFactory()
    PaymentFactory()
    response = support.get(LIST_URL, {"merchant__id__exact": wanted.merchant_id})
    assert listed_ids(response) == {wanted.pk}


def test_currency_filter_lists_that_currency(support):
    """?currency=JPY lists JPY payments only."""
    wanted = PaymentFactory(currency="JPY", amount=500)
    PaymentFactory(currency="EUR")
    assert listed_ids(support.get(LIST_URL, {"currency": "JPY"})) == {wanted.pk}


def test_created_date_filter_lists_recent_payments(support):
    """The created-date filter (past 7 days) leaves older payments out."""
    recent = PaymentFactory()
    PaymentFactory(created_at=timezone.now() - timedelta(days=30))
    filters = support.get(LIST_URL).context["cl"].filter_specs
    created = next(f for f in filters if f.title == "created at")
    past_week = next(params for title, params in created.links if title == "Past 7 days")
    response = support.get(LIST_URL, past_week)
    assert listed_ids(response) == {recent.pk}


@pytest.mark.parametrize("field", ["id", "reference", "acquirer_reference", "idempotency_key"])
def test_search_finds_a_payment_by_exact_value(support, field):
    """The search box finds a payment by id, reference, acquirer reference or idempotency key."""
    payment = needs_review_payment(reference="order-77", acquirer_reference="ch_77")
    PaymentFactory(reference="order-78")
    term = {
        "id": payment.pk,
        "reference": "order-77",
        "acquirer_reference": "ch_77",
        "idempotency_key": payment.idempotency_key.key,
    }[field]
    assert listed_ids(support.get(LIST_URL, {"q": term})) == {payment.pk}


def test_search_is_exact_not_a_substring(support):
    """A prefix of a reference finds nothing (exact look-ups only: they use indexes)."""
    PaymentFactory(reference="order-77")
    assert listed_ids(support.get(LIST_URL, {"q": "order-7"})) == set()


def test_capped_count_reads_plus_and_never_counts_the_whole_table(support, monkeypatch):
    """Past the cap the page says "N+" and every COUNT query carries a LIMIT."""
    monkeypatch.setattr(CappedCountPaginator, "cap", 3)
    PaymentFactory.create_batch(5)
    with CaptureQueriesContext(connection) as queries:
        page = support.get(LIST_URL).content.decode()
    assert "3+ payments" in page
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT" in sql.upper() for sql in counts)


@pytest.mark.parametrize(
    "params",
    [{}, {"status": "needs_review"}, {"currency": "EUR", "status": "stuck"}, {"q": "order-1"}],
    ids=["list", "status", "currency+stuck", "search"],
)
def test_list_runs_a_bounded_number_of_queries(support, django_assert_max_num_queries, params):
    """Each list page, filter and search runs at most 10 queries, however many payments."""
    merchants = MerchantFactory.create_batch(3)
    for i in range(60):
        PaymentFactory(merchant=merchants[i % 3], reference=f"order-{i}")
    with django_assert_max_num_queries(10):
        assert support.get(LIST_URL, params).status_code == 200


def test_list_query_count_does_not_grow_with_rows(support):
    """Ten payments or sixty: the same number of queries (related rows come in the same one)."""
    PaymentFactory.create_batch(10)
    with CaptureQueriesContext(connection) as few:
        support.get(LIST_URL)
    PaymentFactory.create_batch(50)
    with CaptureQueriesContext(connection) as many:
        support.get(LIST_URL)
    assert len(many) == len(few)


# --- detail --------------------------------------------------------------------------------


def test_detail_is_read_only_for_everyone(operator):
    """No input for amount or status, and a POST to the change page is refused."""
    payment = PaymentFactory(amount=1999)
    page = operator.get(detail_url(payment)).content.decode()
    assert 'name="amount"' not in page and 'name="status"' not in page
    assert operator.post(detail_url(payment), {"amount": 1, "status": "failed"}).status_code == 403
    assert Payment.objects.get(pk=payment.pk).amount == 1999


def test_payments_cannot_be_added_or_deleted(operator):
    """The add and delete pages are refused."""
    payment = PaymentFactory()
    assert operator.get(f"{LIST_URL}add/").status_code == 403
    assert (
        operator.post(f"{LIST_URL}{quote(payment.pk)}/delete/", {"post": "yes"}).status_code == 403
    )


def test_detail_shows_each_acquirer_attempt(support):
    """Attempts show status code, error class, elapsed time, the chosen wait and its source."""
    payment = PaymentFactory(status="processing")
    PaymentEvent.objects.create(
        payment=payment, type="acquirer_attempt", created_at=timezone.now(),
        data={"operation": "authorize", "outcome": "unknown", "error": "ResponseTimeoutError",
              "status_code": 503, "elapsed_seconds": 3.004, "retry_after_seconds": 7,
              "wait_source": "retry-after"},
    )  # fmt: skip
    page = support.get(detail_url(payment)).content.decode()
    for shown in ("ResponseTimeoutError", "503", "3.004 s", "7 s", "retry-after", "authorize"):
        assert shown in page


def test_detail_shows_the_event_timeline_with_the_operator(support):
    """Every event is listed with its status change and who did it."""
    payment = needs_review_payment()
    PaymentEvent.objects.create(
        payment=payment, type="resolved_by_operator", from_status="needs_review",
        to_status="succeeded", created_at=timezone.now(),
        data={"operator": "alice", "note": "seen at <acquirer>"},
    )  # fmt: skip
    page = support.get(detail_url(payment)).content.decode()
    assert "resolved_by_operator" in page and "needs_review → succeeded" in page
    assert "alice" in page and "seen at &lt;acquirer&gt;" in page


def test_detail_runs_a_bounded_number_of_queries(support, django_assert_max_num_queries):
    """A payment with many events: still a handful of queries."""
    payment = needs_review_payment()
    for i in range(40):
        PaymentEvent.objects.create(
            payment=payment, type="reconciliation_attempt", created_at=timezone.now(),
            data={"result": "retry_later", "attempt": i},
        )  # fmt: skip
    with django_assert_max_num_queries(12):
        assert support.get(detail_url(payment)).status_code == 200


# --- actions -------------------------------------------------------------------------------


def test_support_sees_no_action_and_cannot_post_one(support, enqueued):
    """The support role has no action buttons and is refused on the action pages."""
    payment = needs_review_payment()
    page = support.get(detail_url(payment)).content.decode()
    assert "Reconcile now" not in page and "Resolve as" not in page
    url = f"{LIST_URL}{quote(payment.pk)}/reconcile/"
    assert support.post(url, {"note": "x"}).status_code == 403
    resolve = f"{LIST_URL}{quote(payment.pk)}/resolve/succeeded/"
    assert support.post(resolve, {"note": "x"}).status_code == 403
    assert enqueued == []


def test_operator_sees_the_actions_of_a_needs_review_payment(operator):
    """Reconcile now and the three resolutions are offered for needs_review."""
    page = operator.get(detail_url(needs_review_payment())).content.decode()
    for label in ("Reconcile now", "Resolve as succeeded", "Resolve as declined",
                  "Resolve as failed"):  # fmt: skip
        assert label in page


def test_resolved_payment_offers_no_action(operator):
    """A succeeded payment has nothing to reconcile or resolve."""
    page = operator.get(detail_url(PaymentFactory(status="succeeded"))).content.decode()
    assert "Reconcile now" not in page and "Resolve as" not in page


def test_reconcile_now_requires_a_note(operator, enqueued):
    """Without a note the form is shown again; nothing is recorded or enqueued."""
    payment = PaymentFactory(status="processing")
    response = operator.post(f"{LIST_URL}{quote(payment.pk)}/reconcile/", {"note": "  "})
    assert response.status_code == 200 and response.context["form"].errors
    assert not payment.events.exists() and enqueued == []


def test_reconcile_now_records_the_operator_and_enqueues_on_commit(
    operator, enqueued, django_capture_on_commit_callbacks
):
    """The event names the operator and the note; the task is enqueued when it commits."""
    payment = PaymentFactory(status="processing")
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(f"{LIST_URL}{quote(payment.pk)}/reconcile/", {"note": "ticket 42"})
    assert response.status_code == 302 and response["Location"] == detail_url(payment)
    event = payment.events.get(type="operator_reconcile_requested")
    assert event.data == {"operator": "operator-1", "note": "ticket 42"}
    assert enqueued == [payment.pk]


def test_reconcile_now_is_refused_for_a_resolved_payment(operator, enqueued):
    """A succeeded payment: an error message, no event, nothing enqueued."""
    payment = PaymentFactory(status="succeeded")
    response = operator.post(
        f"{LIST_URL}{quote(payment.pk)}/reconcile/", {"note": "why"}, follow=True
    )
    assert "nothing to reconcile" in response.content.decode()
    assert not payment.events.exists() and enqueued == []


def test_resolve_as_succeeded_changes_the_status_and_the_replay(
    operator, django_capture_on_commit_callbacks
):
    """needs_review -> succeeded with the operator's note; the key now replays a 201."""
    payment = needs_review_payment()
    response = operator.post(
        f"{LIST_URL}{quote(payment.pk)}/resolve/succeeded/",
        {"note": "found at the acquirer", "acquirer_reference": "ch_found"},
    )
    assert response.status_code == 302
    payment.refresh_from_db()
    assert (payment.status, payment.acquirer_reference) == ("succeeded", "ch_found")
    event = payment.events.get(type="resolved_by_operator")
    assert event.data["operator"] == "operator-1" and event.data["note"] == "found at the acquirer"
    key = IdempotencyKey.objects.get(pk=payment.idempotency_key_id)
    assert key.response_status == 201 and b'"succeeded"' in bytes(key.response_body)


def test_resolve_as_declined_requires_a_decline_code(operator):
    """Declined without a code: the form says so and the payment stays in needs_review."""
    payment = needs_review_payment()
    response = operator.post(
        f"{LIST_URL}{quote(payment.pk)}/resolve/declined/", {"note": "checked"}
    )
    assert response.status_code == 200 and "decline code is required" in response.content.decode()
    assert Payment.objects.get(pk=payment.pk).status == "needs_review"


def test_resolve_is_refused_unless_needs_review(operator):
    """A processing payment cannot be resolved by hand; reconciliation owns it."""
    payment = PaymentFactory(status="processing")
    response = operator.post(f"{LIST_URL}{quote(payment.pk)}/resolve/failed/", {"note": "checked"})
    assert "Only a payment in needs_review" in response.content.decode()
    assert Payment.objects.get(pk=payment.pk).status == "processing"


def test_bulk_reconcile_asks_for_a_note_then_enqueues_the_unresolved(
    operator, enqueued, django_capture_on_commit_callbacks
):
    """The bulk action shows a note form; on confirm it enqueues each unresolved payment."""
    stuck = PaymentFactory(status="processing")
    done = PaymentFactory(status="succeeded")
    selection = {"action": "reconcile_selected", "_selected_action": [stuck.pk, done.pk]}
    first = operator.post(LIST_URL, selection)
    assert first.status_code == 200 and "note" in first.context["form"].fields
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(LIST_URL, {**selection, "apply": "1", "note": "acquirer back up"})
    assert enqueued == [stuck.pk]
    assert stuck.events.get().data["note"] == "acquirer back up"
    assert not done.events.exists()


# --- operators' details ----------------------------------------------------------------------


def attempt_rows(page: str) -> list[str]:
    """The text of each row of the attempts table, cells joined by " | "."""
    table = re.search(r'<table class="payment-attempts">(.*?)</table>', page, re.S)
    assert table, "no attempts table"
    body = table[1].split("<tbody>", 1)[1]
    return [
        " | ".join(
            re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td>(.*?)</td>", row)
        )
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


@pytest.mark.django_db(transaction=True)
def test_attempts_table_shows_the_read_timeout_and_then_the_approval(
    support, merchant_a, sandbox, settings
):
    """tok_timeout_after_commit: the first request times out (charged but unanswered), the
    retry with the same key gets the 201 replay: two rows, the timeout with its wait first."""
    settings.ACQUIRER_READ_TIMEOUT_SECONDS = 0.3
    answer = merchant_a.create_payment(
        {**PAYMENT_BODY, "payment_method": "tok_timeout_after_commit"}
    )
    assert answer.status_code == 201, answer.content
    payment = Payment.objects.get(pk=answer.json()["id"])
    first, second = attempt_rows(support.get(detail_url(payment)).content.decode())
    assert re.search(
        r"^[\d-]+ [\d:.]+ \| request \| sandbox \| authorize \| 1 \| error \|  \| "
        r"ResponseTimeoutError \| "
        r"0\.3\d* s \| [\d.]+ s \| backoff \| \d+ left \| open \| closed \| retry$",
        first,
    ), first
    assert re.search(r"\| 2 \| approved \| 201 \|  \| [\d.]+ s \|  \|  \|.* \| return$", second), (
        second
    )
    stored = payment.events.get(type="acquirer_attempt").data
    assert [step["outcome"] for step in stored["attempt_log"]] == [
        "ResponseTimeoutError",
        "approved",
    ]


def test_attempts_table_keeps_a_summary_row_for_events_without_a_log(support):
    """An attempt event recorded without an attempt log (a reconciliation's, or before the
    log was kept) still shows its one summary row."""
    payment = PaymentFactory(status="processing")
    PaymentEvent.objects.create(
        payment=payment, type="reconciliation_attempt", created_at=timezone.now(),
        data={"result": "retry_later", "error": "ConnectionFailedError",
              "next_check_in_seconds": 30},
    )  # fmt: skip
    (row,) = attempt_rows(support.get(detail_url(payment)).content.decode())
    assert "retry_later" in row and "ConnectionFailedError" in row and "30 s" in row


def test_resolve_message_keeps_the_payment_id_in_lower_case(operator):
    """The admin capitalises a message's first letter: the message starts with a word."""
    payment = needs_review_payment()
    response = operator.post(
        f"{LIST_URL}{quote(payment.pk)}/resolve/failed/", {"note": "not at the acquirer"},
        follow=True,
    )  # fmt: skip
    messages = [str(m) for m in response.context["messages"]]
    assert messages == [f"Payment {payment.pk} resolved as failed."]
    assert f"Payment {payment.pk} resolved" in response.content.decode()


def test_search_finds_a_payment_or_refund_by_its_id_in_any_case(support):
    """An id pasted in capitals (or mixed) finds the payment, and its refunds."""
    payment = PaymentFactory()
    PaymentFactory()
    assert listed_ids(support.get(LIST_URL, {"q": payment.pk.upper()})) == {payment.pk}
    assert listed_ids(support.get(LIST_URL, {"q": payment.pk.title()})) == {payment.pk}


def test_reconcile_now_on_needs_review_says_what_the_task_does(operator):
    """The task looks a needs_review payment up again (payments.reconciliation.payments,
    _look_up_for_review): the action's page and docs/operations.md say so."""
    payment = needs_review_payment()
    page = operator.get(f"{LIST_URL}{quote(payment.pk)}/reconcile/").content.decode()
    assert "looks it up at the acquirer once more, never re-sends it" in page
    docs = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    assert "A `needs_review` payment is re-checked by the task with a look-up only" in docs
    assert "is not re-checked" not in docs
