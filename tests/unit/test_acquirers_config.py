"""The ACQUIRERS setting (acquirers/specs.py): valid documents, and a generated corpus of bad
ones, each refused with an ImproperlyConfigured that names the field and never the API key."""

from __future__ import annotations

import copy
import itertools
import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from acquirers.specs import POLICY_OVERRIDES, AcquirerSpec, parse_acquirers
from payments.core.money import CURRENCY_EXPONENTS

SECRET = "sk_live_Sup3rSecretValue_9f2c"
KNOWN = frozenset(CURRENCY_EXPONENTS)

VALID = [
    {
        "name": "beta",
        "base_url": "http://127.0.0.1:8091/",
        "api_key": SECRET,
        "currencies": ["EUR", "USD"],
        "capture_methods": ["automatic"],
        "priority": 20,
        "policy": {"read_timeout_seconds": 2.5, "retry_max_attempts": 2},
    },
    {"name": "alpha", "base_url": "https://alpha.example", "api_key": "sk_alpha", "priority": 10},
    {"name": "gamma", "base_url": "https://gamma.example", "api_key": "sk_gamma", "priority": 20},
]


def parse(document: object) -> tuple[AcquirerSpec, ...] | None:
    return parse_acquirers(json.dumps(document), known_currencies=KNOWN)


def test_unset_or_blank_means_the_single_acquirer_of_the_acquirer_settings():
    assert parse_acquirers(None) is None
    assert parse_acquirers("  ") is None


def test_a_valid_document_is_in_routing_order_with_its_overrides():
    """Priority ascending, ties in the array's order; policy keys become ACQUIRER_* names."""
    specs = parse(VALID)
    assert [spec.name for spec in specs] == ["alpha", "beta", "gamma"]
    beta = specs[1]
    assert beta.base_url == "http://127.0.0.1:8091"
    assert beta.currencies == frozenset({"EUR", "USD"})
    assert beta.supports("EUR", "automatic") and not beta.supports("EUR", "manual")
    assert not beta.supports("GBP", "automatic")
    assert specs[0].supports("JPY", "manual")  # no lists: every currency, both methods
    assert beta.setting("ACQUIRER_READ_TIMEOUT_SECONDS", 3.0) == 2.5
    assert beta.setting("ACQUIRER_CONNECT_TIMEOUT_SECONDS", 1.0) == 1.0
    assert SECRET not in repr(specs)


def _bad_documents() -> list[tuple[str, object]]:
    """(what is wrong, document) for every field and shape: generated from the valid one."""
    base = VALID[0]
    bad_values = {
        "name": [None, "", "Alpha", "a b", "-alpha", "x" * 25, 7, SECRET],
        "base_url": [None, "", "ftp://x", "127.0.0.1:8090", "http://", f"https://u:{SECRET}@h",
                     "https://h/?key=1", 8090],
        "api_key": [None, "", "has space", "\u00e9t\u00e9", 12345, ["k"]],
        "currencies": ["EUR", [], ["eur"], ["EURO"], ["XXX"], ["EUR", "EUR"], [1], [SECRET]],
        "capture_methods": ["manual", [], ["later"], ["manual", "manual"]],
        "priority": ["1", 1.5, True, None],
        "policy": [[], "x", {"unknown_key": 1}, {SECRET: 1}],
    }  # fmt: skip
    for key, (what, _) in POLICY_OVERRIDES.items():
        text = what.startswith(("printable", "one of"))
        wrong = ("", "a b", None, 1) if text else ("1", None, -1, 0 if "seconds" in what else "x")
        bad_values["policy"].extend({key: value} for value in wrong)
    documents: list[tuple[str, object]] = []
    for field, values in bad_values.items():
        for value in values:
            item = copy.deepcopy(base) | {field: value}
            documents.append((f"{field}={value!r}"[:60], [item]))
    documents += [
        ("missing name", [{k: v for k, v in base.items() if k != "name"}]),
        ("missing api_key", [{k: v for k, v in base.items() if k != "api_key"}]),
        ("unknown field", [base | {"secret": SECRET}]),
        ("a field named like a secret", [base | {SECRET: 1}]),
        ("duplicate names", [base, base | {"api_key": "other"}]),
    ]
    documents += [(f"shape {shape!r}"[:60], shape) for shape in ([], {}, "x", 1, None, [1], [[]])]
    return documents


BAD = _bad_documents()


@pytest.mark.parametrize(("what", "document"), BAD, ids=[what for what, _ in BAD])
def test_a_bad_document_is_refused_naming_the_field_never_the_secret(what, document):
    with pytest.raises(ImproperlyConfigured) as caught:
        parse(document)
    message = str(caught.value)
    assert message.startswith("ACQUIRERS")
    assert SECRET not in message
    assert "Sup3rSecret" not in message


@pytest.mark.parametrize(
    "raw", ["[", '[{"name": "a"', "{'a': 1}", f'[{{"api_key": "{SECRET}"', "\x00", "NaN]"]
)
def test_text_that_is_not_json_is_refused_without_echoing_it(raw):
    with pytest.raises(ImproperlyConfigured, match="not valid JSON") as caught:
        parse_acquirers(raw)
    assert SECRET not in str(caught.value)


def test_the_corpus_covers_every_field_and_override():
    """The generated corpus is not empty-handed: every field and policy key appears."""
    fields = {what.split("=")[0] for what, _ in BAD}
    assert {"name", "base_url", "api_key", "currencies", "capture_methods", "priority"} <= fields
    policies = [doc[0]["policy"] for what, doc in BAD if what.startswith("policy=")]
    named = set(itertools.chain.from_iterable(p for p in policies if isinstance(p, dict)))
    assert set(POLICY_OVERRIDES) <= named


def test_a_currency_the_service_does_not_support_fails_the_payments_system_check(settings):
    """The settings parse ACQUIRERS without payments.core.money (they import no app: any three
    capital letters pass); the system check payments.E004 then names the acquirer and the
    unsupported code, never the key, and is silent on supported codes (ADR 0036)."""
    from django.core.checks import run_checks

    from payments.checks import acquirer_currencies_are_supported

    document = [{**VALID[0], "currencies": ["EUR", "XXX"]}, VALID[1]]
    settings.ACQUIRERS = parse_acquirers(json.dumps(document))
    errors = acquirer_currencies_are_supported()
    assert [error.id for error in errors] == ["payments.E004"]
    assert "beta" in errors[0].msg and "XXX" in errors[0].msg and "EUR" not in errors[0].msg
    assert SECRET not in str(errors[0])
    # Registered: the checks every manage.py command, gunicorn and Celery run find it.
    assert "payments.E004" in {message.id for message in run_checks()}

    settings.ACQUIRERS = parse(VALID)
    assert acquirer_currencies_are_supported() == []
    settings.ACQUIRERS = None
    assert acquirer_currencies_are_supported() == []
