"""The log redaction (observability/log_filters.py) on the audit's card-number spellings
(``tests/support/card_spellings.py``): every line holding one is redacted, and the fast path
gives what the reference implementation gives (no database)."""

from __future__ import annotations

import pytest

from card_data import contains_card_number
from observability.log_filters import redact
from tests.support import log_redaction_reference as reference
from tests.support.card_spellings import spellings

LINES = {
    name: [
        line
        for text in texts
        for line in (text, f"GET /payments?reference={text} 200", f'{{"reference": "{text}"}}')
    ]
    for name, texts in spellings().items()
}


@pytest.mark.parametrize("spelling_class", sorted(LINES))
def test_every_spelling_is_redacted_in_a_log_line(spelling_class):
    """As a line, in a request line and in a JSON field: no card number left, and the same
    result as the former implementation."""
    lines = LINES[spelling_class]
    assert [ascii(line) for line in lines if contains_card_number(redact(line))] == []
    assert [ascii(line) for line in lines if redact(line) != reference.redact(line)] == []
