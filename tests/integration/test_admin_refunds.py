"""The operations console and issue 12: captures, voids and refunds on a payment's page, the
refunds list, and "Refund" from the admin (payments.refund_payment, operator only) through the
API's own refund service, with real PostgreSQL and the sandbox acquirer over real HTTP."""

from __future__ import annotations

import importlib
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.admin import CappedCountPaginator
from idempotency.models import IdempotencyKey
from idempotency.services import idempotency_keys_purge_expired
from payments.admin.operator_actions import admin_refund_form_token
from payments.admin.payment_actions import PaymentActionsMixin
from payments.models import Payment, PaymentEvent, PaymentOperation
from tests.factories import PaymentFactory
from tests.support.api import PAYMENT_BODY

pytestmark = pytest.mark.django_db(transaction=True)

PAYMENTS_URL = "/admin/payments/payment/"
REFUNDS_URL = "/admin/payments/refund/"
ROLES_MIGRATION = importlib.import_module("payments.migrations.0004_operations_roles")
REFUND_MIGRATION = importlib.import_module("payments.migrations.0007_refunds_console")
#: The form's hidden value: its one-time key and the time it was rendered, signed.
KEY_FIELD = re.compile(r'name="idempotency_key" value="(admin-refund-[0-9a-f]{32}:\d+:[\w-]+)"')


def staff_client(client, role: str):
    """A logged-in staff user in ``role`` (groups and permissions from migrations 0004/0007;
    a flush by a transactional test removes what the migrations made)."""
    ROLES_MIGRATION.create_roles(apps, None)
    REFUND_MIGRATION.grant_refund(apps, None)
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


def detail_url(payment_id: str) -> str:
    return f"{PAYMENTS_URL}{quote(payment_id)}/change/"


def refund_url(payment_id: str) -> str:
    return f"{PAYMENTS_URL}{quote(payment_id)}/refund/"


def captured_payment(merchant, amount: int = 10000, token: str = "tok_visa") -> str:
    """A payment captured in full at the sandbox, made through the API."""
    response = merchant.create_payment({**PAYMENT_BODY, "amount": amount, "payment_method": token})
    assert response.status_code == 201, response.content
    return response.json()["id"]


def form_key(client, payment_id: str) -> str:
    """Open the refund page and return the one-time key it rendered (signed with its time;
    :func:`key_of` is the merchant idempotency key inside)."""
    page = client.get(refund_url(payment_id))
    assert page.status_code == 200
    return KEY_FIELD.search(page.content.decode()).group(1)


def key_of(form_value: str) -> str:
    return form_value.split(":")[0]


def submit(client, payment_id: str, key: str, **fields):
    data = {"amount": "30.00", "reason": "requested_by_customer", "note": "ticket 42"}
    return client.post(refund_url(payment_id), {**data, **fields, "idempotency_key": key})


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# --- issuing a refund ---------------------------------------------------------------------


def test_operator_sees_refund_on_a_succeeded_payment_and_support_does_not(
    operator, merchant_a, sandbox
):
    payment_id = captured_payment(merchant_a)
    assert "Refund</a>" in operator.get(detail_url(payment_id)).content.decode()
    operator.logout()
    staff_client(operator, "support")
    assert "Refund</a>" not in operator.get(detail_url(payment_id)).content.decode()


def test_support_gets_403_and_nothing_is_refunded(support, merchant_a, sandbox):
    """support may read payments, never refund: 403 on the page and on the POST."""
    payment_id = captured_payment(merchant_a)
    assert support.get(refund_url(payment_id)).status_code == 403
    response = submit(support, payment_id, "admin-refund-" + "0" * 32)
    assert response.status_code == 403
    assert not PaymentOperation.objects.exists()
    assert sandbox.refunds(PaymentOperation.objects.first() or "re_none") == []
    assert sandbox.refund_listing() == []


def test_refund_page_defaults_to_what_remains_refundable(operator, merchant_a, sandbox):
    """10000 EUR minor units, 3000 refunded: the amount field says 70.00; a fresh key each time."""
    payment_id = captured_payment(merchant_a)
    submit(operator, payment_id, form_key(operator, payment_id))
    page = operator.get(refund_url(payment_id)).content.decode()
    assert 'name="amount" value="70.00"' in page
    assert KEY_FIELD.search(page).group(1) != form_key(operator, payment_id)


def test_refund_goes_through_the_service_and_is_audited(operator, merchant_a, sandbox):
    """A partial refund: succeeded at the sandbox, amount_refunded 3000, an event naming the
    operator, the note and the form's key, and an admin history row."""
    payment_id = captured_payment(merchant_a)
    key = form_key(operator, payment_id)
    response = submit(operator, payment_id, key)
    assert response.status_code == 302
    assert response["Location"] == detail_url(payment_id)
    refund = PaymentOperation.objects.get(kind="refund")
    assert (refund.status, refund.amount, refund.reason) == (
        "succeeded", 3000, "requested_by_customer",
    )  # fmt: skip
    assert refund.acquirer_idempotency_key == f"refund-{refund.id}"
    assert refund.idempotency_key.key == key_of(key)
    assert Payment.objects.get(pk=payment_id).amount_refunded == 3000
    (at_acquirer,) = sandbox.refunds(refund.id)
    assert (at_acquirer["amount"], at_acquirer["status"]) == (3000, "succeeded")
    event = PaymentEvent.objects.get(payment_id=payment_id, type="operator_refund_requested")
    assert event.data == {
        "operator": "operator-1", "note": "ticket 42", "how": "admin",
        "operation": refund.id, "amount": 3000, "idempotency_key": key_of(key),
    }  # fmt: skip
    assert LogEntry.objects.get().change_message == "Refund: ticket 42"
    page = operator.get(response["Location"])
    assert f"Refund {refund.id} of 30.00 EUR succeeded" in " ".join(messages_of(page))


def test_a_double_submit_refunds_once(operator, merchant_a, sandbox):
    """The same form posted twice (the same one-time key): one refund here and at the
    sandbox, one audit event, and a message that nothing more was refunded."""
    payment_id = captured_payment(merchant_a)
    key = form_key(operator, payment_id)
    assert submit(operator, payment_id, key).status_code == 302
    again = submit(operator, payment_id, key, note="ticket 42, clicked twice")
    assert again.status_code == 302
    refund = PaymentOperation.objects.get(kind="refund")
    assert len(sandbox.refund_listing()) == 1
    assert Payment.objects.get(pk=payment_id).amount_refunded == 3000
    assert PaymentEvent.objects.filter(type="operator_refund_requested").count() == 1
    shown = " ".join(messages_of(operator.get(again["Location"])))
    assert f"already submitted (refund {refund.id} is succeeded); nothing more" in shown


def test_the_same_form_with_another_amount_is_refused(operator, merchant_a, sandbox):
    """The key of a submitted form with other values: refused, nothing more refunded."""
    payment_id = captured_payment(merchant_a)
    key = form_key(operator, payment_id)
    submit(operator, payment_id, key)
    again = submit(operator, payment_id, key, amount="10.00")
    assert "already submitted with other values" in " ".join(
        messages_of(operator.get(again["Location"]))
    )
    assert len(sandbox.refund_listing()) == 1


def test_a_form_re_sent_after_its_key_was_purged_refunds_nothing(
    operator, merchant_a, sandbox, monkeypatch
):
    """The form's key lives 24 h after its use, the form one hour after it was rendered
    (ADMIN_REFUND_FORM_SECONDS, at the admin's injected clock): re-sent after the key purge,
    or first sent too late, or with its time altered, it is refused and nothing is refunded."""
    now = timezone.now()
    monkeypatch.setattr(PaymentActionsMixin, "clock", staticmethod(lambda: now))
    payment_id = captured_payment(merchant_a)
    key = form_key(operator, payment_id)
    late_form = form_key(operator, payment_id)
    assert submit(operator, payment_id, key).status_code == 302

    later = now + timedelta(hours=25)
    idempotency_keys_purge_expired(now=later)
    assert not IdempotencyKey.objects.filter(key=key_of(key)).exists()  # the form's key is gone
    monkeypatch.setattr(PaymentActionsMixin, "clock", staticmethod(lambda: later))
    again = submit(operator, payment_id, key)
    assert again.status_code == 200
    assert "older than 60 minutes and nothing was refunded" in again.content.decode()

    monkeypatch.setattr(
        PaymentActionsMixin, "clock", staticmethod(lambda: now + timedelta(minutes=61))
    )
    assert "older than 60 minutes" in submit(operator, payment_id, late_form).content.decode()
    forged = late_form.replace(late_form.split(":")[1], str(int(later.timestamp())))
    assert "malformed" in submit(operator, payment_id, forged).content.decode()
    assert len(sandbox.refund_listing()) == 1
    assert Payment.objects.get(pk=payment_id).amount_refunded == 3000


@pytest.mark.parametrize("note", ["", "   "])
def test_refund_requires_a_note(operator, merchant_a, sandbox, note):
    payment_id = captured_payment(merchant_a)
    response = submit(operator, payment_id, form_key(operator, payment_id), note=note)
    assert response.status_code == 200
    assert "This field is required" in response.content.decode() or "A note is required" in (
        response.content.decode()
    )
    assert not PaymentOperation.objects.exists()


@pytest.mark.parametrize("amount", ["0", "-1", "10.001", "1e3", "ten"])
def test_a_malformed_amount_is_refused(operator, merchant_a, sandbox, amount):
    payment_id = captured_payment(merchant_a)
    response = submit(operator, payment_id, form_key(operator, payment_id), amount=amount)
    assert response.status_code == 200
    assert not PaymentOperation.objects.exists()


def test_more_than_refundable_is_a_clear_409_message(operator, merchant_a, sandbox):
    """amount_exceeds_refundable: nothing created, nothing at the sandbox, the key free."""
    payment_id = captured_payment(merchant_a, amount=5000)
    response = submit(operator, payment_id, form_key(operator, payment_id), amount="50.01")
    shown = " ".join(messages_of(operator.get(response["Location"])))
    assert "Not refunded (amount_exceeds_refundable)" in shown
    assert not PaymentOperation.objects.exists()
    assert sandbox.refund_listing() == []


def test_a_payment_not_succeeded_cannot_be_refunded(operator, merchant_a, sandbox):
    """A requires_capture payment: the page says so; a POST is a 409 invalid_payment_state."""
    response = merchant_a.create_payment({**PAYMENT_BODY, "capture_method": "manual"})
    payment_id = response.json()["id"]
    assert "Refund</a>" not in operator.get(detail_url(payment_id)).content.decode()
    page = operator.get(refund_url(payment_id))
    assert page.status_code == 302
    token = admin_refund_form_token(now=timezone.now())  # a form of another payment's page
    posted = submit(operator, payment_id, token, amount="1.00")
    assert "Not refunded (invalid_payment_state)" in " ".join(
        messages_of(operator.get(posted["Location"]))
    )


def test_acquirer_unavailable_is_a_clear_503_message(operator, merchant_a, sandbox, single_attempt):
    """Certainly not sent (503 at the sandbox): nothing refunded, the message says so."""
    payment_id = captured_payment(merchant_a, token="tok_refund_fail_503_3")
    response = submit(operator, payment_id, form_key(operator, payment_id))
    shown = " ".join(messages_of(operator.get(response["Location"])))
    assert "could not be reached: the refund was not sent and nothing was refunded" in shown
    assert Payment.objects.get(pk=payment_id).amount_refunded == 0
    assert [r for r in sandbox.refund_listing() if r["status"] == "succeeded"] == []


def test_an_unknown_outcome_is_a_clear_202_message(
    operator, merchant_a, sandbox, single_attempt, django_capture_on_commit_callbacks
):
    """A 500 after the sandbox committed: the refund is pending, reconciliation's job; the
    message says not to refund again, and the payment's page shows the pending refund."""
    payment_id = captured_payment(merchant_a, token="tok_refund_500_after_commit")
    with django_capture_on_commit_callbacks(execute=False):
        response = submit(operator, payment_id, form_key(operator, payment_id))
    refund = PaymentOperation.objects.get(kind="refund")
    assert refund.status == "pending"
    page = operator.get(response["Location"])
    shown = " ".join(messages_of(page))
    assert f"Refund {refund.id} of 30.00 EUR was sent, but the acquirer's answer is not" in shown
    assert "Do not refund again" in shown
    assert "reconciliation attempts: 0" in page.content.decode()


def test_a_refund_the_acquirer_declines_is_a_clear_message(operator, merchant_a, sandbox):
    payment_id = captured_payment(merchant_a, token="tok_refund_decline")
    response = submit(operator, payment_id, form_key(operator, payment_id))
    shown = " ".join(messages_of(operator.get(response["Location"])))
    assert "The acquirer declined refund" in shown and "do_not_honor" in shown
    assert Payment.objects.get(pk=payment_id).amount_refunded == 0


# --- the payment's page -------------------------------------------------------------------


def test_payment_page_shows_captures_voids_and_refunds(support, merchant_a, sandbox):
    """A manual payment captured partially then refunded: each operation with its status,
    amount in the currency's units, acquirer reference and idempotency key; the attempts."""
    created = merchant_a.create_payment(
        {**PAYMENT_BODY, "amount": 10000, "capture_method": "manual"}
    )
    payment_id = created.json()["id"]
    headers = {"HTTP_IDEMPOTENCY_KEY": "cap-1"}
    merchant_a.client.post(
        f"/payments/{payment_id}/capture", {"amount": 6000}, format="json", **headers
    )
    headers = {"HTTP_IDEMPOTENCY_KEY": "ref-1"}
    merchant_a.client.post(
        f"/payments/{payment_id}/refunds", {"amount": 1250}, format="json", **headers
    )
    page = support.get(detail_url(payment_id)).content.decode()
    capture = PaymentOperation.objects.get(kind="capture")
    refund = PaymentOperation.objects.get(kind="refund")
    assert 'class="payment-operations"' in page
    for shown in (capture.id, refund.id, "60.00 EUR", "12.50 EUR", refund.acquirer_reference,
                  f"refund-{refund.id}", "operation_attempt"):  # fmt: skip
        assert shown in page
    assert "100.00 EUR" in page  # the authorized amount
    assert re.search(r"amount captured.*?60\.00 EUR", page, re.S | re.I)
    assert re.search(r"amount refunded.*?12\.50 EUR", page, re.S | re.I)


def needs_review_refund(**kwargs) -> PaymentOperation:
    payment = PaymentFactory(amount=5000, **kwargs)
    now = timezone.now()
    refund = PaymentOperation.objects.create(
        id="re_" + "ab" * 12, payment=payment, kind="refund", amount=2000, status="needs_review",
        acquirer_idempotency_key="refund-re_" + "ab" * 12, created_at=now - timedelta(hours=7),
        updated_at=now, reconciliation_attempts=40,
    )  # fmt: skip
    PaymentEvent.objects.create(
        payment=payment, type="operation_reconciliation_attempt", created_at=now,
        data={"operation": refund.id, "kind": "refund", "result": "retry_later",
              "detail": "lookup failed", "error": "ResponseTimeoutError"},
    )  # fmt: skip
    PaymentEvent.objects.create(
        payment=payment, type="operation_needs_review", created_at=now,
        data={"operation": refund.id, "kind": "refund", "reason": "max_age", "attempts": 40},
    )  # fmt: skip
    return refund


def test_a_needs_review_refund_is_shown_with_what_is_known(support):
    """On the payment's page and on the refund's: the attempts, the last check, why it was
    escalated, and what to look up at the acquirer."""
    refund = needs_review_refund()
    for url in (detail_url(refund.payment_id), f"{REFUNDS_URL}{quote(refund.id)}/change/"):
        page = support.get(url).content.decode()
        assert "⚠ needs_review" in page or "needs_review" in page
        assert "reconciliation attempts: 40" in page
        assert "last: operation_needs_review max_age" in page
        assert f"by our reference {refund.id}" in page


def test_payments_list_finds_payments_whose_operation_needs_review(support):
    refund = needs_review_refund()
    PaymentFactory()
    page = support.get(PAYMENTS_URL)
    assert 'id="operations-review-banner"' in page.content.decode()
    listed = support.get(PAYMENTS_URL, {"status": "operation_needs_review"})
    assert {p.pk for p in listed.context["cl"].result_list} == {refund.payment_id}


# --- the refunds list ---------------------------------------------------------------------


def make_refunds(
    count: int, payment: Payment | None = None, start: int = 1
) -> list[PaymentOperation]:
    payment = payment or PaymentFactory(amount=100000)
    now = timezone.now()
    return [
        PaymentOperation.objects.create(
            id=f"re_{i:024x}",
            payment=payment,
            kind="refund",
            amount=100,
            status="succeeded",
            acquirer_reference=f"re_acq{i:020d}",
            acquirer_idempotency_key=f"refund-re_{i:024x}",
            created_at=now - timedelta(seconds=i),
            updated_at=now,
        )
        for i in range(start, start + count)
    ]


def listed(response) -> set[str]:
    return {r.pk for r in response.context["cl"].result_list}


def test_refunds_list_shows_only_refunds_newest_first(support):
    refunds = make_refunds(3)
    capture = PaymentOperation.objects.create(
        id="op_" + "c" * 24, payment=refunds[0].payment, kind="capture", amount=100,
        acquirer_idempotency_key="capture-op_" + "c" * 24, created_at=timezone.now(),
        updated_at=timezone.now(),
    )  # fmt: skip
    response = support.get(REFUNDS_URL)
    assert response.status_code == 200
    assert [r.pk for r in response.context["cl"].result_list] == [r.pk for r in refunds]
    assert capture.pk not in response.content.decode()
    assert "1.00 EUR" in response.content.decode()


@pytest.mark.parametrize("field", ["id", "payment_id", "acquirer_reference"])
def test_refunds_search_is_an_exact_match(support, field):
    wanted, other = make_refunds(1)[0], make_refunds(2, start=100)[1]
    value = getattr(wanted, field)
    assert listed(support.get(REFUNDS_URL, {"q": value})) == {wanted.pk}
    assert listed(support.get(REFUNDS_URL, {"q": value[:-2]})) == set()
    assert other.pk not in listed(support.get(REFUNDS_URL, {"q": value}))


def test_refunds_status_filter_puts_needs_review_first(support):
    refund = needs_review_refund()
    make_refunds(2)
    response = support.get(REFUNDS_URL, {"status": "needs_review"})
    assert listed(response) == {refund.pk}
    status = next(f for f in response.context["cl"].filter_specs if f.title == "status")
    assert [value for value, _ in status.lookup_choices][:2] == ["needs_review", "pending"]
    assert "1 refund needs review" in support.get(REFUNDS_URL).content.decode()


def test_refunds_capped_count_reads_plus_and_never_counts_the_whole_table(support, monkeypatch):
    monkeypatch.setattr(CappedCountPaginator, "cap", 3)
    make_refunds(5)
    with CaptureQueriesContext(connection) as queries:
        page = support.get(REFUNDS_URL).content.decode()
    assert "3+ refunds" in page
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT" in sql.upper() for sql in counts)


def test_refunds_list_runs_a_bounded_number_of_queries(support, django_assert_max_num_queries):
    make_refunds(60)
    with django_assert_max_num_queries(10):
        assert support.get(REFUNDS_URL).status_code == 200
    with django_assert_max_num_queries(10):
        assert support.get(REFUNDS_URL, {"q": "re_" + "0" * 23 + "1"}).status_code == 200


def test_refunds_are_read_only_for_everyone(operator):
    refund = make_refunds(1)[0]
    assert operator.get(f"{REFUNDS_URL}add/").status_code == 403
    url = f"{REFUNDS_URL}{quote(refund.pk)}/change/"
    assert 'name="amount"' not in operator.get(url).content.decode()
    assert operator.post(url, {"amount": 1, "status": "failed"}).status_code == 403
    assert operator.post(f"{REFUNDS_URL}{refund.pk}/delete/", {"post": "yes"}).status_code == 403
    assert PaymentOperation.objects.get(pk=refund.pk).amount == 100


def test_a_staff_user_without_a_role_cannot_see_refunds(client):
    make_refunds(1)
    user = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(REFUNDS_URL).status_code == 403
