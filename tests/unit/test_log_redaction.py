"""The log filter that keeps card numbers and API keys out of log lines (no database)."""

from __future__ import annotations

import logging

import pytest

from config.log_filters import RedactSecrets, redact


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('"GET /payments/4111111111111111 HTTP/1.1" 404', '"GET /payments/[card number redacted] HTTP/1.1" 404'),  # noqa: E501 - a table, one case a line
        ("GET /payments?reference=5555 5555 5555 4444", "GET /payments?reference=[card number redacted]"),  # noqa: E501
        ("GET /payments?api_key=abc123&limit=2", "GET /payments?api_key=[redacted]&limit=2"),
        ("Bearer sk_live_AbC-12_x", "Bearer sk_live_[redacted]"),
        ("payment pay_0123456789abcdef01234567 succeeded", "payment pay_0123456789abcdef01234567 succeeded"),  # noqa: E501
        ("reconcile pay_a1234567890123456789bcde: resolved", "reconcile pay_a1234567890123456789bcde: resolved"),  # noqa: E501
    ],
)  # fmt: skip
def test_redact(line, expected):
    """Card numbers, API keys and secret query values are replaced; payment ids are kept."""
    assert redact(line) == expected


def test_filter_rewrites_the_formatted_message():
    """The record's arguments are merged, then redacted, before any handler formats it."""
    record = logging.LogRecord(
        "x", logging.WARNING, __file__, 1, "Not Found: %s", ("/payments/4242424242424242",), None
    )
    assert RedactSecrets().filter(record) is True
    assert record.getMessage() == "Not Found: /payments/[card number redacted]"
