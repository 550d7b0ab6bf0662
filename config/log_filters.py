"""A logging filter that keeps card numbers and API keys out of every log line.

Request lines and paths reach logs through gunicorn's access log and Django's request
warnings (``Not Found: /payments/<anything>``); a hostile or careless client can put a card
number or an API key in a URL. This filter rewrites each record's message before any handler
formats it: standalone runs of 13-19 digits (spaces or dashes between them allowed) become
``[card number redacted]``, ``sk_live_...`` keys become ``sk_live_[redacted]``, and the values of
query parameters named like a secret (``api_key=``, ``token=``, ``password=``, ``key=``) become
``[redacted]``.
"""

from __future__ import annotations

import logging
import re

#: 13-19 digits (single spaces or dashes between) standing alone: not inside a longer token such
#: as a payment id (``pay_`` + hex), whose random hex often holds 13 digits in a row.
CARD_NUMBER = re.compile(r"(?<![0-9A-Za-z])\d(?:[ -]?\d){12,18}(?![0-9A-Za-z])")
API_KEY = re.compile(r"sk_live_[A-Za-z0-9_\-]+")
SECRET_PARAMETER = re.compile(
    r"(?i)\b(api_?key|token|secret|password|key|authorization)=([^&\s\"']+)"
)


def redact(text: str) -> str:
    """Return ``text`` with card numbers, API keys and secret query values replaced."""
    text = CARD_NUMBER.sub("[card number redacted]", text)
    text = API_KEY.sub("sk_live_[redacted]", text)
    return SECRET_PARAMETER.sub(lambda m: f"{m.group(1)}=[redacted]", text)


class RedactSecrets(logging.Filter):
    """Rewrite the record's message with :func:`redact` (the arguments are merged into it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record: the handler's own error path reports it
            return True
        redacted = redact(message)
        if redacted != message or record.args:
            record.msg, record.args = redacted, ()
        return True
