"""The card-number detector (``card_data``), measured both ways on generated corpora (no database).

Every card number of :func:`tests.support.card_corpus.card_corpus` (every major brand, every
formatting) is found; the false-positive rate on realistic non-card text is computed here and
must match the table in ``docs/card-data.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from card_data import (
    REDACTED_CARD_NUMBER,
    contains_card_number,
    find_card_numbers,
    luhn_valid,
    redact_card_numbers,
)
from payments.api.card_data import (
    card_data_fields,
    is_card_number,
    looks_like_card_number,
    query_card_data_fields,
)
from tests.support.card_corpus import BRANDS, card_corpus, non_card_corpus

ROOT = Path(__file__).resolve().parents[2]
CORPUS = card_corpus()


def test_the_card_corpus_covers_every_brand_and_is_large():
    """Every brand of BRANDS at each of its lengths is in the corpus, in thousands of forms."""
    labels = {label.split("/")[0] + "/" + label.split("/")[1] for label, _ in CORPUS}
    expected = {f"{brand}/{length}" for brand, _, lengths in BRANDS for length in lengths}
    assert labels == expected
    assert len(CORPUS) > 10_000


def test_every_card_number_of_the_corpus_is_found_and_redacted():
    """Each entry holds a card number: found, and (every third entry, for time) gone once
    redacted."""
    missed = [label for label, text in CORPUS if not contains_card_number(text)]
    assert missed == []
    sample = CORPUS[::3]
    left = [label for label, text in sample if contains_card_number(redact_card_numbers(text))]
    assert left == []


def false_positive_table() -> str:
    """The Markdown table of docs/card-data.md: per category, texts, found, rate."""
    rows = ["| category | texts | refused | false positives |", "| --- | --- | --- | --- |"]
    total = flagged_total = 0
    for category, texts in non_card_corpus().items():
        flagged = sum(contains_card_number(text) for text in texts)
        rate = 100 * flagged / len(texts)
        rows.append(f"| {category} | {len(texts)} | {flagged} | {rate:.1f} % |")
        total, flagged_total = total + len(texts), flagged_total + flagged
    rows.append(f"| all | {total} | {flagged_total} | {100 * flagged_total / total:.1f} % |")
    return "\n".join(rows)


def test_false_positive_rate_is_the_documented_one():
    """The rate on realistic non-card text, computed here, is the one docs/card-data.md shows;
    dates, times, phone numbers, IBANs, UUIDs, amounts and ids are never refused."""
    table = false_positive_table()
    assert table in (ROOT / "docs/card-data.md").read_text(), table
    for category, texts in non_card_corpus().items():
        if category in {"timestamps", "order numbers", "parcel tracking numbers"}:
            continue  # a 13-19 digit number with a valid check digit: refused ~1 time in 10
        assert not [text for text in texts if contains_card_number(text)], category


@pytest.mark.parametrize(
    ("text", "spans"),
    [
        ("pan 4111 1111 1111 1111 exp 12/30", [(4, 23)]),
        ("4111111111111111 and 5555-5555-5555-4444", [(0, 16), (21, 40)]),
        ("4111 1111 1111 1111 12/30", [(0, 19)]),  # the expiry joins the chain, not the number
        ("1 4111111111111111", [(2, 18)]),
        ("41111111111111111111", [(0, 20)]),  # a card number glued to an expiry (11/11)
        ("98765432109876543210", []),  # 20 digits in a row: not a card number
        ("4111111111111112", []),  # fails the Luhn check
        ("0411111111111111116", []),  # no card number starts with 0
        ("4111 1111    1111 1111", []),  # four spaces: two numbers of 8 digits
        ("4111,1111,1111,1111", []),  # commas are not separators
        ("4111x1111x1111x1111", []),  # nor letters
        ("41 11 11 11 11 11 11 11", []),  # 2-digit groups are not how a card number is written
    ],
)
def test_spans_and_boundaries(text, spans):
    """Spans are [start, end) of the digits; the rules of docs/card-data.md decide the rest."""
    assert find_card_numbers(text) == spans


@pytest.mark.parametrize(
    "text",
    [
        "pay_a1234567890123456789bcde",  # our payment id: 24 hex characters
        "re_4111111111111111abcdef01",
        "550e8400-e29b-41d4-a716-446655440000",
        "12345678-1234-4234-8234-123456789012",  # a UUID of digits only
        "DE89 3704 0044 0532 0130 00",  # a valid IBAN
        "DE89370400440532013000",
        "+86 138 0013 8000 1",  # E.164: at most 15 digits after the +
        "+378282246310005",
        "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    ],
)
def test_known_non_card_shapes(text):
    """Ids, UUIDs, valid IBANs and E.164 numbers are not card numbers, whatever their digits."""
    assert find_card_numbers(text) == []


def test_an_iban_with_a_wrong_check_holds_card_numbers_again():
    """Only an IBAN whose ISO 13616 check is right is set aside; a card number after an IBAN,
    or one dressed as an IBAN with a wrong check, is found."""
    assert contains_card_number("DE00 4111 1111 1111 1111")
    assert contains_card_number("DE89 3704 0044 0532 0130 00 and 4111 1111 1111 1111")


def test_redaction_options():
    """``replacement`` replaces each number; ``require_luhn=False`` redacts any candidate."""
    text = "a 4111 1111 1111 1111 b 4111 1111 1111 1112 c"
    assert redact_card_numbers(text) == f"a {REDACTED_CARD_NUMBER} b 4111 1111 1111 1112 c"
    assert redact_card_numbers(text, replacement="#", require_luhn=False) == "a # b # c"
    assert redact_card_numbers("nothing here 12") == "nothing here 12"


def test_luhn_valid():
    """ISO/IEC 7812-1 annex B, on the test numbers of the brands."""
    assert all(luhn_valid(n) for n in ["4111111111111111", "378282246310005", "30569309025904"])
    assert not luhn_valid("4111111111111112")


@pytest.mark.parametrize(
    "hostile",
    [
        "1 " * 32_000,
        "4-" * 32_000,
        "%3" * 32_000,
        "%31%20" * 11_000,
        "\\u003" * 13_000,
        "4242 " * 13_000,
        "4" * 64_000,
        "\u0664\u00a0" * 32_000,
        "1\u2489" * 32_000,  # "⒉": NFKC "2."
        "DE89 " + "1234 " * 13_000,
        "a" * 32_000 + "1" * 32_000,
    ],
    ids=["digits-spaces", "digits-dashes", "broken-escapes", "escapes", "broken-json",
         "groups", "one-run", "arabic-nbsp", "nfkc", "iban-prefix", "hex-like"],
)  # fmt: skip
def test_long_hostile_inputs_are_scanned_in_one_pass(hostile):
    """64 kB inputs shaped to make a backtracking matcher explode: one linear scan each (the
    suite would hang otherwise); the answers are still right."""
    spans = find_card_numbers(hostile)
    assert all(0 <= start < end <= len(hostile) for start, end in spans)
    if hostile.startswith("1 1 "):
        assert spans == []  # 13 to 19 ones never pass the Luhn check
    if hostile.startswith("4242 4242"):
        assert spans == [(0, len(hostile) - 1)]  # 4242 x 4 passes: windows overlap all along


# --- payments.api.card_data, on top of the detector ---------------------------------------------


def test_payments_card_data_functions():
    """looks_like_card_number = contains; is_card_number = the whole text is one number;
    card_data_fields walks keys and values; query_card_data_fields names parameters."""
    assert looks_like_card_number("order-4242424242424242")
    assert not looks_like_card_number("order-2026-11-29")
    assert is_card_number(" 4242 4242 4242 4242 ")
    assert not is_card_number("order-4242424242424242")
    data = {
        "a": {"b": ["x", "4242 4242 4242 4242"]},
        "4242424242424242": 1,
        "n": 4242424242424242,
        "f": 4242424242424242.0,
        "ok": "1",
        "deep": [[{"k": "pan\u00a04242.4242.4242.4242"}]],
    }
    assert card_data_fields(data) == ["[redacted]", "a.b[1]", "deep[0][0].k", "f", "n"]
    assert query_card_data_fields({"reference": ["5555 5555 5555 4444"], "limit": "2"}) == [
        "reference"
    ]
    assert query_card_data_fields({"4242424242424242": "1"}) == ["[redacted]"]
