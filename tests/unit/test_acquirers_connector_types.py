"""ACQUIRERS entries with a connector `type` (acquirers/specs.py): a sandbox by default, a
stripe acquirer with its secret from the environment and its API version pinned, an adyen
acquirer with its API key from the environment, its merchant account and its test or live
endpoint; every bad
value refused at start with an ImproperlyConfigured naming the field, never the secret; and
the client built with the type's dialect (payments/acquirer/client.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from acquirers.specs import parse_acquirers
from gateway_client.adyen import AdyenDialect
from gateway_client.sandbox_dialect import SandboxDialect
from gateway_client.stripe import StripeDialect
from payments.acquirer.client import acquirer_dialect

SECRET = "sk_test_51StripeSecretNeverShown"
ADYEN_KEY = "AQEyhmfxAdyenApiKeyNeverShown"
ENV = {"STRIPE_SECRET_KEY": SECRET, "ADYEN_API_KEY": ADYEN_KEY}


def stripe(**overrides: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": "stripe",
        "type": "stripe",
        "api_key_env": "STRIPE_SECRET_KEY",
        "api_version": "2024-06-20",
    }
    item.update(overrides)
    return {key: value for key, value in item.items() if value is not None}


def adyen(**overrides: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": "adyen",
        "type": "adyen",
        "api_key_env": "ADYEN_API_KEY",
        "merchant_account": "AcmeECOM",
        "return_url": "https://shop.example/return",
    }
    item.update(overrides)
    return {key: value for key, value in item.items() if value is not None}


def parse(*items: dict[str, Any], environ: dict[str, str] = ENV):
    return parse_acquirers(json.dumps(list(items)), environ=environ)


def test_a_stripe_acquirer_reads_its_secret_from_the_environment_and_pins_the_version():
    (spec,) = parse(stripe())
    assert (spec.type, spec.api_version, spec.base_url) == (
        "stripe",
        "2024-06-20",
        "https://api.stripe.com",
    )
    assert spec.api_key == SECRET
    assert SECRET not in repr(spec)
    assert acquirer_dialect(spec) == StripeDialect(api_version="2024-06-20")


def test_the_type_defaults_to_the_sandbox():
    (spec,) = parse({"name": "alpha", "base_url": "http://127.0.0.1:8090", "api_key": "k1"})
    assert spec.type == "sandbox"
    assert spec.api_version is None
    assert acquirer_dialect(spec) == SandboxDialect()


def test_a_stripe_acquirer_never_takes_isk_or_ugx():
    (spec,) = parse(stripe())
    assert spec.supports("EUR", "manual")
    assert not spec.supports("ISK", "automatic")
    assert not spec.supports("UGX", "manual")


@pytest.mark.parametrize(
    ("item", "environ", "names"),
    [
        (stripe(type="paypal"), ENV, "type must be one of sandbox, stripe, adyen"),
        (stripe(type="adyen"), ENV, "api_version is a field of type 'stripe'"),
        (adyen(merchant_account=None), ENV, "merchant_account is required"),
        (adyen(merchant_account="Acme ECOM"), ENV, "merchant_account is required"),
        (adyen(return_url=None), ENV, "return_url is required"),
        (adyen(return_url="shop.example"), ENV, "return_url is required"),
        (adyen(api_key_env=None, api_key=ADYEN_KEY), ENV, "api_key_env is required"),
        (adyen(live_url_prefix="Acme_Live"), ENV, "live_url_prefix must be lower-case"),
        (
            adyen(live_url_prefix="abc", base_url="https://x.example"),
            ENV,
            "give base_url or live_url_prefix, not both",
        ),
        (stripe(merchant_account="AcmeECOM"), ENV, "merchant_account is a field of type 'adyen'"),
        (stripe(api_version=None), ENV, "api_version must be the pinned Stripe-Version"),
        (stripe(api_version="latest"), ENV, "api_version must be the pinned Stripe-Version"),
        (stripe(api_key_env=None), ENV, "api_key_env is required"),
        (stripe(api_key=SECRET), ENV, "give api_key or api_key_env, not both"),
        (stripe(), {}, "the environment variable STRIPE_SECRET_KEY is not set"),
        (stripe(), {"STRIPE_SECRET_KEY": "pk_test_publishable"}, "must hold a Stripe secret"),
        (stripe(api_key_env="lower-case"), ENV, "api_key_env must name an environment"),
        (stripe(currencies=["EUR", "ISK"]), ENV, "cannot take ISK or UGX"),
        (
            {"name": "alpha", "base_url": "http://h", "api_key": "k", "api_version": "2024-06-20"},
            ENV,
            "api_version is a field of type 'stripe' only",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field_never_the_secret(item, environ, names):
    with pytest.raises(ImproperlyConfigured) as raised:
        parse(item, environ=environ)
    message = str(raised.value)
    assert names in message
    assert "acquirer 0" in message
    assert SECRET not in message
    assert ADYEN_KEY not in message
    assert "pk_test_publishable" not in message


def test_an_adyen_acquirer_uses_the_test_endpoint_unless_given_its_live_prefix():
    (spec,) = parse(adyen())
    assert (spec.type, spec.base_url, spec.merchant_account) == (
        "adyen",
        "https://checkout-test.adyen.com/v71",
        "AcmeECOM",
    )
    assert spec.api_key == ADYEN_KEY
    assert ADYEN_KEY not in repr(spec)
    assert acquirer_dialect(spec) == AdyenDialect(
        merchant_account="AcmeECOM", return_url="https://shop.example/return"
    )
    (live,) = parse(adyen(live_url_prefix="1797a841fbb37ca7-acmecom"))
    assert live.base_url == (
        "https://1797a841fbb37ca7-acmecom-checkout-live.adyenpayments.com/checkout/v71"
    )


def test_an_adyen_acquirer_takes_hmac_keys_in_hex_as_its_notification_secrets():
    """Adyen signs notifications with HMAC keys (hex), not ``whsec_`` secrets; a rotation
    holds two. The error names the variable, never a value."""
    keys = f"{'AB' * 32} {'cd' * 32}"
    (spec,) = parse(adyen(webhook_secret_env="ADYEN_HMAC"), environ={**ENV, "ADYEN_HMAC": keys})
    assert spec.webhook_secrets == ("AB" * 32, "cd" * 32)
    assert "AB" * 8 not in repr(spec)
    for wrong in ("whsec_c2VjcmV0c2VjcmV0", "abc", "zz" * 32):
        with pytest.raises(ImproperlyConfigured, match="ADYEN_HMAC must hold HMAC keys") as refused:
            parse(adyen(webhook_secret_env="ADYEN_HMAC"), environ={**ENV, "ADYEN_HMAC": wrong})
        assert wrong not in str(refused.value)
    with pytest.raises(ImproperlyConfigured, match="whsec_"):
        parse(stripe(webhook_secret_env="STRIPE_WH"), environ={**ENV, "STRIPE_WH": "AB" * 32})
