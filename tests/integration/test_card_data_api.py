"""Card data refused at every free-text input: API bodies, member names, the Idempotency-Key,
query parameters, operators' notes and codes, merchant names (PostgreSQL, the sandbox over HTTP).

A sample of the generated card corpus (``tests/support/card_corpus.py``, every brand and
formatting family) goes through each input; each is refused with ``card_data_not_accepted``
(or a form error), nothing is stored or sent, and no answer, page or log line holds it.
"""

from __future__ import annotations

import logging

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone

from card_data import contains_card_number
from console.forms import CARD_DATA_MESSAGE
from idempotency.models import IdempotencyKey
from merchants.models import Merchant
from merchants.services import MerchantNameRefused, merchant_create
from payments.admin.forms import NoteForm, RefundForm
from payments.admin.operator_actions import OperationRefused, payment_resolve
from payments.models import Payment, PaymentEvent
from tests.factories import PaymentFactory
from tests.integration.test_admin import LIST_URL, needs_review_payment, staff_client
from tests.support.api import PAYMENT_BODY
from tests.support.card_corpus import card_corpus

pytestmark = pytest.mark.django_db


def corpus_sample() -> list[tuple[str, str]]:
    """One entry per formatting family of the corpus (each grouping, digit form, embedding,
    URL and JSON encoding: about 45), the brands and separators taken in turn."""
    families: dict[str, list[tuple[str, str]]] = {}
    for label, text in card_corpus():
        parts = label.split("/")[2:]
        family = "/".join(parts[:2]) if parts[0] in {"embedded", "url", "json"} else parts[0]
        families.setdefault(family, []).append((label, text))
    return [entries[(index * 37) % len(entries)] for index, entries in enumerate(families.values())]


SAMPLE = corpus_sample()


def refused(response, field: str | None = None) -> list[str]:
    """What is wrong with ``response`` as a card-data refusal (empty when it is one)."""
    problems = []
    if response.status_code != 400 or response.json().get("code") != "card_data_not_accepted":
        problems.append(f"{response.status_code} {response.content[:80]!r}")
    elif field is not None and field not in [e["field"] for e in response.json()["errors"]]:
        problems.append(f"field {field} not named: {response.json()['errors']}")
    if contains_card_number(response.content.decode()):
        problems.append("the answer holds the card number")
    return problems


def test_the_sample_covers_the_families():
    """The sample holds groupings, Unicode forms, embeddings, URL and JSON encodings."""
    labels = " ".join(label for label, _ in SAMPLE)
    for family in ("4-4-4-4", "embedded", "url/", "json/", "one-by-one", "fullwidth"):
        assert family in labels, family


def test_card_numbers_in_bodies_keys_headers_and_queries_are_refused(merchant_a, sandbox, caplog):
    """Each sample entry as a body value, a nested value, a member name, the Idempotency-Key,
    a list filter and a query parameter of a detail endpoint: a 400 card_data_not_accepted
    naming the field, nothing stored or sent, nothing in the logs."""
    caplog.set_level(logging.DEBUG)
    api = merchant_a.client
    failures = []
    for label, text in SAMPLE:
        answers = {
            "description": (merchant_a.create_payment({**PAYMENT_BODY, "description": text}),
                            "description"),
            "reference": (merchant_a.create_payment({**PAYMENT_BODY, "reference": text}),
                          "reference"),
            "nested": (merchant_a.create_payment({**PAYMENT_BODY, "meta": {"k": [1, text]}}),
                       "meta.k[1]"),
            "member-name": (merchant_a.create_payment({**PAYMENT_BODY, text: "x"}), "[redacted]"),
            "idempotency-key": (merchant_a.create_payment(PAYMENT_BODY, key=text),
                                "Idempotency-Key"),
            "list-filter": (api.get("/payments", {"reference": text}), "reference"),
            "detail-query": (api.get("/payments/pay_0", {"q": text}), "q"),
            "refunds-query": (api.get("/payments/pay_0/refunds", {"q": text}), "q"),
            "refund-query": (api.get("/refunds/re_0", {text: "1"}), "[redacted]"),
        }  # fmt: skip
        for where, (response, field) in answers.items():
            failures.extend(f"{label} as {where}: {p}" for p in refused(response, field))
    assert failures == []
    assert not contains_card_number(caplog.text)
    assert IdempotencyKey.objects.count() == 0 and Payment.objects.count() == 0
    assert sandbox.stats()["requests_total"] == 0


@pytest.mark.django_db(transaction=True)
def test_an_order_key_holding_a_card_number_is_refused(merchant_a, sandbox):
    """``order-4111111111111111`` is refused; ``order-2026-11-29`` and a UUID are accepted."""
    assert refused(merchant_a.create_payment(PAYMENT_BODY, key="order-4111111111111111")) == []
    assert merchant_a.create_payment(PAYMENT_BODY, key="order-2026-11-29").status_code == 201
    accepted = merchant_a.create_payment(
        {**PAYMENT_BODY, "reference": "550e8400-e29b-41d4-a716-446655440000"},
        key="550e8400-e29b-41d4-a716-446655440000",
    )
    assert accepted.status_code == 201


def test_an_unauthenticated_query_with_a_card_number_is_still_401(client):
    """Without a key the answer stays 401: the query is read only for an authenticated caller."""
    assert client.get("/payments", {"reference": "4111111111111111"}).status_code == 401


# --- Operators and merchants ----------------------------------------------------------------


@pytest.mark.parametrize("form_class", [NoteForm, RefundForm])
def test_forms_refuse_card_data_and_do_not_show_it_again(form_class):
    """A card number in any field is an error that does not repeat it, and the re-rendered
    form does not hold it (a choice field's own error would quote the value)."""
    pan = "4111 1111 1111 1111"
    refund = {"currency": "EUR", "refundable": 1000, "now": timezone.now()}
    kwargs = refund if form_class is RefundForm else {}
    data = {"note": f"customer sent {pan}", "reason": pan, "amount": "1.00", "idempotency_key": "x"}
    form = form_class(data=data, **kwargs)
    assert not form.is_valid()
    assert form.errors["note"] == [CARD_DATA_MESSAGE]
    if form_class is RefundForm:
        assert form.errors["reason"] == [CARD_DATA_MESSAGE]
    assert pan not in form.as_div() and pan not in str(form.errors)


def test_admin_reconcile_note_with_a_card_number_is_refused(client, enqueued):
    """Through the admin: the page shows the error, not the number; nothing is recorded."""
    operator = staff_client(client, "operator")
    payment = PaymentFactory(status="processing")
    for _, text in SAMPLE[:10]:
        response = operator.post(f"{LIST_URL}{quote(payment.pk)}/reconcile/", {"note": text})
        assert response.status_code == 200 and response.context["form"].errors
        assert text not in response.content.decode()
    assert not payment.events.exists() and enqueued == []


def test_admin_resolve_code_with_a_card_number_is_refused(client):
    """The resolve form's code and acquirer reference are checked too, as is the service."""
    operator = staff_client(client, "operator")
    payment = needs_review_payment()
    url = f"{LIST_URL}{quote(payment.pk)}/resolve/declined/"
    response = operator.post(url, {"note": "checked", "code": "4111111111111111"})
    assert response.status_code == 200 and "4111111111111111" not in response.content.decode()
    with pytest.raises(OperationRefused) as raised:
        payment_resolve(
            payment_id=payment.pk, to_status="declined", operator="alice", note="n",
            code="x", acquirer_reference="ch_4111-1111-1111-1111",
        )  # fmt: skip
    assert "4111" not in str(raised.value)
    payment.refresh_from_db()
    assert (
        payment.status == "needs_review"
        and not PaymentEvent.objects.filter(payment=payment, type="resolved_by_operator").exists()
    )


def test_merchant_names_refuse_card_data(client, capsys):
    """The service, the command and the admin's add form refuse a name holding a card number,
    and none of them repeats it."""
    name = "Shop 5555 5555 5555 4444"
    with pytest.raises(MerchantNameRefused) as raised:
        merchant_create(name=name)
    assert "5555" not in str(raised.value)
    with pytest.raises(CommandError) as command_error:
        call_command("create_merchant", name)
    assert "5555" not in str(command_error.value) and "5555" not in capsys.readouterr().out
    client.force_login(User.objects.create_superuser("root", password="pw"))
    management = {f"api_keys-{n}_FORMS": "0" for n in ("TOTAL", "INITIAL", "MIN_NUM", "MAX_NUM")}
    response = client.post("/admin/merchants/merchant/add/", {"name": name, **management})
    page = response.content.decode()
    assert response.status_code == 200 and CARD_DATA_MESSAGE in page and "5555" not in page
    assert not Merchant.objects.filter(name=name).exists()
