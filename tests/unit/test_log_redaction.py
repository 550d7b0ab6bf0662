"""The one redaction step of every log line (observability/log_filters.py), and the formatter of
every handler observability/log_config.py builds (no database)."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import re
from urllib.parse import quote, quote_plus

import pytest

from merchants.services import API_KEY_PREFIX
from observability.log_config import environment_log_format, logging_config
from observability.log_filters import KEY_PREFIXES, SECRET_NAMES, redact

CARDS = ("4111111111111111", "5555555555554444", "378282246310005", "6011111111111117")
SECRET = "s3cr3tV4lue"
#: The separators people put between digit groups, as sent.
SEPARATORS = (" ", "-", ".", "  ")


def grouped(card: str, separator: str) -> str:
    return separator.join(card[i : i + 4] for i in range(0, len(card), 4))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('"GET /payments/4111111111111111 HTTP/1.1" 404', '"GET /payments/[card number redacted] HTTP/1.1" 404'),  # noqa: E501 - a table, one case a line
        ("GET /payments?reference=5555 5555 5555 4444", "GET /payments?reference=[card number redacted]"),  # noqa: E501
        ("GET /payments?api_key=abc123&limit=2", "GET /payments?api_key=[redacted]&limit=2"),
        ("Bearer sk_live_AbC-12_x", "Bearer [redacted]"),
        ("key sk_live_AbC-12_x in a message", "key sk_live_[redacted] in a message"),
        ("GET /p?reference=5555+5555+5555+4444&x=1", "GET /p?reference=[card number redacted]&x=1"),
        ("payment pay_0123456789abcdef01234567 succeeded", "payment pay_0123456789abcdef01234567 succeeded"),  # noqa: E501
        ("idempotency_key=order-17 limit=20", "idempotency_key=order-17 limit=20"),
    ],
)  # fmt: skip
def test_redact(line, expected):
    """Card numbers, keys and secret values are replaced; ids and harmless names are kept."""
    assert redact(line) == expected


@pytest.mark.parametrize("card", CARDS)
@pytest.mark.parametrize("separator", SEPARATORS)
@pytest.mark.parametrize(
    "encode",
    [
        lambda text: text,
        quote_plus,  # '+' for spaces
        quote,  # %20
        lambda text: quote(text, safe="").replace("-", "%2D"),  # every separator encoded
        lambda text: quote(quote(text)),  # twice
        lambda text: json.dumps(text)[1:-1],  # JSON-escaped
        lambda text: "".join(f"\\u{ord(c):04x}" for c in text),  # JSON \u escapes, digits too
        lambda text: "\\n" + text,  # after a JSON newline escape (a traceback in a JSON line)
    ],
    ids=["plain", "plus", "percent20", "percent2D", "twice", "json", "json-u", "json-newline"],
)
def test_no_card_number_survives_any_encoding(card, separator, encode):
    """Every grouping of every brand's test PAN, in every encoding a query string, a form
    body or a JSON line gives it: no digit run of it is left."""
    line = f"GET /payments?reference={encode(grouped(card, separator))}&limit=2 done"
    redacted = redact(line)
    visible = re.sub(r"%[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}", " ", redacted)
    assert not re.search(r"\d{4}", visible), redacted
    assert "limit=2" in redacted


@pytest.mark.parametrize("name", SECRET_NAMES)
@pytest.mark.parametrize(
    "template",
    [
        "{name}={value}&next=1",
        "{name}: {value}",
        '"{name}": "{value}"',
        "'{name}': '{value}'",
        '{{\\"{name}\\":\\"{value}\\"}}',  # JSON inside a JSON string
        "{upper}={value}",
        "{dashed}={value}",
        "x={encoded}",  # the whole pair URL-encoded inside another value
    ],
)
def test_every_secret_name_hides_its_value(name, template):
    """Each name of the one list, in each way a line can hold a name and its value."""
    pair = f"{name}={SECRET}"
    line = template.format(
        name=name,
        value=SECRET,
        upper=name.upper(),
        dashed=name.replace("_", "-"),
        encoded=quote(pair, safe=""),
    )
    assert SECRET not in redact(line), line


@pytest.mark.parametrize("prefix", KEY_PREFIXES)
def test_every_key_prefix_is_redacted(prefix):
    key = prefix + "Zx9_Q-" + "a" * 30
    for line in (f"key {key} used", f'{{"k": "{key}"}}', quote(f"k={key}")):
        assert key not in redact(line)
        assert key[len(prefix) :] not in redact(line)


def test_the_project_key_formats_are_in_the_one_list():
    """The merchant keys' prefix and the sandbox acquirer's come from KEY_PREFIXES."""
    assert API_KEY_PREFIX in KEY_PREFIXES
    assert "sandbox_sk_" in KEY_PREFIXES


def test_redact_is_idempotent():
    line = "pan 4111 1111 1111 1111 token=abc sk_live_x reference=5555%205555%205555%204444"
    assert redact(redact(line)) == redact(line)


def _render(log_format: str, emit) -> str:
    """What a handler with the configured formatter writes for ``emit(logger)``."""
    config = logging_config(log_format=log_format, level="INFO")
    formatter = logging.config.DictConfigurator(config).configure_formatter(
        config["formatters"]["structured"]
    )
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger(f"tests.redaction.{log_format}")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        emit(logger)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def _raise_with_card(logger: logging.Logger) -> None:
    card = CARDS[0]
    try:
        raise ValueError(f"bad input {card} with {API_KEY_PREFIX}abc and token={SECRET}")  # noqa: TRY301 - a traceback to log
    except ValueError:
        logger.exception("failed for %s", grouped(CARDS[1], " "), extra={"body": f"card {card}"})


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_formatter_redacts_message_arguments_extra_fields_and_traceback(log_format):
    """The one step runs over the whole rendered line: the message and its arguments, the
    ``extra`` fields and the traceback (JSON: one valid object per line)."""
    output = _render(log_format, _raise_with_card)
    for secret in (*CARDS[:2], grouped(CARDS[1], " "), SECRET, f"{API_KEY_PREFIX}abc"):
        assert secret not in output, secret
    assert "Traceback" in output and "[card number redacted]" in output
    if log_format == "json":
        (line,) = output.strip().splitlines()
        document = json.loads(line)
        assert document["level"] == "error"
        assert "ValueError: bad input [card number redacted]" in document["exception"]
        assert document["body"] == "card [card number redacted]"


def test_json_lines_carry_the_bound_context_and_gateway_fields():
    """The request id bound in the context and an attempt's ``gateway_*`` extras are fields."""
    import structlog

    def emit(logger):
        structlog.contextvars.bind_contextvars(request_id="req_test")
        try:
            logger.info("acquirer attempt", extra={"gateway_status": 201})
        finally:
            structlog.contextvars.clear_contextvars()

    document = json.loads(_render("json", emit))
    assert document["request_id"] == "req_test"
    assert document["gateway_status"] == 201
    assert document["event"] == "acquirer attempt"


def test_log_format_of_processes_without_settings():
    assert environment_log_format({}) == "console"
    assert environment_log_format({"DJANGO_SETTINGS_MODULE": "config.settings.production"}) == (
        "json"
    )
    assert environment_log_format({"LOG_FORMAT": "json"}) == "json"
    with pytest.raises(ValueError, match="LOG_FORMAT"):
        logging_config(log_format="xml")


def test_gunicorn_logs_through_the_same_configuration():
    """gunicorn's master and workers use the builder's configuration (pgserver's "already
    running" INFO line quiet), and the access log writes the path without the query string."""
    import runpy
    from pathlib import Path

    conf = runpy.run_path(str(Path(__file__).resolve().parents[2] / "config/gunicorn.conf.py"))
    formatter = conf["logconfig_dict"]["formatters"]["structured"]
    assert formatter["()"] == "observability.log_filters.RedactingProcessorFormatter"
    assert conf["logconfig_dict"]["loggers"]["pgserver"] == {"level": "WARNING"}
    access = conf["access_log_format"]
    assert "%(U)s" in access and "%(r)s" not in access and "%(q)s" not in access
    assert "{request-id}o" in access
    assert conf["logger_class"] == "observability.access_log.AccessLogger"


@pytest.fixture
def access_logger():
    """observability/access_log.py's logger as gunicorn builds it, writing its access lines to a
    list."""
    from gunicorn.config import Config

    from observability.access_log import AccessLogger

    cfg = Config()
    cfg.set("accesslog", "-")
    cfg.set("errorlog", "/dev/null")
    cfg.set("access_log_format", "%(m)s %(U)s %(s)s request_id=%({request-id}o)s")
    built = AccessLogger(cfg)
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    built.access_log = logging.getLogger("tests.access_log")
    built.access_log.addHandler(Collect())
    built.access_log.propagate = False
    built.access_log.setLevel(logging.INFO)
    yield built, lines
    built.access_log.handlers.clear()
    for name in ("gunicorn.error", "gunicorn.access"):  # what gunicorn's setup added
        log = logging.getLogger(name)
        for handler in [h for h in log.handlers if getattr(h, "_gunicorn", False)]:
            log.removeHandler(handler)


def test_no_access_line_for_a_request_the_request_line_covers(access_logger):
    """gunicorn's access line only when the WSGI environ does not say the request line was
    written (a request gunicorn answered itself, or one the app failed before writing it)."""
    import datetime
    from types import SimpleNamespace

    from observability.request_context import REQUEST_LINE_WRITTEN

    logger, lines = access_logger
    answer = SimpleNamespace(status="201 Created", sent=12, headers=[("Request-Id", "req_1")])
    request = SimpleNamespace(headers=[])
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/payments", "RAW_URI": "/payments",
               "SERVER_PROTOCOL": "HTTP/1.1"}  # fmt: skip
    elapsed = datetime.timedelta(milliseconds=5)
    logger.access(answer, request, {**environ, REQUEST_LINE_WRITTEN: True}, elapsed)
    assert lines == []
    logger.access(answer, request, environ, elapsed)
    assert lines == ["POST /payments 201 request_id=req_1"]


def test_a_webhook_signing_secret_is_redacted_whole_whatever_its_base64_holds():
    """``whsec_`` + base64 holds ``+``, ``/`` and ``=``: the redaction covers every character of
    the secret, not the part before the first of them (a generated corpus of real secrets, in
    the line shapes a log carries them in)."""
    from webhooks.signing import new_secret

    shapes = ("secret {s} rotated", '{{"secret": "{s}"}}', "url=https://h.example/x?k={s}&a=1")
    secrets_with_symbols = 0
    for _ in range(300):
        secret = new_secret()
        secrets_with_symbols += any(c in secret for c in "+/=")
        tail = secret[len("whsec_") :]
        for shape in shapes:
            line = redact(shape.format(s=secret))
            assert tail not in line, line
            # no piece of the secret longer than 3 characters survives (a piece the line's own
            # words hold, such as "xamp" of "example", is no trace of the secret: skipped, or
            # about one run in a hundred would fail on chance)
            words = shape.format(s="whsec_[redacted]")
            pieces = {tail[i : i + 4] for i in range(len(tail) - 3)} - {
                words[i : i + 4] for i in range(len(words) - 3)
            }
            assert not any(piece in line for piece in pieces), line
    assert secrets_with_symbols > 250
