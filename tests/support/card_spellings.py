"""Generated corpora for the card-number detector's second audit (finding 5), from fixed seeds.

:func:`spellings`: card numbers of every brand of ``card_corpus.BRANDS`` spelled in the ways a
careless or a clever client can, by class (invisible characters, Unicode separators, marks
after digits, Unicode digits, long digit runs, IBAN dress, punctuation); every one must be
found. :func:`ordinary_identifiers`: 10,000 ordinary 13-19 digit identifiers of realistic kinds
(timestamps, order numbers, telephone numbers, parcel numbers, ISBN-13, EAN-13, GTIN-14, SSCC,
snowflake ids, random integers), none of which is card data, for the false-positive rate.
"""

from __future__ import annotations

import functools
import random
import sys
import unicodedata
from collections.abc import Callable

from card_data.detector import (
    DEFAULT_IGNORABLE,
    EXTRA_SEPARATORS,
    IBAN_LENGTHS,
)
from tests.support.card_corpus import BRANDS, luhn_complete

#: Spellings generated per class.
PER_CLASS = 100


def _draw_pan(rnd: random.Random) -> str:
    _brand, prefixes, lengths = rnd.choice(BRANDS)
    prefix, length = rnd.choice(prefixes), rnd.choice(lengths)
    return luhn_complete(prefix + "".join(rnd.choices("0123456789", k=length - len(prefix) - 1)))


def _groups(pan: str) -> list[str]:
    return [pan[i : i + 4] for i in range(0, len(pan), 4)]


def _ignorables() -> list[str]:
    found = []
    for low, high in DEFAULT_IGNORABLE:
        found.extend(chr(c) for c in range(low, min(high, low + 40) + 1))
    return found


#: The general categories of :func:`spellings`' separators (spaces, line and paragraph
#: separators, format characters, dashes) and of its combining marks.
SEPARATOR_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cf", "Pd"})
MARK_CATEGORIES = frozenset({"Mn", "Mc", "Me"})


@functools.cache
def _unicode_classes() -> tuple[list[str], list[str], dict[int, list[str]]]:
    """One pass over every code point (about 1.1 million), in code point order: the separators
    (:data:`SEPARATOR_CATEGORIES`, less the default ignorables), the combining marks, and every
    character above ASCII with a Unicode digit value (UAX #44 Numeric_Type Decimal or Digit:
    fullwidth, scripts, mathematical, superscripts, circled ...) by value. Cached: the corpora
    are built while pytest collects, in every process that collects (each xdist worker)."""
    separators: list[str] = []
    marks: list[str] = []
    forms: dict[int, list[str]] = {value: [] for value in range(10)}
    category, digit = unicodedata.category, unicodedata.digit
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        kind = category(char)
        if kind in SEPARATOR_CATEGORIES:
            if not any(low <= code <= high for low, high in DEFAULT_IGNORABLE):
                separators.append(char)
        elif kind in MARK_CATEGORIES:
            marks.append(char)
        if code >= 0x80 and (value := digit(char, None)) is not None:
            forms[value].append(char)
    return separators, marks, forms


def _iban_check(country: str, bban: str) -> str:
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{98 - int(numeric) % 97:02d}"


def spellings(seed: int = 34) -> dict[str, list[str]]:
    """Class -> :data:`PER_CLASS` texts, each holding one card number spelled in that class's
    ways (seeded: the same texts every run)."""
    return {
        name: [text for _, text in entries] for name, entries in spellings_with_pans(seed).items()
    }


def spellings_with_pans(seed: int = 34) -> dict[str, list[tuple[str, str]]]:
    """Class -> (card number in ASCII digits, its spelling) pairs: :func:`spellings` with the
    number each text spells."""
    rnd = random.Random(seed)
    drawn: list[str] = []

    def _pan(rnd: random.Random) -> str:
        drawn.append(_draw_pan(rnd))
        return drawn[-1]

    ignorables = _ignorables()
    unicode_class_separators, marks, forms = _unicode_classes()
    separators = unicode_class_separators + sorted(EXTRA_SEPARATORS)
    selectors = [chr(c) for c in [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]]
    punctuation = [*sorted(EXTRA_SEPARATORS), "\u2010", "\u2013", "\u2014", "\uff0d", "\u2e3a"]
    frames = ["{}", "card {} thanks", "ref:{}", "({})", "order {} shipped", '"{}"']

    def framed(text: str) -> str:
        return rnd.choice(frames).format(text)

    def invisible() -> str:
        pan = _pan(rnd)
        how = rnd.randrange(3)
        if how == 0:  # one invisible character between groups
            return framed(rnd.choice(ignorables).join(_groups(pan)))
        if how == 1:  # after every digit
            return framed("".join(d + rnd.choice(ignorables) for d in pan))
        text = list(pan)  # a few anywhere, next to a space between groups
        for _ in range(rnd.randint(1, 6)):
            text.insert(rnd.randrange(1, len(text)), rnd.choice(ignorables))
        return framed("".join(text))

    def unicode_separators() -> str:
        groups = _groups(_pan(rnd))
        text = groups[0]
        for group in groups[1:]:
            text += "".join(rnd.choices(separators, k=rnd.randint(1, 2))) + group
        return framed(text)

    def marks_after_digits() -> str:
        pan = _pan(rnd)
        how = rnd.randrange(3)
        if how == 0:  # keycaps: digit, VS16, combining enclosing keycap
            return framed("".join(d + "\ufe0f\u20e3" for d in pan))
        pool = marks if how == 1 else selectors
        return framed(
            " ".join(
                "".join(d + "".join(rnd.choices(pool, k=rnd.randint(0, 2))) for d in group)
                for group in _groups(pan)
            )
        )

    def unicode_digits() -> str:
        pan = _pan(rnd)
        if rnd.random() < 0.5:  # one form for the whole number
            index = rnd.randrange(min(len(forms[v]) for v in range(10)))
            return framed(" ".join("".join(forms[int(d)][index] for d in g) for g in _groups(pan)))
        return framed("".join(rnd.choice(forms[int(d)]) for d in pan))  # mixed forms

    def long_runs() -> str:
        pan = _pan(rnd)
        how = rnd.randrange(5)
        if how == 0:  # ISO 8583: left-padded with zeros to 19 digits
            while len(pan) == 19:
                pan = _pan(rnd)
            return framed(pan.rjust(19, "0"))
        if how == 1:  # glued to a 3-digit security code
            return framed(pan + f"{rnd.randint(0, 999):03d}")
        if how == 2:  # glued to an expiry, MMYY
            return framed(pan + f"{rnd.randint(1, 12):02d}{rnd.randint(24, 35)}")
        if how == 3:  # glued to an expiry, YYMM (ISO 8583's order)
            return framed(pan + f"{rnd.randint(24, 35)}{rnd.randint(1, 12):02d}")
        return framed(" ".join(_groups(pan)) + f"{rnd.randint(0, 999):03d}")  # CVV on the last

    def iban_dress() -> str:
        pan = _pan(rnd)
        how = rnd.randrange(3)
        if how == 0:  # two capital letters that are no registry country, right check digits
            country = rnd.choice(["XY", "AA", "ZZ", "QQ", "US", "CA", "CN", "JP", "IN", "AU"])
        else:  # a registry country at a length that is not its IBAN length
            country = rnd.choice([c for c, n in IBAN_LENGTHS.items() if n != len(pan) + 4])
        check = _iban_check(country, pan)
        if how == 2:  # a registry country, wrong check digits
            check = f"{(int(check) + rnd.randint(1, 90)) % 100:02d}"
        compact = country + check + pan
        return rnd.choice(
            [compact, " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))]
        )

    def punctuation_between_groups() -> str:
        groups = _groups(_pan(rnd))
        mark = rnd.choice(punctuation)
        if rnd.random() < 0.5:
            return framed(mark.join(groups))
        return framed(f" {mark} ".join(groups))

    classes: dict[str, Callable[[], str]] = {
        "invisible characters": invisible,
        "Unicode separators": unicode_separators,
        "marks after digits": marks_after_digits,
        "Unicode digits": unicode_digits,
        "long digit runs": long_runs,
        "IBAN dress": iban_dress,
        "punctuation between groups": punctuation_between_groups,
    }
    return {
        name: [(text, drawn[-1])[::-1] for text in (make() for _ in range(PER_CLASS))]
        for name, make in classes.items()
    }


# --- Ordinary identifiers -------------------------------------------------------------------


def _digits(rnd: random.Random, length: int, first: str = "123456789") -> str:
    return rnd.choice(first) + "".join(rnd.choices("0123456789", k=length - 1))


def _gs1_check(body: str) -> str:
    """The GS1 check digit (EAN-13, GTIN-14, SSCC-18, ISBN-13): weights 3 and 1 from the right."""
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    return body + str((10 - total % 10) % 10)


#: GS1 company prefixes (first 2-3 digits of an EAN-13) of the largest member organisations.
GS1_PREFIXES = [
    *(f"0{d}" for d in range(10)), *(str(n) for n in range(10, 14)), *(str(n) for n in
    range(30, 38)), *(str(n) for n in range(40, 45)), "45", "49", "46", "471", "480", "489",
    "50", "54", "560", "57", "590", "600", "64", "690", "691", "692", "693", "694", "695", "70",
    "73", "76", "779", "789", "80", "81", "82", "83", "84", "87", "90", "91", "93", "94",
]  # fmt: skip


def ordinary_identifiers(seed: int = 34, count: int = 10_000) -> dict[str, list[str]]:
    """Kind -> ordinary identifiers holding a 13-19 digit run (none is card data), ``count`` in
    all, the kinds in equal shares."""
    rnd = random.Random(seed)

    def timestamps() -> str:  # epoch time in ms, us, ns (2017-2033)
        seconds = rnd.randint(1_500_000_000, 2_000_000_000)
        return str(seconds * 10 ** rnd.choice([3, 6, 9]) + rnd.randint(0, 999))

    def order_numbers() -> str:
        year = rnd.randint(2015, 2030)
        return rnd.choice(
            [
                f"{year}{rnd.randint(1, 10**9):09d}",
                f"{year}{rnd.randint(1, 12):02d}{rnd.randint(1, 10**9):09d}",
                f"{year}{rnd.randint(1, 12):02d}{rnd.randint(1, 28):02d}"
                f"{rnd.randint(1, 10**7):07d}",
                f"{rnd.choice(['1', '2', '3', '4', '7'])}{rnd.randint(1, 99):02d}"
                f"{_digits(rnd, 7)}{_digits(rnd, 7)}",  # a marketplace's 3-7-7 written solid
                _digits(rnd, rnd.randint(13, 16), "123"),  # a shop's sequence
            ]
        )

    def telephone_numbers() -> str:  # international, written without + (or with 00)
        national = rnd.choice(
            [("49", 11), ("49", 12), ("86", 11), ("62", 11), ("55", 11), ("7", 10), ("91", 10),
             ("234", 10), ("44", 10), ("33", 9), ("1", 10)]
        )  # fmt: skip
        number = national[0] + _digits(rnd, national[1])
        return "00" + number if len(number) < 13 or rnd.random() < 0.5 else number

    def parcel_numbers() -> str:
        return rnd.choice(
            [
                "94" + _digits(rnd, 20, "0123456789"),  # USPS, 22 digits
                "92" + _digits(rnd, 24, "0123456789"),
                _digits(rnd, 15, "1234567"),  # FedEx Ground
                "00" + _gs1_check("3" + _digits(rnd, 16, "0123456789")),  # DHL SSCC as 20
                "JJD" + _digits(rnd, 18, "0"),  # DHL parcel
                _digits(rnd, 14, "0123456789"),  # DPD
            ]
        )

    def isbns() -> str:
        return _gs1_check(rnd.choice(["978", "979"]) + _digits(rnd, 9, "0123456789"))

    def eans() -> str:
        prefix = rnd.choice(GS1_PREFIXES)
        return _gs1_check(prefix + "".join(rnd.choices("0123456789", k=12 - len(prefix))))

    def gtin14s() -> str:  # packaging indicator, a GS1 prefix, 10 digits, the check digit
        body = rnd.choice("0123") + rnd.choice(GS1_PREFIXES)[:2]
        return _gs1_check(body + "".join(rnd.choices("0123456789", k=13 - len(body))))

    def ssccs() -> str:  # SSCC-18, with or without its application identifier (00)
        body = rnd.choice("0123456789") + rnd.choice(GS1_PREFIXES)[:2]
        sscc = _gs1_check(body + "".join(rnd.choices("0123456789", k=17 - len(body))))
        return rnd.choice([sscc, "00" + sscc, f"(00){sscc}"])

    def snowflakes() -> str:  # 64-bit ids of Twitter's kind (ms since 2010-11-04 << 22), 2015-26
        since_epoch = rnd.randint(1_420_070_400_000, 1_798_761_600_000) - 1_288_834_974_657
        return str(since_epoch << 22 | rnd.getrandbits(22))

    def imeis() -> str:  # 15 digits, Luhn-valid by construction: a type allocation code first
        tac = rnd.choice(["35", "86", "01", "99", "49", "45"]) + _digits(rnd, 6, "0123456789")
        return luhn_complete(tac + _digits(rnd, 6, "0123456789"))

    def iccids() -> str:  # SIM serials: 89, a country code, the issuer, Luhn-valid, 19 digits
        body = "89" + rnd.choice(["1", "44", "49", "33", "86", "91", "7", "34", "39", "31"])
        return luhn_complete(body + _digits(rnd, 18 - len(body), "0123456789"))

    def random_integers() -> str:  # database ids and counters, 13-19 digits, any first digit
        return _digits(rnd, rnd.randint(13, 19))

    kinds: dict[str, Callable[[], str]] = {
        "timestamps (ms, us, ns)": timestamps,
        "order numbers": order_numbers,
        "telephone numbers": telephone_numbers,
        "parcel numbers": parcel_numbers,
        "ISBN-13": isbns,
        "EAN-13": eans,
        "GTIN-14": gtin14s,
        "SSCC-18": ssccs,
        "snowflake ids": snowflakes,
        "IMEIs": imeis,
        "SIM ICCIDs": iccids,
        "random integers": random_integers,
    }
    shares = [count // len(kinds) + (i < count % len(kinds)) for i in range(len(kinds))]
    return {
        name: [make() for _ in range(share)]
        for (name, make), share in zip(kinds.items(), shares, strict=True)
    }
