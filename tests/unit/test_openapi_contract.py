"""The OpenAPI document against the API's own validation (ADR 0043): the document is valid
OpenAPI 3 (``openapi-spec-validator``), and on generated corpora what the document says is
valid is exactly what the validation accepts, rule by rule: every field of every input
serializer (bodies and query strings), every body as a whole (``additionalProperties``,
``required``), the ``Idempotency-Key`` header against its parser; card data is refused beyond
the schema, as the document says. A webhook URL matching the schema's pattern passes the URL
rules (a subset: whether a host resolves is beyond any schema). No database, no subprocess:
the document is generated in-process, as /openapi.json serves it. Deterministic (fixed seeds).
"""

from __future__ import annotations

import random
import re
import string
from functools import cache
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from openapi_schema_validator import OAS30Validator
from openapi_spec_validator import validate as validate_spec
from rest_framework import serializers

from idempotency.errors import IdempotencyKeyInvalid
from idempotency.keys import MAX_KEY_LENGTH, parse_idempotency_key
from payments.api import openapi_answers as openapi
from payments.api.card_data import card_data_fields, looks_like_card_number
from payments.api.problems import Problem
from payments.api.serializers import (
    CaptureInputSerializer,
    PaymentCreateInputSerializer,
    PaymentListQuerySerializer,
    RefundInputSerializer,
    RefundListQuerySerializer,
    StrictStringField,
    VoidInputSerializer,
)
from payments.api.webhook_serializers import (
    EndpointListQuerySerializer,
    EventListQuerySerializer,
    RotateSecretInputSerializer,
    WebhookEndpointInputSerializer,
)
from tests.unit.test_payment_create_input import corpus as create_corpus
from tests.unit.test_payment_create_input import field_values
from webhooks.events import EVENT_TYPES
from webhooks.url_safety import UnsafeUrl, check_url, url_pattern

#: Body serializer -> its component in the document.
BODIES = {
    PaymentCreateInputSerializer: "PaymentCreateInputRequest",
    CaptureInputSerializer: "CaptureInputRequest",
    VoidInputSerializer: "VoidInputRequest",
    RefundInputSerializer: "RefundInputRequest",
    WebhookEndpointInputSerializer: "WebhookEndpointInputRequest",
    RotateSecretInputSerializer: "RotateSecretInputRequest",
}
#: Query serializer -> the (path, method) whose parameters it defines.
QUERIES = {
    PaymentListQuerySerializer: ("/payments", "get"),
    RefundListQuerySerializer: ("/payments/{payment_id}/refunds", "get"),
    EndpointListQuerySerializer: ("/webhook_endpoints", "get"),
    EventListQuerySerializer: ("/events", "get"),
}
LOOPBACK_URL = "http://127.0.0.1:9/hooks"

#: Characters that sit on the edges of the rules: controls, separators, format characters,
#: unassigned and private-use code points, surrogates, astral ones, and plain text.
EDGE_CHARACTERS = (
    "\x00\t\n\r\x1f\x7f\x85\xa0\xad\u0378\u200b\u2028\u202e\u3000\ud800\udfff\ue000\ufeff"
    '\U0001f600\U000e0001\U0010ffff ~"\\,é日١'
)


@cache
def document() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


_VALIDATORS: dict[int, OAS30Validator] = {}


def schema_accepts(schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` is valid against ``schema`` (a part of the document; its ``$ref``s
    resolved in the document's components)."""
    if id(schema) not in _VALIDATORS:
        _VALIDATORS[id(schema)] = OAS30Validator({**schema, "components": document()["components"]})
    return _VALIDATORS[id(schema)].is_valid(value)


def field_accepts(field: serializers.Field, value: Any) -> bool:
    try:
        field.run_validation(value)
    except serializers.ValidationError:
        return False
    return True


def texts(seed: int, max_length: int) -> list[str]:
    """Strings around a field's rules: the edge characters alone and amid text, lengths 0 to
    just past ``max_length``, and seeded random mixtures of both."""
    rng = random.Random(seed)
    plain = string.ascii_letters + string.digits + "_-. "
    values = ["", "a", *EDGE_CHARACTERS, "a\n", "tok_a\n", "\nEUR"]
    values += [f"ab{c}cd" for c in EDGE_CHARACTERS]
    for length in (max_length - 1, max_length, max_length + 1):
        values.append("x" * length)
        values.append("é" * (length - 1) + "\n")
    for _ in range(400):
        alphabet = rng.choice([plain, plain + EDGE_CHARACTERS, EDGE_CHARACTERS])
        length = rng.choice([1, 2, 5, max_length, rng.randint(0, max_length + 2)])
        values.append("".join(rng.choice(alphabet) for _ in range(length)))
    return values


def test_the_document_is_valid_openapi():
    validate_spec(document())
    assert document()["openapi"].startswith("3.0")


def test_every_operation_has_its_answers_links_and_rules_beyond_the_schema():
    """Each operation of the table is in the document and the other way round; each create's
    links name operations that exist; each response has its headers."""
    operations = {
        entry["operationId"]: entry
        for path in document()["paths"].values()
        for entry in path.values()
        if isinstance(entry, dict) and "operationId" in entry
    }
    assert set(operations) == set(openapi.OPERATIONS)
    for name, entry in operations.items():
        assert entry["x-refusals-beyond-schema"], name
        for status, response in entry["responses"].items():
            assert "Request-Id" in response["headers"], (name, status)
            for link in response.get("links", {}).values():
                assert link["operationId"] in operations
            if int(status) >= 400:
                codes = response["x-problem-codes"]
                assert codes and {openapi.CODES[code].status for code in codes} == {int(status)}
    links = {
        (name, link["operationId"])
        for name, entry in operations.items()
        for response in entry["responses"].values()
        for link in response.get("links", {}).values()
    }
    assert {
        ("payments_create", "payments_capture"),
        ("payments_create", "payments_void"),
        ("payments_create", "refunds_create"),
        ("payments_create", "payments_retrieve"),
        ("refunds_create", "refunds_retrieve"),
        ("webhook_endpoints_create", "webhook_endpoints_retrieve"),
        ("webhook_endpoints_create", "webhook_endpoints_delete"),
        ("webhook_endpoints_create", "webhook_endpoints_rotate_secret"),
        ("events_list", "events_retrieve"),
    } <= links


def test_every_documented_problem_code_is_raised_by_the_code():
    """Each code of the table appears as a code in the service's sources (a typo, or a code
    no longer raised, fails)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sources = "".join(
        path.read_text()
        for package in ("payments", "idempotency", "merchants", "webhooks")
        for path in (root / package).rglob("*.py")
        if path.name != "openapi.py"
    )
    drf = {"authentication_required", "authentication_failed", "unsupported_media_type"}
    for code in set(openapi.CODES) - drf:
        assert re.search(rf'(code=|default_code = |"){code}"', sources), code


def _fields(serializer: type[serializers.Serializer]) -> dict[str, serializers.Field]:
    return dict(serializer().fields)


@pytest.mark.parametrize("serializer", list(BODIES), ids=lambda s: s.__name__)
def test_each_body_field_is_valid_in_the_document_exactly_when_the_api_accepts_it(serializer):
    component = document()["components"]["schemas"][BODIES[serializer]]
    for name, field in _fields(serializer).items():
        schema = component["properties"][name]
        if name in ("url", "return_url"):
            # A subset, both the webhooks' URL rules: test_a_url_the_schema_allows_passes_...
            continue
        values = [*field_values(), *texts(len(name), getattr(field, "max_length", 64) or 64)]
        if name == "enabled_events":
            types = sorted(EVENT_TYPES)
            values = [[], ["*"], ["*", "*"], ["*", types[0]], types, types + types[:1],
                      types + types[:2], [types[0]] * 3, ["payment.unknown"], [1], "x",
                      *[[value] for value in values]]  # fmt: skip
        mismatches = [
            value
            for value in values
            if schema_accepts(schema, value) != field_accepts(field, value)
        ]
        assert mismatches == [], f"{serializer.__name__}.{name}: {mismatches[:5]!a}"


def test_each_body_is_valid_in_the_document_exactly_when_the_api_accepts_it_or_holds_card_data():
    """The create corpus (tests/unit/test_payment_create_input.py: shapes, missing and unknown
    members, card numbers anywhere) and the other bodies with members added and removed: the
    API accepts a body exactly when the document does and it holds no card number (the rule
    beyond the schema)."""
    bodies = {
        # A seeded quarter of it: the field-by-field test above covers every value.
        PaymentCreateInputSerializer: random.Random(29).sample(list(create_corpus()), 1100),
        CaptureInputSerializer: [{}, {"amount": 1}, {"amount": 0}, {"amount": "1"}, {"x": 1}],
        VoidInputSerializer: [{}, {"x": 1}, [], None, {"": None}],
        RefundInputSerializer: [{}, {"reason": "duplicate", "amount": 5}, {"reason": "x"},
                                {"amount": 4242424242424242}, {"reason": "duplicate", "y": 1}],
        WebhookEndpointInputSerializer: [
            {"url": LOOPBACK_URL, "enabled_events": ["*"]},
            {"url": LOOPBACK_URL, "enabled_events": ["*"], "description": "shop"},
            {"url": LOOPBACK_URL, "enabled_events": ["*"], "secret": "x"},
            {"url": LOOPBACK_URL}, {"enabled_events": ["*"]},
            {"url": LOOPBACK_URL, "enabled_events": ["*"], "description": "4242424242424242"},
        ],
        RotateSecretInputSerializer: [{}, {"overlap": 10}, [], "x"],
    }  # fmt: skip
    for serializer, corpus in bodies.items():
        schema = document()["components"]["schemas"][BODIES[serializer]]
        mismatches = []
        for body in corpus:
            expected = schema_accepts(schema, body) and not card_data_fields(body)
            try:
                accepted = serializer(data=body).is_valid()
            except Problem:  # the card-data refusal is raised, not collected
                accepted = False
            if accepted != expected:
                mismatches.append(body)
        assert mismatches == [], f"{serializer.__name__}: {mismatches[:5]!a}"


@pytest.mark.parametrize("serializer", list(QUERIES), ids=lambda s: s.__name__)
def test_each_query_parameter_is_valid_in_the_document_exactly_when_the_api_accepts_it(
    serializer,
):
    """Text parameters judged as sent; ``limit`` by the integers the document allows, sent in
    decimal as every client writes them."""
    path, method = QUERIES[serializer]
    parameters = {p["name"]: p for p in document()["paths"][path][method]["parameters"]}
    for name, field in _fields(serializer).items():
        schema = parameters[name]["schema"]
        if isinstance(field, StrictStringField):
            pairs = [(value, value) for value in texts(len(name), field.max_length)]
        else:
            pairs = [(str(n), n) for n in range(-3, 106)] + [(str(2**70), 2**70)]
        mismatches = [sent for sent, value in pairs
                      if schema_accepts(schema, value) != field_accepts(field, sent)]  # fmt: skip
        assert mismatches == [], f"{serializer.__name__}.{name}: {mismatches[:5]!a}"


def key_accepted(value: str) -> bool:
    try:
        parse_idempotency_key(value)
    except IdempotencyKeyInvalid:
        return False
    return not looks_like_card_number(value)


def test_the_idempotency_key_is_valid_in_the_document_exactly_when_the_parser_accepts_it():
    rng = random.Random(33)
    alphabet = ' \t"\\,a~!#\x7f\x1fé\n'
    longest, escaped = "a" * MAX_KEY_LENGTH, "\\\\" * MAX_KEY_LENGTH
    corpus = ["", " ", '""', '"a"', '"a\\"b"', '"a\\b"', '"a,b"', "a,b", '"a"b"', "a b",
              '"a b"', longest, longest + "a", f'"{longest}"', f'"{longest}a"', f'"{escaped}"',
              "a\n", "\ta\t"]  # fmt: skip
    corpus += ["".join(rng.choices(alphabet, k=rng.randint(1, 7))) for _ in range(4000)]
    parameter = next(
        p
        for p in document()["paths"]["/payments"]["post"]["parameters"]
        if p["name"] == "Idempotency-Key"
    )
    mismatches = [
        key for key in corpus if schema_accepts(parameter["schema"], key) != key_accepted(key)
    ]
    assert mismatches == [], mismatches[:5]


def urls(seed: int, allow_local: bool) -> list[str]:
    """URLs built from the pattern's parts, seeded: host names (one to four labels, hyphens,
    63-character labels), the allowed ports or none, loopback on any port when ``allow_local``,
    paths and queries of every character the pattern allows."""
    rng = random.Random(seed)
    label_chars = string.ascii_letters + string.digits
    path_chars = label_chars + "._~!$&'()*+,;=:@%/-"

    def label() -> str:
        middle = "".join(rng.choices(label_chars + "-", k=rng.choice([0, 1, 5, 61])))
        return rng.choice(label_chars) + (middle + rng.choice(label_chars) if middle else "")

    found = []
    for _ in range(500):
        if allow_local and rng.random() < 0.3:
            port = rng.choice(["", ":1", ":80", ":8080", ":65535"])
            origin = f"{rng.choice(['http', 'https'])}://127.0.0.1{port}"
        else:
            labels = [label() for _ in range(rng.randint(1, 4))]
            tld = "".join(rng.choices(string.ascii_letters, k=rng.choice([2, 3, 63])))
            port = rng.choice(["", ":443", ":8443"])
            origin = f"https://{'.'.join([*labels, tld])}{port}"
        path = rng.choice(["", "/", "/" + "".join(rng.choices(path_chars, k=rng.randint(0, 40)))])
        query = rng.choice(["", "?", "?" + "".join(rng.choices(path_chars + "?", k=9))])
        found.append(origin + path + query)
    return found


@pytest.mark.parametrize("allow_local", [False, True])
def test_a_url_the_schema_allows_passes_the_url_rules(allow_local):
    """Every generated URL the pattern allows passes ``check_url`` with a resolver that
    answers a public address (the resolution itself is beyond any schema); the pattern
    refuses what the rules refuse in form (http, other ports, user names, fragments)."""

    def public(host, port, **kwargs):
        address = "127.0.0.1" if host == "127.0.0.1" else "93.184.215.14"
        return [(2, 1, 6, "", (address, port))]

    pattern = re.compile(url_pattern(allow_local=allow_local))
    allowed = [url for url in urls(43, allow_local) if pattern.search(url)]
    assert len(allowed) > 400
    refused = []
    for url in allowed:
        try:
            check_url(url, allow_local=allow_local, resolver=public)
        except UnsafeUrl as exc:
            refused.append((url, exc.code))
    assert refused == []
    for url in [
        "http://shop.example/",
        "https://shop.example:8080/",
        "https://u:p@shop.example/",
        "https://shop.example/#x",
        "https://shop.example/\n",
        "ftp://shop.example/",
    ]:
        assert not pattern.search(url), url
