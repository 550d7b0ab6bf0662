"""The redaction of observability/log_filters.py as it was before ADR 0028 (commit e462ee1), kept as
the reference the equivalence tests compare the current :func:`redact` with
(tests/unit/test_log_redaction_equivalence.py) and the ``before`` variants of bench/log_cost.py
run. Not used by the service."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from urllib.parse import quote_plus, unquote_plus

import card_data
from observability.log_filters import KEY_PREFIXES, SECRET_NAMES

REDACTED = "[redacted]"
CARD_REDACTED = "[card number redacted]"

_NAME = "|".join(re.escape(name).replace("_", "[_-]") for name in SECRET_NAMES)
#: ``name`` then ``=`` or ``:``, optionally quoted (``"``, ``'``, JSON-escaped ``\\"``), then
#: the value: a credential scheme and its token, or one word up to a quote, ``&``, ``,``, ``;``.
_SECRET_VALUE = re.compile(
    rf"(?i)(?<![A-Za-z0-9_-])(?P<name>{_NAME})(?P<sep>(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?)"
    r"(?P<value>(?:(?:bearer|basic|token)\s+)?[^\s&\"'\\,;}<>]+)"
)
_CREDENTIAL = re.compile(
    r"(?i)\b(?P<scheme>bearer|basic)(?P<sep>\s+)(?P<value>[A-Za-z0-9._~+/=\-]+)"
)
_KEY = re.compile(
    "(?P<prefix>" + "|".join(re.escape(prefix) for prefix in KEY_PREFIXES) + r")[A-Za-z0-9_\-+/=]+"
)
#: A word holding an encoding that can hide digits or names: %XX, '+', or a JSON escape.
_ENCODED_WORD = re.compile(
    r"[^\s\"]*(?:%[0-9A-Fa-f]{2}|\+|\\u[0-9A-Fa-f]{4}|\\[nrtbf\"\\/])[^\s\"]*"
)
#: Our ids (payments.models, the acquirer's charges): a prefix and 24 lower-case hex digits.
_OUR_ID = re.compile(
    r"(?<![A-Za-z0-9])(?:(?:pay|op|re|ch)_[0-9a-f]{24}"
    r"|(?=[0-9]*[a-f])(?:[0-9a-f]{32}|[0-9a-f]{16}))(?![A-Za-z0-9])"
)
_JSON_ESCAPE = re.compile(r"\\u[0-9A-Fa-f]{4}|\\[nrtbf\"\\/]")


def _redact_cards(text: str) -> str:
    """Card numbers without the Luhn check, except inside words shaped like our ids, whose
    random hex holds a 13-digit run about once in 90 (measured): there only a Luhn-valid run
    (a real card number, even in a forged id) is hidden, about once in 900 ids."""
    pieces, last = [], 0
    for match in _OUR_ID.finditer(text):
        pieces.append(
            card_data.redact_card_numbers(
                text[last : match.start()], replacement=CARD_REDACTED, require_luhn=False
            )
        )
        pieces.append(card_data.redact_card_numbers(match.group(), replacement=CARD_REDACTED))
        last = match.end()
    pieces.append(
        card_data.redact_card_numbers(text[last:], replacement=CARD_REDACTED, require_luhn=False)
    )
    return "".join(pieces)


def _redact_plain(text: str) -> str:
    text = _CREDENTIAL.sub(lambda m: f"{m['scheme']}{m['sep']}{REDACTED}", text)
    text = _SECRET_VALUE.sub(lambda m: f"{m['name']}{m['sep']}{REDACTED}", text)
    text = _KEY.sub(lambda m: f"{m['prefix']}{REDACTED}", text)
    return _redact_cards(text)


def _url_decoded(word: str) -> str:
    for _ in range(3):  # %2520 -> %20 -> ' '
        decoded = unquote_plus(word)
        if decoded == word:
            break
        word = decoded
    return word


def _json_decoded(word: str) -> str:
    return _JSON_ESCAPE.sub(lambda m: json.loads(f'"{m.group()}"'), word)


def _json_encoded(text: str) -> str:
    return json.dumps(text)[1:-1]


def _url_encoded(text: str) -> str:
    return quote_plus(text, safe="/?=&:;,@[]*!$'()~")


_DECODINGS: tuple[tuple[Callable[[str], str], Callable[[str], str]], ...] = (
    (_json_decoded, _json_encoded),
    (_url_decoded, _url_encoded),
)


def _redact_word(match: re.Match[str]) -> str:
    word = match.group()
    for decode, encode in _DECODINGS:
        decoded = decode(word)
        if decoded != word:
            redacted = _redact_plain(decoded)
            if redacted != decoded:
                return encode(redacted)
    return word


def redact(text: str) -> str:
    """Return ``text`` with card numbers, keys, credentials and secret values replaced (the
    module's docstring lists what and how). Idempotent: ``redact(redact(t)) == redact(t)``."""
    text = _redact_plain(text)
    return _ENCODED_WORD.sub(_redact_word, text)
