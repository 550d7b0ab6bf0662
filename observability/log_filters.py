"""The one redaction step of every log line: card numbers, API keys, tokens and passwords.

The field's practice is to not log what must be scrubbed (the access log writes the path
without its query string, the request line names the route, tasks log ids); this module is the
net under that, run once, in the **formatter** of every handler of every process (gunicorn,
Django, the Celery worker and beat, management commands: observability/log_config.py builds them
all), over the whole formatted line: the message, its arguments, the structured fields and the
traceback alike, in plain text and in JSON.

:func:`redact` replaces, in this order:

* ``Bearer ...`` / ``Basic ...`` credentials, and the value after every secret name of
  :data:`SECRET_NAMES` (``name=value``, ``name: value``, ``"name": "value"``, JSON-escaped
  ``\\"name\\": \\"value\\"``), by ``[redacted]``;
* every key that starts with one of :data:`KEY_PREFIXES` (the merchant keys' ``sk_live_``,
  the sandbox acquirer's ``sandbox_sk_``, ``sk_test_``, ``whsec_``, ...) by the prefix and
  ``[redacted]``;
* every run of 13-19 digits with separators (``card_data.redact_card_numbers`` without the
  Luhn check: a mistyped card number is still one) by ``[card number redacted]``; inside a
  word shaped like our ids (``pay_`` + 24 hex) or a trace or span id (32 or 16 hex), only a
  Luhn-valid run;
* the same inside URL-encoded (``+``, ``%20``, ``%2D``, twice encoded) and JSON-escaped
  (``\\u0034``, ``\\n4111...``) text: such a word is decoded, redacted, and written back
  encoded (so a JSON line stays valid JSON), only when decoding revealed something.

A pass that provably finds nothing in a line is skipped (ADR 0028): on an ASCII line without
``%`` or ``\\u`` (almost every line), the expressions of names, schemes and prefixes run only
when the line holds a word each of their matches holds, the card-number detector only when a
stretch of digits and separators holds 13 digits, the decoding of words only when decoding
could reveal one of these. The result is the same as running every pass (tested against the
former implementation, tests/support/log_redaction_reference.py).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from urllib.parse import quote_plus, unquote_plus

import structlog

import card_data

#: Names whose value is a secret, wherever they appear (query strings, form bodies, headers,
#: JSON members, logfmt): the one list. Matched case-insensitively as whole words (``key``
#: matches ``key=`` but not ``idempotency_key=``); ``-`` and ``_`` are interchangeable.
SECRET_NAMES: tuple[str, ...] = (
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "api_key",
    "apikey",
    "x_api_key",
    "secret",
    "secret_key",
    "token",
    "password",
    "passwd",
    "authorization",
    "proxy_authorization",
    "cookie",
    "set_cookie",
    "sessionid",
    "csrftoken",
    "key",
    "signature",
    "webhook_secret",
    "cvc",
    "cvv",
    # Adyen's signed result of a shopper's redirect, in our return address's query (ADR 0049)
    "redirectresult",
    "redirect_result",
)

#: Prefixes of the key formats this project issues or holds, with the ones of the common
#: payment APIs: merchant keys (``merchants.services.API_KEY_PREFIX``), the sandbox acquirer's
#: key, test keys, restricted keys, webhook signing secrets, publishable keys, and the
#: shopper's return tokens in our return addresses (``/payments/return/rtok_...``).
KEY_PREFIXES: tuple[str, ...] = (
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    "pk_live_",
    "pk_test_",
    "whsec_",
    "sandbox_sk_",
    "rtok_",  # a shopper's return token (payments.models.new_return_token, ADR 0049)
)

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
#: Our ids (payments.models, the acquirer's charges): a prefix and 24 lower-case hex digits;
#: and OpenTelemetry's trace and span ids (32 and 16 lower-case hex digits with a letter among
#: them: a bare run of digits stays a card-number candidate), in every line beside the
#: request id (ADR 0044).
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
    text = _CREDENTIAL.sub(_credential_redacted, text)
    text = _SECRET_VALUE.sub(_secret_redacted, text)
    text = _KEY.sub(_key_redacted, text)
    return _redact_cards(text)


def _credential_redacted(match: re.Match[str]) -> str:
    return f"{match['scheme']}{match['sep']}{REDACTED}"


def _secret_redacted(match: re.Match[str]) -> str:
    return f"{match['name']}{match['sep']}{REDACTED}"


def _key_redacted(match: re.Match[str]) -> str:
    return f"{match['prefix']}{REDACTED}"


def _name_stems(names: tuple[str, ...]) -> tuple[str, ...]:
    """Few lower-case words such that every match of every name of ``names`` (``_`` or ``-``
    between its parts, any case) holds one of them: a part of a name, chosen greedily to cover
    the most names. Built from :data:`SECRET_NAMES`, so a name added there is covered."""
    parts = {name: name.lower().split("_") for name in names}
    stems: list[str] = []
    uncovered = list(names)
    while uncovered:
        candidates = sorted({part for name in uncovered for part in parts[name]})
        best = max(
            candidates,
            key=lambda stem: sum(any(stem in part for part in parts[n]) for n in uncovered),
        )
        stems.append(best)
        uncovered = [n for n in uncovered if not any(best in part for part in parts[n])]
    return tuple(stems)


#: What a secret name's match holds, lower-cased: ``token``, ``key``, ``secret``, ...
_SECRET_STEMS = _name_stems(SECRET_NAMES)
_CREDENTIAL_STEMS = ("bearer", "basic")
#: A stretch of digits and the separators the card detector allows between digit groups
#: (``card_data.detector.ASCII_SEPARATORS``), from a digit to a digit, long enough to hold
#: 13 digits: every card-number candidate of an ASCII text without escapes lies in one.
_DIGIT_STRETCH = re.compile(r"[0-9][0-9 \t\n\r\v\f./_+-]{11,}[0-9]")


def _may_hold_card_number(text: str) -> bool:
    """False only when no stretch of digits and separators of ``text`` holds 13 digits (then
    the detector finds nothing); for an ASCII text without ``%`` or ``\\u`` escapes."""
    for match in _DIGIT_STRETCH.finditer(text):
        stretch = match.group()
        if sum(map(stretch.count, "0123456789")) >= card_data.MIN_LENGTH:
            return True
    return False


def _redact_plain_ascii(text: str) -> str:
    """:func:`_redact_plain` for an ASCII ``text`` without ``%`` or ``\\u``: each pass runs
    only when the text can hold what it replaces (a name, a scheme, a prefix, 13 digits),
    proved by a substring test or one linear scan; the same result (tests compare the two)."""
    lower = text.lower()
    if any(stem in lower for stem in _CREDENTIAL_STEMS):
        # Only removes text and adds "[redacted]" (no stem): ``lower`` still over-approximates.
        text = _CREDENTIAL.sub(_credential_redacted, text)
    if any(stem in lower for stem in _SECRET_STEMS):
        text = _SECRET_VALUE.sub(_secret_redacted, text)
    if any(prefix in text for prefix in KEY_PREFIXES):
        text = _KEY.sub(_key_redacted, text)
    if _may_hold_card_number(text):
        text = _redact_cards(text)
    return text


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


def _word_redactor(redact_plain: Callable[[str], str]) -> Callable[[re.Match[str]], str]:
    def redact_word(match: re.Match[str]) -> str:
        word = match.group()
        for decode, encode in _DECODINGS:
            decoded = decode(word)
            if decoded != word:
                redacted = redact_plain(decoded)
                if redacted != decoded:
                    return encode(redacted)
        return word

    return redact_word


_redact_word = _word_redactor(_redact_plain)
#: Decoding a word of an ASCII text without ``%`` or ``\\u`` gives such a word again (``+``
#: becomes a space, ``\\n`` a newline, ``\\"`` a quote), so the fast passes apply to it too.
_redact_word_ascii = _word_redactor(_redact_plain_ascii)
#: A JSON escape that decodes to a separator of card numbers (newline, tab, CR, FF, slash).
_SEPARATOR_ESCAPE = re.compile(r"\\[nrtf/]")


def _words_may_hide_something(text: str) -> bool:
    """False only when decoding the words of ``text`` (ASCII, without ``%`` or ``\\u``) cannot
    reveal anything :func:`_redact_plain` replaces. Decoding turns an escape (``+``, ``\\n``,
    ``\\"``, ...) into one character that is not a letter, a digit or ``_``, so a name, a
    scheme or a key prefix seen after decoding was in the text before; digits can only be
    joined by the separators some escapes decode to, which the probe writes as spaces."""
    lower = text.lower()
    if any(stem in lower for stem in (*_CREDENTIAL_STEMS, *_SECRET_STEMS)):
        return True
    if any(prefix in text for prefix in KEY_PREFIXES):
        return True
    return _may_hold_card_number(_SEPARATOR_ESCAPE.sub(" ", text))


def redact(text: str) -> str:
    """Return ``text`` with card numbers, keys, credentials and secret values replaced (the
    module's docstring lists what and how). Idempotent: ``redact(redact(t)) == redact(t)``.

    An ordinary line (ASCII, no ``%`` and no ``\\u`` escape: almost every line) takes the fast
    passes of :func:`_redact_plain_ascii`, which skip what the line cannot hold, and the
    decoding of words only when it has a ``+`` or a ``\\`` escape; any other line takes every
    pass. Both give the same result (ADR 0028; tests/unit/test_log_redaction_equivalence.py
    compares them with the former implementation over generated corpora)."""
    if text.isascii() and "%" not in text and "\\u" not in text:
        text = _redact_plain_ascii(text)
        if ("+" in text or "\\" in text) and _words_may_hide_something(text):
            text = _ENCODED_WORD.sub(_redact_word_ascii, text)
        return text
    text = _redact_plain(text)
    return _ENCODED_WORD.sub(_redact_word, text)


class RedactingFormatter(logging.Formatter):
    """A plain :class:`logging.Formatter` whose whole output (traceback included) goes
    through :func:`redact`."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class RedactingProcessorFormatter(structlog.stdlib.ProcessorFormatter):
    """structlog's formatter (JSON lines or the console renderer) whose whole rendered line
    (fields, traceback) goes through :func:`redact`: the redaction step of every handler
    observability/log_config.py builds."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class ClientErrorsAsWarnings(logging.Filter):
    """A handler filter: Django's ``django.security.*`` records (a ``SuspiciousOperation``: a
    bad ``Host`` header, too many fields, a body over the limit) are logged at ERROR with a
    traceback, although each is a client's mistake already answered with a 400. This filter
    rewrites them to WARNING and drops the traceback; the message (which names the bad value,
    redacted like every line) is kept. Every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Return True (never drops a record); rewrite a ``django.security.*`` one in place."""
        if record.name.startswith("django.security.") and record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


#: Return values (their ``saferepr``, as Celery logs them) of a task that did nothing.
_NOTHING_DONE = frozenset({"0", "None", "False", "[]", "{}", "()", "''", "0.0"})
_ZERO_DICT = re.compile(r"^\{(?:'[^']*': 0(?:, )?)*\}$")


def _did_nothing(return_value: object) -> bool:
    text = str(return_value)
    return text in _NOTHING_DONE or bool(_ZERO_DICT.match(text))


class IdleTasksAtDebug(logging.Filter):
    """A logger filter for ``celery.beat``, ``celery.worker.strategy`` and ``celery.app.trace``:
    the lines of an idle stack move to DEBUG, so ``make run`` at INFO logs only what happened.

    Moved: beat's ``Scheduler: Sending due task`` (one a tick), the worker's ``Task ...
    received`` (the outcome line follows), and ``Task ... succeeded`` when the task returned
    nothing done (``0``, ``None``, an empty collection, a dict of zeros: a sweep with no work).
    A task that did something, failed or was retried keeps its level. A moved record is kept
    only when its logger is enabled for DEBUG. A task's runtime is rounded to 0.1 ms: its 17
    digits could read as a card number and be redacted as one."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Return False for a moved record its logger does not show at DEBUG."""
        if isinstance(record.args, dict) and isinstance(record.args.get("runtime"), float):
            record.args = {**record.args, "runtime": round(record.args["runtime"], 4)}
        if record.levelno != logging.INFO or not self._idle(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    @staticmethod
    def _idle(record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if record.name == "celery.beat":
            return message.startswith("Scheduler: Sending due task")
        if record.name == "celery.worker.strategy":
            return " received" in message
        if record.name == "celery.app.trace" and "succeeded in" in message:
            args = record.args if isinstance(record.args, dict) else {}
            return "return_value" in args and _did_nothing(args["return_value"])
        return False
