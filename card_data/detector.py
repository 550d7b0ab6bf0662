"""The card-number detector: one scan of the text, in time linear in its length.

How a text is read (``docs/card-data.md`` has the table and the measured false-positive rate):

1. **Characters to units.** Every character becomes a *digit* (``0``-``9``, or any Unicode
   decimal digit: fullwidth, Arabic-Indic, Devanagari, ...; or a character whose NFKC form is
   made of digits and separators: superscripts, circled digits, ``⒈``), a *separator*
   (:data:`ASCII_SEPARATORS`, Unicode space separators, line and paragraph separators, dash
   punctuation, invisible format characters such as the zero-width space and the soft hyphen,
   and :data:`EXTRA_SEPARATORS`), or *other*. A percent-encoded UTF-8 sequence (``%34``,
   ``%EF%BC%94``, ``%20``) and a JSON escape (``\\u0034``) are decoded first, anywhere in the
   text: the detector does not need to know whether the text is a URL or a JSON document.
   Commas are not separators (lists of numbers, thousands separators).
2. **Groups and chains.** Consecutive digits form a *group*; groups joined by at most
   :data:`MAX_GAP` separators form a *chain*. A group of more than :data:`MAX_LENGTH` digits
   is never part of a card number.
3. **Windows.** Each run of consecutive whole groups of a chain holding 13-19 digits is a
   candidate when it is shaped like a written card number: every group but the last has at
   least 3 digits (``4-4-4-4``, ``4-6-5``, ``4-6-4``, ``4-4-4-4-3``, one unbroken run), or every
   group is a single digit (a number spelled out). A candidate is a card number when its first
   digit is not 0 (no issuer identification number starts with 0, ISO/IEC 7812-1) and it passes
   the Luhn check (unless ``require_luhn=False``).
4. **Not card numbers.** Digits inside a UUID (``8-4-4-4-12`` hex), inside a hex token of 20 or
   more characters holding a letter (``pay_`` + 24 hex, digests), inside an IBAN whose ISO 13616
   check digits are right, and a number written ``+`` then at most 15 digits (an E.164
   telephone number) are not candidates.

Cost: one pass over the characters, then at most :data:`MAX_LENGTH` windows per group, each
checked in constant time from prefix sums; no regular expression here can backtrack more than a
bounded number of steps.
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
#: What replaces a card number by default.
REDACTED_CARD_NUMBER = "[card number redacted]"

#: ASCII separators people and programs put between digit groups (``+`` is a space in a query).
ASCII_SEPARATORS = " \t\n\r\v\f-./_+"
#: Non-ASCII separators outside the categories below: middle dot, bullet, hyphenation point,
#: minus sign, bullet operator, katakana middle dot.
EXTRA_SEPARATORS = "\u00b7\u2022\u2027\u2212\u2219\u30fb"
#: Unicode categories read as separators: space, line and paragraph separators, dashes, and
#: format characters (zero-width space and joiners, soft hyphen, byte order mark, bidi marks).
SEPARATOR_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Pd", "Cf"})

_DIGIT, _SEPARATOR, _OTHER = 0, 1, 2
_HEX = frozenset("0123456789abcdefABCDEF")
_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)  # Luhn: 2d, minus 9 when above 9

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


def _iban_valid(compact: str) -> bool:
    """ISO 13616 / ISO 7064 MOD 97-10: the rearranged IBAN, letters as 10-35, mod 97 is 1."""
    if not 15 <= len(compact) <= 34:
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
    of 20+ characters holding a letter, UUIDs and valid IBANs."""
    spans = [
        match.span()
        for match in _LONG_ALNUM.finditer(text)
        if _HEX_WITH_A_LETTER.fullmatch(match.group())
    ]
    spans.extend(match.span() for match in _UUID.finditer(text))
    for match in _IBAN.finditer(text):
        candidate = match.group()
        # The longest valid IBAN the match starts with (it may run into the next word's digits).
        spaces = [i for i in range(len(candidate) - 1, 0, -1) if candidate[i] == " "]
        ends = [len(candidate), *spaces]
        for end in ends:
            if _iban_valid(candidate[:end].replace(" ", "")):
                spans.append((match.start(), match.start() + end))
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
    elif char.isdecimal():
        yield _DIGIT, str(unicodedata.decimal(char)), start, end
    elif char in EXTRA_SEPARATORS or unicodedata.category(char) in SEPARATOR_CATEGORIES:
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
    """Chains of digit groups (each at most :data:`MAX_LENGTH` long) joined by at most
    :data:`MAX_GAP` separators, with whether a ``+`` came right before the first group."""
    groups: list[_Group] = []
    gap: int | None = None  # separators since the last group, None after anything else
    plus_before = False
    phone = False
    for kind, start, end, digits, plus, count in runs:
        if kind == _DIGIT:
            if len(digits) > MAX_LENGTH:  # never part of a card number: it ends the chain
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


def _chain_spans(
    groups: list[_Group], phone: bool, require_luhn: bool, spans: list[tuple[int, int]]
) -> None:
    """Append the span of every card-number window of one chain to ``spans``."""
    digits = "".join(group[0] for group in groups)
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
    for first in range(len(groups)):
        x = offsets[first]
        if digits[x] == "0":
            continue
        single_digits, long_inner = True, True
        for last in range(first, len(groups)):
            y = offsets[last + 1]
            if y - x > MAX_LENGTH:
                break
            single_digits = single_digits and y - offsets[last] == 1
            long_inner = long_inner and (last == first or offsets[last] - offsets[last - 1] >= 3)
            if not (single_digits or long_inner):
                break
            if y - x < MIN_LENGTH or (phone and first == 0 and y - x <= 15):
                continue
            if require_luhn and ((even[y] - even[x]) if y % 2 == 0 else (odd[y] - odd[x])) % 10:
                continue
            spans.append((groups[first][1], groups[last][2]))


def _find(text: str, require_luhn: bool) -> list[tuple[int, int]]:
    if text.isascii() and sum(text.count(d) for d in "0123456789") < MIN_LENGTH:
        return []  # every digit of an ASCII text, escaped or not, holds an ASCII digit
    spans: list[tuple[int, int]] = []
    for groups, phone in _chains(_runs(text, _excluded_spans(text))):
        _chain_spans(groups, phone, require_luhn, spans)
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
