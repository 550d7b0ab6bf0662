"""The hot path's statements reach psycopg's raw-query cursor with PostgreSQL's ``$n``
placeholders (idempotency/prepared_cursor.py): numbered exactly as psycopg's own conversion
would number them, generated statements included, and anything psycopg would refuse refused."""

from __future__ import annotations

import random

import pytest
from psycopg._queries import PostgresQuery
from psycopg.adapt import Transformer

from idempotency.prepared_cursor import numbered_placeholders


def psycopg_text(query: str, count: int) -> str:
    """What psycopg's own (cached or not) conversion sends for ``query`` with ``count``
    parameters, as text."""
    converted = PostgresQuery(Transformer())
    converted.convert(query, [1] * count)
    return converted.query.decode()


def test_placeholders_are_numbered_in_order_and_a_doubled_percent_is_one():
    query = "SELECT %s, '100%%', x FROM t WHERE a = %s AND b LIKE 'a%%' AND c IN (%s, %s)"
    assert numbered_placeholders(query) == (
        "SELECT $1, '100%', x FROM t WHERE a = $2 AND b LIKE 'a%' AND c IN ($3, $4)"
    )


def test_generated_statements_are_numbered_as_psycopg_numbers_them():
    """500 statements of 1 to 120 placeholders among SQL fragments, literal percents, dollar
    signs and non-ASCII text: the same text psycopg would send (it numbers above 50 too, it
    only stops caching there)."""
    rnd = random.Random(30)
    fragments = ["SELECT ", "a = ", ", ", " AND ", "'%%'", "$$", "é", "\n", "(", ")", "::int", " "]
    for _ in range(500):
        count = rnd.randint(1, 120)
        parts = []
        for _ in range(count):
            parts.extend(rnd.choices(fragments, k=rnd.randint(0, 3)))
            parts.append("%s")
        query = "".join(parts)
        assert numbered_placeholders(query) == psycopg_text(query, count), query


@pytest.mark.parametrize("query", ["SELECT %(name)s", "SELECT %d", "SELECT 5 % 3", "SELECT %"])
def test_any_other_percent_form_is_refused(query):
    with pytest.raises(ValueError, match="only %s placeholders"):
        numbered_placeholders(query)
