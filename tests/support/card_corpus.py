"""Generated corpora for the card-number detector (``card_data``), both ways.

:func:`card_corpus`: card numbers of every major brand (valid Luhn check digit, random body from
a fixed seed) in every formatting we could think of: groupings, separators, Unicode digit forms,
embedded in text, percent-encoded, ``+`` for a space, JSON ``\\u`` escapes. Every entry must be
found.

:func:`non_card_corpus`: realistic text that is not card data, by category (dates, times,
timestamps, phone numbers, IBANs, order numbers, UUIDs, amounts, ids, parcel tracking numbers),
for the false-positive rate ``docs/card-data.md`` reports.
"""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import quote, quote_plus

from card_data import luhn_valid

#: (brand, issuer identification number prefixes, lengths). Maestro from 13 (12 is below the
#: detector's floor: no 12-digit PAN is issued today).
BRANDS: list[tuple[str, list[str], list[int]]] = [
    ("visa", ["4"], [13, 16, 19]),
    ("mastercard-5", ["51", "52", "53", "54", "55"], [16]),
    ("mastercard-2", ["2221", "2300", "2500", "2720"], [16]),
    ("amex", ["34", "37"], [15]),
    ("discover", ["6011", "644", "649", "65", "622126", "622925"], [16, 19]),
    ("jcb", ["3528", "3550", "3589"], [16, 17, 18, 19]),
    ("diners", ["36", "300", "305"], [14]),
    ("diners-us", ["38", "39"], [16]),
    ("unionpay", ["62", "81"], [16, 17, 18, 19]),
    ("maestro", ["5018", "5020", "5038", "5893", "6304", "6759", "6761", "6763"], [13, 15, 16, 19]),
    ("mir", ["2200", "2204"], [16]),
    ("rupay", ["60", "652", "508"], [16]),
    ("troy", ["9792"], [16]),
]


def luhn_complete(body: str) -> str:
    """``body`` plus the check digit that makes it Luhn-valid."""
    for digit in "0123456789":
        if luhn_valid(body + digit):
            return body + digit
    raise AssertionError("unreachable")


def pans(rnd: random.Random, per_brand_length: int = 2) -> Iterator[tuple[str, str]]:
    """(brand, PAN) pairs: ``per_brand_length`` per brand and length, random prefixes."""
    for brand, prefixes, lengths in BRANDS:
        for length in lengths:
            for _ in range(per_brand_length):
                prefix = rnd.choice(prefixes)
                body = prefix + "".join(rnd.choices("0123456789", k=length - len(prefix) - 1))
                yield brand, luhn_complete(body)


def split(pan: str, sizes: list[int]) -> list[str]:
    """``pan`` cut into groups of ``sizes`` (repeating the last size), the rest last."""
    groups, position, index = [], 0, 0
    while position < len(pan):
        size = sizes[min(index, len(sizes) - 1)]
        groups.append(pan[position : position + size])
        position, index = position + size, index + 1
    return groups


#: How people and programs group a card number's digits.
GROUPINGS: dict[str, list[int]] = {
    "4-4-4-4": [4],
    "4-6-5": [4, 6, 5],
    "4-6-4": [4, 6, 4],
    "6-rest": [6, 19],
    "5s": [5],
    "3s": [3],
    "8-rest": [8, 19],
    "one-by-one": [1],
}

#: Separators between groups.
SEPARATORS: dict[str, str] = {
    "space": " ", "two-spaces": "  ", "three-spaces": "   ", "dash": "-", "spaced-dash": " - ",
    "dot": ".", "dot-space": ". ", "slash": "/", "underscore": "_", "tab": "\t", "newline": "\n",
    "crlf": "\r\n", "plus": "+", "nbsp": "\u00a0", "thin-space": "\u2009",
    "narrow-nbsp": "\u202f", "figure-space": "\u2007", "ideographic-space": "\u3000",
    "en-dash": "\u2013", "em-dash": "\u2014", "hyphen": "\u2010", "nb-hyphen": "\u2011",
    "minus": "\u2212", "fullwidth-hyphen": "\uff0d", "zero-width-space": "\u200b",
    "soft-hyphen": "\u00ad", "middle-dot": "\u00b7", "bullet": "\u2022",
    "fullwidth-dot": "\uff0e", "fullwidth-slash": "\uff0f", "line-separator": "\u2028",
}  # fmt: skip

#: Digit forms: each maps an ASCII digit to the form's digit.
DIGIT_FORMS: dict[str, Callable[[str], str]] = {
    "ascii": lambda d: d,
    "fullwidth": lambda d: chr(0xFF10 + int(d)),
    "arabic-indic": lambda d: chr(0x0660 + int(d)),
    "extended-arabic-indic": lambda d: chr(0x06F0 + int(d)),
    "devanagari": lambda d: chr(0x0966 + int(d)),
    "bengali": lambda d: chr(0x09E6 + int(d)),
    "thai": lambda d: chr(0x0E50 + int(d)),
    "mathematical-bold": lambda d: chr(0x1D7CE + int(d)),
    "superscript": lambda d: "⁰¹²³⁴⁵⁶⁷⁸⁹"[int(d)],
    "circled": lambda d: "⓪①②③④⑤⑥⑦⑧⑨"[int(d)],
    "subscript": lambda d: chr(0x2080 + int(d)),
}

#: Where the number sits in a text.
EMBEDDINGS: dict[str, str] = {
    "alone": "{}", "pan-prefix": "pan {}", "with-expiry": "card {} exp 12/30",
    "order-prefix": "order-{}", "glued-letters": "x{}y", "parentheses": "({})",
    "sentence": "my card is {}, thanks", "quoted": '"{}"', "key-value": "number={}",
    "after-newline": "note:\n{}\n", "cvv-after": "{} cvv 123", "hash": "#{}",
    "colon": "card:{}", "two-cards": "{} and 4111111111111111",
}  # fmt: skip


def _mixed_separators(groups: list[str]) -> str:
    cycle = [" ", "-", ".", "\u00a0", "/"]
    text = groups[0]
    for index, group in enumerate(groups[1:]):
        text += cycle[index % len(cycle)] + group
    return text


def card_corpus(seed: int = 14) -> list[tuple[str, str]]:
    """(label, text) pairs, each text holding one card number (or more)."""
    rnd = random.Random(seed)
    corpus: list[tuple[str, str]] = []
    for brand, pan in pans(rnd):
        base = f"{brand}/{len(pan)}"
        corpus.append((f"{base}/plain", pan))
        for grouping, sizes in GROUPINGS.items():
            groups = split(pan, sizes)
            for name, separator in SEPARATORS.items():
                corpus.append((f"{base}/{grouping}/{name}", separator.join(groups)))
            corpus.append((f"{base}/{grouping}/mixed", _mixed_separators(groups)))
        four = split(pan, [4])
        for form, digit in DIGIT_FORMS.items():
            converted = ["".join(digit(d) for d in group) for group in four]
            corpus.append((f"{base}/{form}/plain", "".join(converted)))
            corpus.append((f"{base}/{form}/4-4-4-4", " ".join(converted)))
        mixed_forms = "".join(DIGIT_FORMS[rnd.choice(list(DIGIT_FORMS))](d) for d in pan)
        corpus.append((f"{base}/mixed-forms", mixed_forms))
        for embedding, template in EMBEDDINGS.items():
            corpus.append((f"{base}/embedded/{embedding}", template.format(pan)))
            corpus.append((f"{base}/embedded/{embedding}/spaced", template.format(" ".join(four))))
        spaced = " ".join(four)
        corpus.extend(
            [
                (f"{base}/url/quote", "/payments?reference=" + quote(spaced)),
                (f"{base}/url/quote-plus", "reference=" + quote_plus(spaced) + "&limit=2"),
                (f"{base}/url/quote-dashes", "q=" + quote("-".join(four))),
                (f"{base}/url/all-digits-encoded", "q=" + "".join(f"%{ord(c):02X}" for c in pan)),
                (
                    f"{base}/url/fullwidth-utf8",
                    "q=" + quote(" ".join(DIGIT_FORMS["fullwidth"](d) for d in pan)),
                ),
                (f"{base}/json/escaped-digits", "".join(f"\\u{ord(c):04x}" for c in pan)),
                (
                    f"{base}/json/dumps-fullwidth",
                    json.dumps({"n": "".join(DIGIT_FORMS["fullwidth"](d) for d in pan)}),
                ),
                (f"{base}/json/as-key", json.dumps({pan: 1})),
                (f"{base}/json/escaped-spaces", "\\u0020".join(four)),
            ]
        )
    return corpus


# --- Not card data --------------------------------------------------------------------------


def _iban(rnd: random.Random, country: str, bban_length: int) -> str:
    """A valid IBAN (ISO 13616 check digits) of ``country`` with a random numeric BBAN."""
    bban = "".join(rnd.choices("0123456789", k=bban_length))
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    check = 98 - int(numeric) % 97
    return f"{country}{check:02d}{bban}"


def _print_format(iban: str) -> str:
    return " ".join(iban[i : i + 4] for i in range(0, len(iban), 4))


def _hex(rnd: random.Random, length: int) -> str:
    return "".join(rnd.choices("0123456789abcdef", k=length))


def _digits(rnd: random.Random, length: int) -> str:
    return str(rnd.randint(1, 9)) + "".join(rnd.choices("0123456789", k=length - 1))


def non_card_corpus(seed: int = 14, per_category: int = 300) -> dict[str, list[str]]:
    """Category -> ``per_category`` realistic texts that are not card numbers."""
    rnd = random.Random(seed)
    generators: dict[str, Callable[[], str]] = {}

    def date() -> tuple[int, int, int]:
        return rnd.randint(1990, 2035), rnd.randint(1, 12), rnd.randint(1, 28)

    def dates() -> str:
        (y, m, d), (y2, m2, d2) = date(), date()
        return rnd.choice(
            [
                f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{d:02d}.{m:02d}.{y}",
                f"{y}{m:02d}{d:02d}", f"{y}-{m:02d}-{d:02d} to {y2}-{m2:02d}-{d2:02d}",
                f"{d:02d}/{m:02d}/{y} - {d2:02d}/{m2:02d}/{y2}",
                f"{y}/{m:02d}/{d:02d} {y2}/{m2:02d}",
                f"{m}/{d}/{y}", f"delivery {d:02d}.{m:02d}.{y} {d2:02d}.{m2:02d}.{y2}",
            ]
        )  # fmt: skip

    def times() -> str:
        h, mi, s = rnd.randint(0, 23), rnd.randint(0, 59), rnd.randint(0, 59)
        (y, m, d) = date()
        return rnd.choice(
            [
                f"{h:02d}:{mi:02d}", f"{h:02d}:{mi:02d}:{s:02d}.{rnd.randint(0, 999):03d}",
                f"{y}-{m:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z",
                f"{y}-{m:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}+01:00",
                f"{y}-{m:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.{rnd.randint(0, 999999):06d}Z",
                f"{d:02d}.{m:02d}.{y} {h:02d}.{mi:02d}", f"{h:02d}h{mi:02d}",
            ]
        )  # fmt: skip

    def timestamps() -> str:
        seconds = rnd.randint(1_500_000_000, 1_900_000_000)
        return rnd.choice(
            [
                str(seconds), f"ts={seconds}", f"{seconds}.{rnd.randint(0, 999):03d}",
                f"{seconds * 1000 + rnd.randint(0, 999)}",
                f"{seconds}.{rnd.randint(0, 999999):06d}",
            ]
        )  # fmt: skip

    def phones() -> str:
        return rnd.choice(
            [
                f"+44 20 {rnd.randint(7000, 7999)} {rnd.randint(1000, 9999)}",
                f"+44{rnd.randint(1000000000, 7999999999)}",
                f"+1 ({rnd.randint(200, 999)}) {rnd.randint(200, 999)}-{rnd.randint(1000, 9999)}",
                f"+1{rnd.randint(2000000000, 9999999999)}",
                f"+86 1{rnd.randint(30, 89)} {rnd.randint(1000, 9999)} {rnd.randint(1000, 9999)}",
                f"+861{rnd.randint(3000000000, 8999999999)}",
                f"+49 {rnd.randint(30, 89)} {rnd.randint(10000000, 99999999)}",
                f"+49 1{rnd.randint(50, 79)} {rnd.randint(1000000, 99999999)}",
                f"0{rnd.randint(20, 99)} {rnd.randint(1000, 9999)} {rnd.randint(1000, 9999)}",
                f"00 44 20 {rnd.randint(7000, 7999)} {rnd.randint(1000, 9999)}",
                f"tel: +{rnd.randint(1, 998)} {rnd.randint(100, 999)} "
                f"{rnd.randint(100000, 999999)}",
                f"+33 6 {rnd.randint(10, 99)} {rnd.randint(10, 99)} {rnd.randint(10, 99)} "
                f"{rnd.randint(10, 99)}",
                f"({rnd.randint(200, 999)}) {rnd.randint(200, 999)}-{rnd.randint(1000, 9999)} "
                f"ext. {rnd.randint(10, 9999)}",
            ]
        )  # fmt: skip

    ibans = [("DE", 18), ("FR", 23), ("GB", 18), ("NL", 14), ("ES", 20), ("IT", 23), ("BE", 12),
             ("CH", 17), ("AT", 16), ("PL", 24), ("SE", 20), ("PT", 21)]  # fmt: skip

    def iban() -> str:
        country, length = rnd.choice(ibans)
        # GB and NL BBANs start with a bank code of letters: random digits keep the check valid.
        value = _iban(rnd, country, length)
        return rnd.choice([value, _print_format(value), f"IBAN {_print_format(value)}"])

    def orders() -> str:
        return rnd.choice(
            [
                f"order-{rnd.randint(1, 10**6)}", f"ORD-{_digits(rnd, 8)}", f"#{_digits(rnd, 9)}",
                f"INV/{rnd.randint(2015, 2030)}/{rnd.randint(1, 999999):06d}",
                f"PO {_digits(rnd, 10)}",
                f"order_{rnd.randint(2015, 2030)}_{rnd.randint(1, 99999)}",
                f"{_digits(rnd, 3)}-{_digits(rnd, 7)}-{_digits(rnd, 7)}",  # a marketplace's
                f"SO-{rnd.randint(2015, 2030)}-{rnd.randint(1, 12):02d}-{_digits(rnd, 6)}",
                f"cart {_digits(rnd, 12)}", f"R{_digits(rnd, 9)}",
            ]
        )  # fmt: skip

    def uuids() -> str:
        value = uuid.UUID(int=rnd.getrandbits(128), version=4)
        return rnd.choice([str(value), value.hex, str(value).upper(), f"urn:uuid:{value}"])

    def amounts() -> str:
        cents = rnd.randint(1, 10**9)
        major, minor = divmod(cents, 100)
        return rnd.choice(
            [
                f"EUR {major:,}.{minor:02d}", f"{major}.{minor:02d}", str(cents),
                f"${major:,}.{minor:02d}", f"{major:,}.{minor:02d} €".replace(",", " "),
                f"JPY {rnd.randint(1, 10**8)}", f"1999 EUR, 24.99 USD and {major}.{minor:02d} GBP",
                f"total {major}.{minor:02d} (tax {minor}.{rnd.randint(0, 99):02d})",
            ]
        )  # fmt: skip

    def ids() -> str:
        base62 = string.ascii_letters + string.digits
        return rnd.choice(
            [
                "pay_" + _hex(rnd, 24), "re_" + _hex(rnd, 24), "op_" + _hex(rnd, 24),
                "ch_" + _hex(rnd, 24), _hex(rnd, 40), _hex(rnd, 64), "tok_visa",
                "pi_" + "".join(rnd.choices(base62, k=24)), f"cus_{_hex(rnd, 14)}",
                "req-" + _hex(rnd, 32), "sk_live_" + "".join(rnd.choices(base62, k=43)),
            ]
        )  # fmt: skip

    def tracking() -> str:
        return rnd.choice(
            [
                f"1Z{''.join(rnd.choices(string.ascii_uppercase + string.digits, k=16))}",
                _digits(rnd, 12), " ".join(_digits(rnd, 4) for _ in range(3)),
                _digits(rnd, 22),
                " ".join(_digits(rnd, 4) for _ in range(5)) + " " + _digits(rnd, 2),
            ]
        )  # fmt: skip

    generators = {
        "dates": dates, "times": times, "timestamps": timestamps, "phone numbers": phones,
        "IBANs": iban, "order numbers": orders, "UUIDs": uuids, "amounts": amounts,
        "ids and tokens": ids, "parcel tracking numbers": tracking,
    }  # fmt: skip
    return {name: [make() for _ in range(per_category)] for name, make in generators.items()}
