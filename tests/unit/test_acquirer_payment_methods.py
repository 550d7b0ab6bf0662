"""Payment methods per acquirer (ADR 0051): a token's family read from its prefix, each connector
type's own families, the `payment_methods` override of an ACQUIRERS entry (refused at start
when it names no family), and routing that only ever lists the acquirers able to charge the
payment method (payments/acquirer/routing.py; settings only, no database)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from acquirers.specs import (
    PAYMENT_METHOD_FAMILIES,
    TYPE_PAYMENT_METHODS,
    parse_acquirers,
    payment_method_family,
)
from payments.acquirer.routing import acquirer_route, charged_anywhere
from payments.api.serializers import PAYMENT_METHOD_PATTERN

ENV = {"STRIPE_SECRET_KEY": "sk_test_51NeverShown", "ADYEN_API_KEY": "AQEyNeverShown"}
SANDBOX = {"name": "sandbox", "base_url": "http://127.0.0.1:9", "api_key": "sandbox_sk"}
STRIPE = {"name": "stripe", "type": "stripe", "api_key_env": "STRIPE_SECRET_KEY",
          "api_version": "2024-06-20"}  # fmt: skip
ADYEN = {"name": "adyen", "type": "adyen", "api_key_env": "ADYEN_API_KEY",
         "merchant_account": "AcmeECOM", "return_url": "https://shop.example/return"}  # fmt: skip


def parse(*items: dict[str, Any]):
    return parse_acquirers(json.dumps(list(items)), environ=ENV)


@pytest.mark.parametrize(
    ("token", "family"),
    [
        ("tok_visa", "sandbox_token"),
        ("pm_card_visa", "stripe_payment_method"),
        ("spm_M5N7TQ4TG5PFWR50", "adyen_stored_payment_method"),
        ("card_1PgaftB7WZ01zgkW", None),  # a Stripe Card id: no family of ours
        ("tokvisa", None),
        ("", None),
    ],
)
def test_a_tokens_family_is_read_from_its_prefix(token, family):
    assert payment_method_family(token) == family


def test_the_api_accepts_exactly_the_families_prefixes():
    for prefix in PAYMENT_METHOD_FAMILIES.values():
        assert PAYMENT_METHOD_PATTERN.fullmatch(prefix + "abc_123")
    assert not PAYMENT_METHOD_PATTERN.fullmatch("card_abc")
    assert set(TYPE_PAYMENT_METHODS) == {"sandbox", "stripe", "adyen"}


def test_each_type_charges_its_own_family_unless_the_entry_says_otherwise():
    sandbox, stripe, adyen = parse(
        {**SANDBOX, "priority": 1}, {**STRIPE, "priority": 2}, {**ADYEN, "priority": 3}
    )
    assert sandbox.payment_method_families == {"sandbox_token"}
    assert stripe.payment_method_families == {"stripe_payment_method"}
    assert adyen.payment_method_families == {"adyen_stored_payment_method"}
    (shared,) = parse(
        {**ADYEN, "payment_methods": ["adyen_stored_payment_method", "sandbox_token"]}
    )
    assert shared.payment_method_families == {"adyen_stored_payment_method", "sandbox_token"}
    assert shared.supports("EUR", "automatic", "sandbox_token")
    assert not adyen.supports("EUR", "automatic", "sandbox_token")
    assert adyen.supports("EUR", "automatic")  # no family asked: currency and capture only


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["visa"], "acquirer 0 (adyen).payment_methods: unknown family 'visa' (known: "
                   "sandbox_token, stripe_payment_method, adyen_stored_payment_method)"),
        ([], "acquirer 0 (adyen).payment_methods: must be a non-empty JSON array of strings"),
        ("sandbox_token", "acquirer 0 (adyen).payment_methods: must be a non-empty JSON array"),
        (["sandbox_token", "sandbox_token"], "acquirer 0 (adyen).payment_methods: lists a value"),
        (["sk_live_secret/x"], "unknown family (not shown)"),
    ],
)  # fmt: skip
def test_a_bad_payment_methods_list_is_refused_naming_the_field(value, message):
    with pytest.raises(ImproperlyConfigured) as refused:
        parse({**ADYEN, "payment_methods": value})
    assert message in str(refused.value)
    assert "sk_live_secret" not in str(refused.value)


def test_routing_lists_only_the_acquirers_that_can_charge_the_payment_method(settings):
    shared = ["adyen_stored_payment_method", "sandbox_token"]
    settings.ACQUIRERS = parse(
        {**SANDBOX, "priority": 1},
        {**STRIPE, "priority": 2},
        {**ADYEN, "priority": 3, "payment_methods": shared},
    )

    def route(payment_method: str, currency: str = "EUR", preferred=()) -> tuple[str, ...]:
        return acquirer_route(
            currency=currency, capture_method="manual", payment_method=payment_method,
            preferred=preferred,
        )  # fmt: skip

    assert route("tok_visa") == ("sandbox", "adyen")
    assert route("tok_visa", preferred=("stripe", "adyen")) == ("adyen", "sandbox")
    assert route("pm_card_visa") == ("stripe",)
    assert route("pm_card_visa", currency="ISK") == ()  # Stripe never takes ISK
    assert route("spm_8415718415172200") == ("adyen",)
    assert route("card_1PgaftB7WZ01zgkW") == ()
    assert charged_anywhere("pm_card_visa") and not charged_anywhere("card_1PgaftB7WZ01zgkW")
    settings.ACQUIRERS = parse(SANDBOX)
    assert route("pm_card_visa") == ()
    assert not charged_anywhere("pm_card_visa")
    assert charged_anywhere("tok_visa")
