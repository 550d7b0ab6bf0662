"""The fast redaction (observability/log_filters.py, ADR 0028) gives exactly what the former one
gave (tests/support/log_redaction_reference.py) on every input of generated corpora: card numbers in
every form the detector handles (tests/support/card_corpus.py), secrets and keys in every way a
line holds them, the service's own log lines as the formatter renders them, and random text
built from the characters the fast path's guards decide on (digits, separators, escapes, the
letters of secret names, non-ASCII look-alikes). No database.

``REDACTION_CORPUS_SCALE=50`` multiplies the random part (a longer soak; the default keeps the
file near a few seconds).
"""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import random
from collections.abc import Iterator
from urllib.parse import quote, quote_plus

import pytest
import structlog

from observability import log_filters
from observability.log_config import logging_config
from observability.log_filters import KEY_PREFIXES, SECRET_NAMES, redact
from tests.support import log_redaction_reference as reference
from tests.support.card_corpus import card_corpus, luhn_complete, non_card_corpus

SCALE = int(os.environ.get("REDACTION_CORPUS_SCALE", "1"))
SECRET = "s3cr3tV4lue"

#: How a line can carry a fragment: as is, URL-encoded three ways, JSON-escaped, \u-escaped.
ENCODINGS = (
    lambda text: text,
    quote_plus,
    quote,
    lambda text: quote(quote(text)),
    lambda text: json.dumps(text)[1:-1],
    lambda text: "".join(f"\\u{ord(c):04x}" for c in text),
    lambda text: "\\n" + text + "\\n",
)


def _assert_same(texts: Iterator[str] | list[str]) -> int:
    count = 0
    for text in texts:
        expected = reference.redact(text)
        assert redact(text) == expected, text
        count += 1
    return count


def test_card_numbers_in_every_form():
    corpus = [text for _, text in card_corpus()]
    assert _assert_same(corpus) > 1000
    framed = (f"GET /payments?reference={text}&limit=2 {text}" for text in corpus[::7])
    _assert_same(framed)


def test_text_that_is_not_card_data():
    for texts in non_card_corpus(per_category=60).values():
        _assert_same(texts)
        _assert_same(" | ".join(texts[i : i + 5]) for i in range(0, len(texts), 5))


def _secret_lines() -> Iterator[str]:
    templates = (
        "{name}={value}&next=1", "{name}: {value}", '"{name}": "{value}"', "'{name}': '{value}'",
        '{{\\"{name}\\":\\"{value}\\"}}', "{name} = {value}", "{name}+=+{value}",
        "x={name}%3D{value}", "{name}\\n={value}", "{name}\\t:\\t{value}", "x_{name}={value}",
        "{name}s={value}", "my{name}={value}", "{name}=Bearer {value}", "{name}:\\\"{value}\\\"",
    )  # fmt: skip
    for name in SECRET_NAMES:
        for spelled in (name, name.upper(), name.replace("_", "-"), name.title()):
            for template in templates:
                line = template.format(name=spelled, value=SECRET)
                for encode in ENCODINGS[:5]:
                    yield encode(line)
                    yield f"2026-12-01T18:49:11.050646Z [info] {encode(line)} done"
    for scheme in ("Bearer", "bearer", "BASIC", "Basic", "Token"):
        for value in (SECRET, "sk_live_AbC-12_x", "a.b/c+d=", "4111111111111111"):
            for sep in (" ", "  ", "\t", "+", "\\n", "%20"):
                yield f"Authorization: {scheme}{sep}{value} next"
                yield f"sent {scheme}{sep}{value} next"
    for prefix in KEY_PREFIXES:
        key = prefix + "Zx9_Q-" + "a" * 20
        for line in (f"key {key} used", f'{{"k": "{key}"}}', f"k={key}", f"x{key}y"):
            for encode in ENCODINGS:
                yield encode(line)
        yield prefix  # a bare prefix: not a key
        yield prefix.upper() + "abcdef"


def test_secrets_keys_and_credentials():
    assert _assert_same(_secret_lines()) > 5000


def _pay_id(rnd: random.Random) -> str:
    return "pay_" + "".join(rnd.choices("0123456789abcdef", k=24))


def _request_id(rnd: random.Random) -> str:
    return "req_" + "".join(rnd.choices("abcdefghijklmnopqrstuvwxyz234567", k=24))


def _records(rnd: random.Random) -> Iterator[logging.LogRecord]:
    """The service's hot-path records (request, attempt, outcome, access, failover, an error
    with a traceback), with random ids, amounts, durations and some card data put in."""

    def record(name: str, msg: str, args: tuple, level: int = logging.INFO, **extra):
        made = logging.LogRecord(name, level, __file__, 1, msg, args, None)
        made.__dict__.update(extra)
        return made

    pay, req = _pay_id(rnd), _request_id(rnd)
    elapsed = rnd.random() / 10
    yield record(
        "payments.request", "request %s %s %s", ("POST", "/payments", 201),
        method="POST", route="/payments", status=201, duration_ms=round(rnd.random() * 90, 1),
        bytes=rnd.randint(300, 900), merchant_id=rnd.randint(1, 10**6), idempotency="new",
        payment_id=pay, payment_status="succeeded", authorize_outcome="approved",
    )  # fmt: skip
    yield record(
        "gateway_client", "acquirer attempt %s %s attempt=%d status=%s outcome=%s elapsed=%s",
        ("authorize", "sandbox", 1, 201, "approved", f"{elapsed:.3f}s"),
        gateway_operation="authorize", gateway_reference=pay, gateway_elapsed=elapsed,
        gateway_rate_headers={"x-ratelimit-remaining": str(rnd.randint(0, 10**5))},
        gateway_request_id=req, gateway_budget_retries=rnd.randint(0, 200),
    )  # fmt: skip
    yield record("payments.authorization.create", "payment %s authorize outcome=%s status=%s",
                 (pay, "approved", "succeeded"))  # fmt: skip
    yield record(
        "gunicorn.access", '%s "%s %s %s" %s %s %sms request_id=%s',
        ("127.0.0.1", "POST", rnd.choice(["/payments", f"/payments/{pay}", "/p/4111 1111"]),
         "HTTP/1.1", 201, rnd.randint(100, 999), rnd.randint(1, 99), req),
    )  # fmt: skip
    card = luhn_complete("4" + "".join(rnd.choices("0123456789", k=14)))
    amount = f"{rnd.randint(0, 10**7)}.{rnd.randint(0, 99):02d}"
    yield record("payments.authorization.failover", "payment %s amount %s card %s token=%s", (
        pay, amount, rnd.choice([card, " ".join(card[i:i + 4] for i in range(0, 16, 4)), "-"]),
        rnd.choice([SECRET, "-"]),
    ))  # fmt: skip
    try:
        raise ValueError(f"bad {card} with sk_live_abc and token={SECRET} at {amount}")  # noqa: TRY301 - a traceback to render
    except ValueError:
        import sys

        failed = record("django.request", "failed %s", (pay,), logging.ERROR)
        failed.exc_info = sys.exc_info()
        yield failed


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_the_service_lines_as_rendered(log_format):
    """Lines rendered by the configured formatter (before its redaction step), with the bound
    context: the same result from both implementations."""
    config = logging_config(log_format=log_format)
    formatter = logging.config.DictConfigurator(config).configure_formatter(
        config["formatters"]["structured"]
    )
    rnd = random.Random(28)
    lines: list[str] = []
    structlog.contextvars.bind_contextvars(request_id=_request_id(rnd), merchant_id=7)
    try:
        for _ in range(40 * SCALE):
            for made in _records(rnd):
                lines.append(structlog.stdlib.ProcessorFormatter.format(formatter, made))
    finally:
        structlog.contextvars.clear_contextvars()
    _assert_same(lines)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.emit(next(_records(rnd)))
    assert "[card number redacted]" not in stream.getvalue()  # an ordinary line is unchanged


#: Characters the guards decide on, weighted towards the boundaries.
_PIECES = (
    *"0123456789" * 6, *" -./_+\t\n", *"\\\\\\", '"', "'", "%", "=", ":", "&", ",", ";", "{", "}",
    "\\n", "\\t", "\\r", "\\f", "\\b", "\\/", '\\"', "\\\\", "\\u0034", "\\u0020", "\\u00", "%20",
    "%2D", "%34", "%25", "%2", "+", "++", "   ", "pay_", "re_", "ch_", "op_", "sk_live_",
    "sandbox_sk_", "whsec_", "sk_", "key", "KEY", "Key", "token", "TOKEN", "secret", "passwd",
    "password", "cvc", "cvv", "cookie", "sessionid", "signature", "authorization", "api",
    "bearer ", "Bearer ", "basic ", "bearer", "BASIC", "x", "a", "f", "z", "abc", "\u212a",
    "\u017f", "\u0131", "\u0130", "\uff14", "\u0664", "\u00a0", "\u2013", "\u200b", "\u00e9",
    "DE89", "GB",
    "e3b0c442-98fc-1c14-9afb-f4c8996fb924",
)  # fmt: skip


def _random_texts(rnd: random.Random, count: int) -> Iterator[str]:
    for _ in range(count):
        yield "".join(rnd.choices(_PIECES, k=rnd.randint(0, 40)))


def _digit_stretches(rnd: random.Random, count: int) -> Iterator[str]:
    """Digit groups of 11-15 digits in all, joined by 1-4 separators, some escaped, in words
    and ids: the card guard's boundary."""
    separators = (" ", "-", ".", "/", "_", "+", "\t", "  ", "   ", "    ", "\\n", "\\t", "\\/",
                  "\\\\n", "\\b", "\\r\\n", ". ", " - ")  # fmt: skip
    for _ in range(count):
        digits = "".join(rnd.choices("0123456789", k=rnd.randint(11, 20)))
        if rnd.random() < 0.5:
            digits = luhn_complete(digits[:-1])
        groups, position = [], 0
        while position < len(digits):
            size = rnd.choice((1, 3, 4, 4, 5, 6, 19))
            groups.append(digits[position : position + size])
            position += size
        text = groups[0]
        for group in groups[1:]:
            text += rnd.choice(separators) + group
        yield rnd.choice(("{}", "x{}y", "pay_{}", '"{}"', "ref={}&x=1", "+{}", "{}Z", "0{}"))\
            .format(text)  # fmt: skip


def test_random_text_around_the_guards():
    rnd = random.Random(2028)
    assert _assert_same(_random_texts(rnd, 4000 * SCALE)) == 4000 * SCALE
    _assert_same(_digit_stretches(rnd, 3000 * SCALE))
    words = list(_random_texts(rnd, 300 * SCALE))
    _assert_same(" ".join(words[i : i + 20]) for i in range(0, len(words), 20))


def test_the_secret_stems_cover_every_name():
    """Every spelling of every secret name holds one of the stems the fast path looks for."""
    for name in SECRET_NAMES:
        for spelled in (name, name.replace("_", "-")):
            assert any(stem in spelled for stem in log_filters._SECRET_STEMS), name


def test_ordinary_lines_take_the_fast_path():
    """The service's ordinary lines pass no guard: no pass of the full redaction runs."""
    line = (
        '{"event": "request POST /payments 201", "method": "POST", "route": "/payments", '
        '"status": 201, "duration_ms": 51.0, "bytes": 495, "merchant_id": 1, "payment_id": '
        '"pay_685edfd63d93021d9bfe3a18", "request_id": "req_q7s36puiywk7c2y4obfy3ojv", '
        '"timestamp": "2026-12-01T18:49:11.059019Z"}'
    )
    assert not log_filters._may_hold_card_number(line)
    assert not any(stem in line.lower() for stem in log_filters._SECRET_STEMS)
    assert redact(line) == line
