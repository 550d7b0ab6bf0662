"""The card-number detector: one scan of the text, in time linear in its length.

How a text is read (``docs/card-data.md`` has the table, the decisions and the measured rates):

1. **Characters to units.** Every character becomes a *digit* (``0``-``9``; any character with
   a Unicode decimal or digit value, UAX #44 ``Numeric_Type=Decimal`` or ``Digit``: fullwidth,
   Arabic-Indic, Devanagari, superscripts, circled and dingbat digits, Ethiopic, Kharoshthi ...;
   or a character whose NFKC form is made of digits and separators: ``⒈``, ``⑴``), a
   *separator* (:data:`ASCII_SEPARATORS`, Unicode space separators, line and paragraph
   separators, dash punctuation, format characters that are not default-ignorable, and
   :data:`EXTRA_SEPARATORS`: dots, bullets, slashes and blanks of other scripts), *nothing*
   (a Default_Ignorable_Code_Point of UAX #44, :data:`DEFAULT_IGNORABLE`, or a combining mark,
   categories Mn/Mc/Me, variation selectors included: an invisible character reads as nothing,
   a mark belongs to the digit it follows), or *other*. A percent-encoded UTF-8 sequence
   (``%34``, ``%EF%BC%94``, ``%20``) and a JSON escape (``\\u0034``) are decoded first,
   anywhere in the text: the detector does not need to know whether the text is a URL or a
   JSON document. Commas, ``:``, ``*``, ``#`` and ``|`` are not separators.
2. **Groups and chains.** Consecutive digits form a *group*; groups joined by at most
   :data:`MAX_GAP` separators form a *chain*. A group of more than :data:`MAX_RUN` digits
   (19 and a 4-digit expiry or security code) is never part of a card number.
3. **Windows.** Each run of consecutive whole groups of a chain holding 13-19 digits is a
   candidate when it is shaped like a written card number: every group but the last has at
   least 3 digits (``4-4-4-4``, ``4-6-5``, ``4-6-4``, ``4-4-4-4-3``, one unbroken run), or every
   group is a single digit (a number spelled out). So is such a run less the last 3 or 4
   digits of its last group (a card number glued to a security code, or to an expiry date
   ``MMYY``/``YYMM``, or to the 4-digit code of American Express), the digits after the
   leading zeros of a group of exactly 19 digits (ISO 8583 left-pads the PAN to 19), and a
   group glued to two capital letters read from its third digit (``XY12`` + a card number,
   when the whole is no valid IBAN).
4. **Issuers.** A candidate is a card number when it passes the Luhn check (ISO/IEC 7812-1
   annex B) and its issuer identification number is one of :data:`ISSUER_RANGES` at one of
   that issuer's lengths (Visa 4 at 13, 16 or 19; Mastercard 51-55 and 2221-2720 at 16; ...).
   An unbroken run of 13 digits starting with 4 whose last digit is also its GS1 check digit
   is an EAN-13 (GS1 400-499), not a Visa number of that retired length. With
   ``require_luhn=False`` (the log redaction) a whole-group candidate needs only a first digit
   that is not 0, as before; the glued, zero-padded and would-be IBAN ones need the issuer.
5. **Not card numbers.** Digits inside a UUID (``8-4-4-4-12`` hex), inside a hex token of 20
   or more characters holding a letter (``pay_`` + 24 hex, digests), inside an IBAN of a
   country of the ISO 13616 registry at that country's length with right check digits
   (:data:`IBAN_LENGTHS`), and a number written ``+`` then at most 15 digits (an E.164
   telephone number) are not candidates.

Cost: one pass over the characters, then at most 3 windows per pair of groups less than 23
digits apart, each checked in constant time from prefix sums (the issuer check is a few
dictionary look-ups); no regular expression here can backtrack more than a bounded number of
steps.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator

#: Digits in a card number (PCI DSS: the PAN is up to 19 digits; ISO/IEC 7812-1 issues 13+).
MIN_LENGTH, MAX_LENGTH = 13, 19
#: Most separator characters between two digit groups of one number (``" - "``, ``"\r\n"``).
MAX_GAP = 3
#: Longest digit group that can hold a card number: 19 digits and a glued 4-digit code.
MAX_RUN = MAX_LENGTH + 4
#: What replaces a card number by default.
REDACTED_CARD_NUMBER = "[card number redacted]"

#: ASCII separators people and programs put between digit groups (``+`` is a space in a query).
#: The log redaction's fast path (``observability/log_filters.py``) relies on this exact set.
ASCII_SEPARATORS = " \t\n\r\v\f-./_+"
#: Non-ASCII separators outside the categories below: dots, bullets and middle dots of every
#: script (middle dot, Greek ano teleia, bullet, triangular bullet, one dot leader, hyphenation
#: point, hyphen bullet, bullet and dot operators, word separator middle dot, raised dot,
#: ideographic full stop, katakana middle dots, halfwidth ideographic full stop), the minus
#: sign, heavy minus, fraction, division and big slashes, and the braille blank.
EXTRA_SEPARATORS = frozenset(
    "\u00b7\u0387\u2022\u2023\u2024\u2027\u2043\u2219\u22c5\u2e31\u2e33\u3002\u30fb\uff65"
    "\uff61\u2212\u2796\u2044\u2215\u29f8\u2800"
)
#: Unicode categories read as separators: space, line and paragraph separators, dashes, and
#: format characters that are not default-ignorable (Arabic number signs, ...).
SEPARATOR_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Pd", "Cf"})
#: Combining marks (nonspacing, spacing, enclosing: ``U+0301``, the keycap ``U+20E3``): read as
#: part of the character they follow, so skipped.
MARK_CATEGORIES = frozenset({"Mn", "Mc", "Me"})
#: Default_Ignorable_Code_Point (Unicode UAX #44, DerivedCoreProperties.txt): ranges of code
#: points a renderer shows as nothing. Skipped wherever they are, including between digits.
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)  # fmt: skip

#: Issuer identification numbers (ISO/IEC 7812-1) of the card networks, as each network
#: publishes them: (first prefix, last prefix, lengths). A candidate is a card number only when
#: it starts with a prefix of a range and has one of its lengths.
ISSUER_RANGES: tuple[tuple[str, str, frozenset[int]], ...] = (
    ("4", "4", frozenset({13, 16, 19})),  # Visa (Electron, Dankort co-brand)
    ("51", "55", frozenset({16})),  # Mastercard
    ("2221", "2720", frozenset({16})),  # Mastercard 2-series
    ("34", "34", frozenset({15})),  # American Express
    ("37", "37", frozenset({15})),
    ("6011", "6011", frozenset(range(16, 20))),  # Discover
    ("644", "649", frozenset(range(16, 20))),
    ("65", "65", frozenset(range(16, 20))),  # Discover, RuPay, Troy
    ("622126", "622925", frozenset(range(16, 20))),  # Discover / UnionPay co-brand
    ("3528", "3589", frozenset(range(16, 20))),  # JCB (LankaPay 357111, RuPay 353/356)
    ("300", "305", frozenset(range(14, 20))),  # Diners Club (Carte Blanche 14)
    ("3095", "3095", frozenset(range(14, 20))),
    ("36", "36", frozenset(range(14, 20))),  # Diners Club International
    ("38", "39", frozenset(range(16, 20))),  # Diners Club on the Discover network
    ("62", "62", frozenset(range(16, 20))),  # UnionPay
    ("81", "81", frozenset(range(16, 20))),  # UnionPay, RuPay
    ("82", "82", frozenset({16})),  # RuPay
    ("60", "60", frozenset({16})),  # RuPay
    ("508", "508", frozenset({16})),  # RuPay
    ("5018", "5018", frozenset(range(13, 20))),  # Maestro
    ("5020", "5020", frozenset(range(13, 20))),
    ("5038", "5038", frozenset(range(13, 20))),
    ("5893", "5893", frozenset(range(13, 20))),
    ("6304", "6304", frozenset(range(13, 20))),
    ("6759", "6759", frozenset(range(13, 20))),
    ("6761", "6763", frozenset(range(13, 20))),
    ("5019", "5019", frozenset({16})),  # Dankort
    ("2200", "2204", frozenset(range(16, 20))),  # Mir
    ("2205", "2205", frozenset({16})),  # BORICA
    ("9792", "9792", frozenset({16})),  # Troy
    ("506099", "506198", frozenset({16, 18, 19})),  # Verve
    ("507865", "507964", frozenset({16, 18, 19})),
    ("650002", "650027", frozenset({16, 18, 19})),
    ("636", "636", frozenset(range(16, 20))),  # InterPayment
    ("637", "639", frozenset({16})),  # InstaPayment
    ("8600", "8600", frozenset({16})),  # UzCard
    ("9860", "9860", frozenset({16})),  # Humo
)

#: ISO 13616 IBAN registry (SWIFT, release 99 and later): country code -> IBAN length.
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip

_DIGIT, _SEPARATOR, _OTHER, _NOTHING = 0, 1, 2, 3
_HEX = frozenset("0123456789abcdefABCDEF")
_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)  # Luhn: 2d, minus 9 when above 9


def _issuer_table() -> dict[str, frozenset[int]]:
    """Every prefix of :data:`ISSUER_RANGES`, spelled out, to the lengths it allows."""
    table: dict[str, frozenset[int]] = {}
    for low, high, lengths in ISSUER_RANGES:
        for number in range(int(low), int(high) + 1):
            prefix = str(number)
            table[prefix] = table.get(prefix, frozenset()) | lengths
    return table


_ISSUERS = _issuer_table()
_PREFIX_LENGTHS = sorted({len(prefix) for prefix in _ISSUERS})
_IGNORABLE = frozenset(
    chr(code) for low, high in DEFAULT_IGNORABLE if high < 0xE0000 for code in range(low, high + 1)
)

#: One token of an ASCII text without escapes: a digit run, a separator run, anything else.
_ASCII_RUNS = re.compile(r"([0-9]+)|([ \t\n\r\v\f./_+-]+)|[^0-9 \t\n\r\v\f./_+-]+")
_LONG_ALNUM = re.compile(r"[0-9A-Za-z]{20,}")
_HEX_WITH_A_LETTER = re.compile(r"(?=.*[A-Fa-f])[0-9A-Fa-f]+")
_UUID = re.compile(
    r"(?<![0-9A-Za-z])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
    r"(?![0-9A-Za-z])"
)
#: ISO 13616 IBAN, electronic (compact) or print (groups of four) format.
_IBAN = re.compile(r"(?<![0-9A-Za-z])[A-Z]{2}[0-9]{2}(?: ?[0-9A-Z]){11,30}(?![0-9A-Za-z])")

#: Two capital letters glued to digits (``XY12...``): what is not a valid IBAN is read again
#: after the two digits that would be its check digits.
_COUNTRY_CODE = re.compile(r"(?<![0-9A-Za-z])[A-Z]{2}(?=[0-9]{15})")

# A run: (kind, start, end, digits or "", ends with "+", separator count).
_Run = tuple[int, int, int, str, bool, int]
# A group: (digits, start, end) in the original text.
_Group = tuple[str, int, int]


def luhn_valid(digits: str) -> bool:
    """True when ``digits`` (ASCII ``0``-``9`` only, any length) passes the Luhn check of
    ISO/IEC 7812-1 annex B (the last digit is the check digit)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        total += _DOUBLED[value] if position % 2 else value
    return total % 10 == 0


def issuer_allows(digits: str) -> bool:
    """True when ``digits`` (ASCII ``0``-``9``) starts with an issuer identification number of
    :data:`ISSUER_RANGES` (ISO/IEC 7812-1, as the networks publish their ranges) and has one of
    that issuer's lengths: ``"4111111111111111"`` yes, ``"1764654000123456"`` (a timestamp in
    microseconds) and ``"9780306406157"`` (an ISBN) no. The Luhn check is not made here."""
    length = len(digits)
    for size in _PREFIX_LENGTHS:
        lengths = _ISSUERS.get(digits[:size])
        if lengths is not None and length in lengths:
            return True
    return False


def iban_valid(text: str) -> bool:
    """True when ``text`` (print format with spaces, or compact) is an IBAN of ISO 13616: the
    country code is in the registry (:data:`IBAN_LENGTHS`), the length is that country's and
    the check digits are right (ISO 7064 MOD 97-10: rearranged, letters as 10-35, mod 97 is 1).
    """
    compact = text.replace(" ", "")
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact.isascii():
        return False
    if not (compact[2:4].isdigit() and compact[4:].isalnum()):
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in rearranged)) % 97 == 1


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, overlapping ones merged into one."""
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _excluded_spans(text: str) -> list[tuple[int, int]]:
    """Sorted, non-overlapping [start, end) spans whose digits are not card numbers: hex tokens
    of 20+ characters holding a letter, UUIDs and valid IBANs of registry countries."""
    spans = [
        match.span()
        for match in _LONG_ALNUM.finditer(text)
        if _HEX_WITH_A_LETTER.fullmatch(match.group()) and not match.group()[2:].isdigit()
    ]  # two letters then digits only is no hex token but a would-be IBAN (``CA41...``)
    spans.extend(match.span() for match in _UUID.finditer(text))
    for match in _IBAN.finditer(text):
        candidate = match.group()
        length = IBAN_LENGTHS.get(candidate[:2])
        if length is None:
            continue
        # The IBAN of the country's length the match starts with (it may run into the next
        # word's digits): at most two cuts, with and without spaces.
        compact = 0
        for index, char in enumerate(candidate):
            compact += char != " "
            if compact == length:
                if iban_valid(candidate[: index + 1]) and (
                    index + 1 == len(candidate) or candidate[index + 1] == " "
                ):
                    spans.append((match.start(), match.start() + index + 1))
                break
    return _merged(spans)


_Unit = tuple[int, str, int, int]  # (kind, digit or separator, start, end)


def _classify(char: str, start: int, end: int, *, nfkc: bool = True) -> Iterator[_Unit]:
    """The units of one (decoded) character: (kind, digit or separator, start, end)."""
    if "0" <= char <= "9":
        yield _DIGIT, char, start, end
    elif char in ASCII_SEPARATORS:
        yield _SEPARATOR, char, start, end
    elif char < "\x80":
        yield _OTHER, "", start, end
    elif char in _IGNORABLE or "\U000e0000" <= char <= "\U000e0fff":
        yield _NOTHING, "", start, end
    elif (value := unicodedata.digit(char, None)) is not None:  # decimal digits too
        yield _DIGIT, str(value), start, end
    elif (category := unicodedata.category(char)) in MARK_CATEGORIES:
        yield _NOTHING, "", start, end
    elif char in EXTRA_SEPARATORS or category in SEPARATOR_CATEGORIES:
        yield _SEPARATOR, " ", start, end
    elif nfkc and (normal := unicodedata.normalize("NFKC", char)) != char:
        for part in normal:
            yield from _classify(part, start, end, nfkc=False)
    else:
        yield _OTHER, "", start, end


def _units(text: str) -> Iterator[_Unit]:
    """Every unit of ``text``, decoding percent-encoded UTF-8 and ``\\uXXXX`` escapes."""
    n, i = len(text), 0
    while i < n:
        char = text[i]
        if char == "%" and i + 2 < n and text[i + 1] in _HEX and text[i + 2] in _HEX:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            char_start = i
            while i + 2 < n and text[i] == "%" and text[i + 1] in _HEX and text[i + 2] in _HEX:
                decoded = decoder.decode(bytes((int(text[i + 1 : i + 3], 16),)))
                i += 3
                for part in decoded:
                    yield from _classify(part, char_start, i)
                if decoded:
                    char_start = i
            for part in decoder.decode(b"", final=True):
                yield from _classify(part, char_start, i)
        elif (
            char == "\\"
            and i + 5 < n
            and text[i + 1] == "u"
            and all(c in _HEX for c in text[i + 2 : i + 6])
        ):
            code = int(text[i + 2 : i + 6], 16)
            decoded = "\ufffd" if 0xD800 <= code <= 0xDFFF else chr(code)
            yield from _classify(decoded, i, i + 6)
            i += 6
        else:
            yield from _classify(char, i, i + 1)
            i += 1


def _runs(text: str, excluded: list[tuple[int, int]]) -> Iterator[_Run]:
    """The runs of ``text``: digit runs (digits inside ``excluded`` spans count as other),
    separator runs and runs of anything else."""
    starts = [start for start, _ in excluded]

    def is_excluded(position: int) -> bool:
        index = bisect_right(starts, position) - 1
        return index >= 0 and position < excluded[index][1]

    if text.isascii() and "%" not in text and "\\" not in text:
        for match in _ASCII_RUNS.finditer(text):
            start, end = match.span()
            if match.group(1) is not None and not is_excluded(start):
                yield _DIGIT, start, end, match.group(1), False, 0
            elif match.group(2) is not None:
                yield _SEPARATOR, start, end, "", match.group(2)[-1] == "+", end - start
            else:
                yield _OTHER, start, end, "", False, 0
        return

    run: list | None = None  # [kind, start, end, digits, ends with "+", separator count]
    for kind, value, start, end in _units(text):
        if kind == _NOTHING:  # invisible, or a mark: part of the run it is in (or follows)
            if run is not None:
                run[2] = end
            continue
        if kind == _DIGIT and is_excluded(start):
            kind = _OTHER
        if run is not None and run[0] == kind:
            run[2] = end
        else:
            if run is not None:
                yield run[0], run[1], run[2], "".join(run[3]), run[4], run[5]
            run = [kind, start, end, [], False, 0]
        if kind == _DIGIT:
            run[3].append(value)
        elif kind == _SEPARATOR:
            run[4], run[5] = value == "+", run[5] + 1
    if run is not None:
        yield run[0], run[1], run[2], "".join(run[3]), run[4], run[5]


def _chains(runs: Iterator[_Run]) -> Iterator[tuple[list[_Group], bool]]:
    """Chains of digit groups (each at most :data:`MAX_RUN` long) joined by at most
    :data:`MAX_GAP` separators, with whether a ``+`` came right before the first group."""
    groups: list[_Group] = []
    gap: int | None = None  # separators since the last group, None after anything else
    plus_before = False
    phone = False
    for kind, start, end, digits, plus, count in runs:
        if kind == _DIGIT:
            if len(digits) > MAX_RUN:  # never part of a card number: it ends the chain
                if groups:
                    yield groups, phone
                groups, gap, plus_before = [], None, False
                continue
            if groups and gap is not None and gap <= MAX_GAP:
                groups.append((digits, start, end))
            else:
                if groups:
                    yield groups, phone
                groups, phone = [(digits, start, end)], plus_before
            gap, plus_before = None, False
        elif kind == _SEPARATOR:
            gap = count if gap is None else gap + count
            plus_before = plus
        else:
            if groups:
                yield groups, phone
            groups, gap, plus_before = [], None, False
    if groups:
        yield groups, phone


def _gs1_valid(digits: str) -> bool:
    """True when the last of ``digits`` is their GS1 check digit (EAN-13/GTIN-13: weights 3
    and 1 from the right, the sum a multiple of 10)."""
    total = sum((ord(d) - 48) * (1 if i % 2 == 0 else 3) for i, d in enumerate(reversed(digits)))
    return total % 10 == 0


def _code_after(digits: str, number: str) -> bool:
    """True when the 4 ``digits`` glued after ``number`` can be its expiry date (``MMYY`` or
    ``YYMM``, ISO 8583's order) or its American Express 4-digit code."""
    return "01" <= digits[:2] <= "12" or "01" <= digits[2:] <= "12" or number[:2] in {"34", "37"}


def _chain_spans(
    groups: list[_Group],
    phone: bool,
    require_luhn: bool,
    spans: list[tuple[int, int]],
    check_digits: frozenset[int] = frozenset(),
) -> None:
    """Append the span of every card-number window of one chain to ``spans``; a group starting
    at a text position of ``check_digits`` (right after two capital letters) is also read from
    its third digit."""
    digits = "".join(group[0] for group in groups)
    if len(digits) < MIN_LENGTH:
        return
    offsets = [0]
    for group in groups:
        offsets.append(offsets[-1] + len(group[0]))
    # Luhn sums by prefix: ``even`` doubles the digits at even indices, ``odd`` at odd ones; a
    # window [x, y) doubles the indices of y's parity (its last digit, y - 1, is not doubled).
    even, odd = [0], [0]
    for index, char in enumerate(digits):
        value, doubled = ord(char) - 48, _DOUBLED[ord(char) - 48]
        even.append(even[-1] + (doubled if index % 2 == 0 else value))
        odd.append(odd[-1] + (value if index % 2 == 0 else doubled))

    def _ean13(x: int, y: int) -> bool:
        """An EAN-13 of GS1 400-499 (Germany, Japan, Russia ...), not a retired Visa 13."""
        return digits[x] == "4" and _gs1_valid(digits[x:y])

    def card(x: int, y: int, whole: bool) -> bool:
        """Whether digits[x:y] is a card number (``whole``: a window of whole groups)."""
        if require_luhn and ((even[y] - even[x]) if y % 2 == 0 else (odd[y] - odd[x])) % 10:
            return False
        return (whole and not require_luhn) or issuer_allows(digits[x:y])

    def windows(first: int, x: int) -> None:
        """The windows starting at digit ``x`` of group ``first``: whole groups, then less a
        security code or an expiry glued to the last group."""
        single_digits, long_inner = True, True
        for last in range(first, len(groups)):
            y = offsets[last + 1]
            if y - x > MAX_RUN:
                break
            size = y - offsets[last]
            single_digits = single_digits and size == 1
            long_inner = long_inner and (last == first or offsets[last] - offsets[last - 1] >= 3)
            if not (single_digits or long_inner):
                break
            for cut in (0, 3, 4):
                end = y - cut
                if end - x < MIN_LENGTH or (cut and size <= cut):
                    break
                if end - x > MAX_LENGTH or (phone and first == 0 and end - x <= 15):
                    continue
                if cut == 4 and not _code_after(digits[end:y], digits[x:end]):
                    continue
                if not cut and require_luhn and size == 13 == y - x and _ean13(x, y):
                    continue
                if card(x, end, cut == 0):
                    spans.append((groups[first][1], groups[last][2]))
                    break  # a longer window of the same start may be one too

    for first in range(len(groups)):
        x = offsets[first]
        if digits[x] != "0":
            windows(first, x)
        elif offsets[first + 1] - x == MAX_LENGTH:
            # ISO 8583 pads the PAN with zeros on the left to 19 digits: one group only.
            core = offsets[first + 1] - len(groups[first][0].lstrip("0"))
            if offsets[first + 1] - core >= MIN_LENGTH and card(core, offsets[first + 1], False):
                spans.append((groups[first][1], groups[first][2]))
        if groups[first][1] in check_digits and offsets[first + 1] - x >= 2 + MIN_LENGTH:
            windows(first, x + 2)  # after the check digits of a would-be IBAN: ``XY12`` + PAN


def _find(text: str, require_luhn: bool) -> list[tuple[int, int]]:
    if text.isascii() and sum(text.count(d) for d in "0123456789") < MIN_LENGTH:
        return []  # every digit of an ASCII text, escaped or not, holds an ASCII digit
    spans: list[tuple[int, int]] = []
    check_digits = frozenset(match.end() for match in _COUNTRY_CODE.finditer(text))
    for groups, phone in _chains(_runs(text, _excluded_spans(text))):
        _chain_spans(groups, phone, require_luhn, spans, check_digits)
    return _merged(spans)


def find_card_numbers(text: str) -> list[tuple[int, int]]:
    """The ``[start, end)`` spans (indices into ``text``, sorted, not overlapping; overlapping
    candidates are merged) of every card number in ``text``: see the module's rules."""
    return _find(text, require_luhn=True)


def contains_card_number(text: str) -> bool:
    """True when :func:`find_card_numbers` finds at least one card number in ``text``."""
    return bool(_find(text, require_luhn=True))


def redact_card_numbers(
    text: str, *, replacement: str = REDACTED_CARD_NUMBER, require_luhn: bool = True
) -> str:
    """``text`` with every card number replaced by ``replacement``. With ``require_luhn=False``
    every candidate is replaced, Luhn-valid or not (for logs: a mistyped card number is still
    card data)."""
    spans = _find(text, require_luhn=require_luhn)
    if not spans:
        return text
    parts, position = [], 0
    for start, end in spans:
        parts.append(text[position:start])
        parts.append(replacement)
        position = end
    parts.append(text[position:])
    return "".join(parts)
