"""Parsing the Idempotency-Key header and fingerprinting requests (no database)."""

from __future__ import annotations

import random

import pytest

from idempotency.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing
from idempotency.fingerprint import canonical_json, request_fingerprint
from idempotency.keys import parse_idempotency_key
from merchant_client.client import _idempotency_key_field


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("abc", "abc"),
        ("  abc\t", "abc"),
        ('"abc"', "abc"),
        ('"a\\"b"', 'a"b'),
        ('"a\\\\b"', "a\\b"),
        ("a" * 255, "a" * 255),
        ("550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000"),
        ("!~", "!~"),
        ("Key", "Key"),
    ],
)
def test_valid_keys(header, key):
    """Bare and RFC 8941 quoted forms, 1-255 characters of %x21-7E."""
    assert parse_idempotency_key(header) == key


def test_absent_header_is_missing():
    """No header at all -> idempotency_key_missing."""
    with pytest.raises(IdempotencyKeyMissing):
        parse_idempotency_key(None)


@pytest.mark.parametrize(
    "header",
    [
        "",
        "   ",
        '""',
        "a" * 256,
        '"' + "a" * 256 + '"',
        "ab c",
        '"ab c"',
        "caf\u00e9",  # a non-ASCII header arrives latin-1 decoded under WSGI
        "\u00c3\u00a9",  # UTF-8 bytes of 'é' seen as latin-1: mojibake
        "a\x00b",
        "a\x7fb",
        '"abc',
        '"a\\nb"',
        '"a"b"',
    ],
)
def test_invalid_keys(header):
    """Empty, too long, inner space, non-ASCII, control characters, broken quoting -> invalid."""
    with pytest.raises(IdempotencyKeyInvalid):
        parse_idempotency_key(header)


def test_fingerprint_ignores_key_order():
    """The same object with another key order has the same fingerprint."""
    a = request_fingerprint("POST", "/payments", {"amount": 1, "currency": "EUR"})
    b = request_fingerprint("POST", "/payments", {"currency": "EUR", "amount": 1})
    assert a == b
    assert len(a) == 64


@pytest.mark.parametrize(
    ("method", "route", "body"),
    [
        ("POST", "/payments", {"amount": 2, "currency": "EUR"}),
        ("PUT", "/payments", {"amount": 1, "currency": "EUR"}),
        ("POST", "/refunds", {"amount": 1, "currency": "EUR"}),
        ("POST", "/payments", {"amount": 1, "currency": "EUR", "reference": "r"}),
    ],
)
def test_fingerprint_changes_with_method_route_or_body(method, route, body):
    """Any change of method, route or body changes the fingerprint."""
    base = request_fingerprint("POST", "/payments", {"amount": 1, "currency": "EUR"})
    assert request_fingerprint(method, route, body) != base


def test_canonical_json_form():
    """Sorted keys, no whitespace, UTF-8 (RFC 8785 style)."""
    assert canonical_json({"b": "é", "a": [1, {"d": 2, "c": 3}]}) == (
        '{"a":[1,{"c":3,"d":2}],"b":"é"}'.encode()
    )


def test_canonical_json_refuses_nan():
    """NaN has no JSON form."""
    with pytest.raises(ValueError, match=r"^Out of range float values are not JSON compliant"):
        canonical_json({"a": float("nan")})


def _repeated_fields_corpus(count: int = 400) -> list[str]:
    """Two or three Idempotency-Key fields as a server joins them (RFC 9110 section 5.3: with
    ``,`` or ``, ``), each field bare or quoted, each key a valid one: generated, fixed seed."""
    rng = random.Random(20261201)
    alphabet = [chr(code) for code in range(0x21, 0x7F) if chr(code) not in ',"\\']
    corpus = []
    for _ in range(count):
        fields = []
        for _ in range(rng.choice((2, 2, 3))):
            key = "".join(rng.choices(alphabet, k=rng.randint(1, 40)))
            fields.append(f'"{key}"' if rng.random() < 0.4 else key)
        corpus.append(rng.choice((",", ", ")).join(fields))
    return corpus


@pytest.mark.parametrize("header", _repeated_fields_corpus())
def test_repeated_fields_name_no_key(header):
    """Two fields (or a list in one) are refused, never taken as one key with a comma in it."""
    with pytest.raises(IdempotencyKeyInvalid):
        parse_idempotency_key(header)


@pytest.mark.parametrize(("header", "key"), [('"a,b"', "a,b"), ('","', ",")])
def test_a_comma_inside_a_quoted_key_is_part_of_it(header, key):
    """A key that contains a comma is sent quoted (an RFC 8941 string) and is one key."""
    assert parse_idempotency_key(header) == key


def _merchant_keys_corpus(count: int = 400) -> list[str]:
    """Keys a merchant may choose (1-255 of %x21-7E), generated with a fixed seed, weighted
    toward the characters a bare field cannot carry: ``,``, ``"`` and ``\\``."""
    rng = random.Random(1201)
    visible = [chr(code) for code in range(0x21, 0x7F)]
    awkward = [",", '"', "\\"]
    keys = [",", '"', "\\", '""', '"a"', "a,b", "\\,\\"]
    while len(keys) < count:
        length = rng.choice((1, 2, 5, 40, 255))
        keys.append(
            "".join(rng.choice(awkward if rng.random() < 0.3 else visible) for _ in range(length))
        )
    return keys


@pytest.mark.parametrize("key", _merchant_keys_corpus())
def test_the_merchant_client_sends_every_key_so_the_api_reads_it_back(key):
    """The merchant client's field value for any valid key (quoted when it must be) is parsed
    by the API's parser into the same key."""
    assert parse_idempotency_key(_idempotency_key_field(key)) == key
