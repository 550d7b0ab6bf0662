"""resilience.structured_fields against the HTTP working group's structured-field test
vectors (tests/data/structured-field-tests, BSD 3-clause, IETF Trust: LICENSE.md beside them).

Every parsing vector of every file is run: Lists, Dictionaries and Items, with every bare type
(Integer, Decimal, String, Token, Byte Sequence, Boolean, Date, Display String) and parameters.
A ``must_fail`` vector must raise ``ParseError``; a ``can_fail`` one may raise it or must parse
to ``expected``; every other must parse to ``expected``, types included. Not copied, so not
run: the suite's ``serialisation-tests/`` directory and the ``canonical`` members, which test
serialising, and gateway_client only parses.
"""

from __future__ import annotations

import base64
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from resilience.structured_fields import (
    Date,
    DisplayString,
    Member,
    ParseError,
    Token,
    parse_dictionary,
    parse_item,
    parse_list,
)

VECTORS = Path(__file__).resolve().parents[1] / "data" / "structured-field-tests"
PARSERS = {"list": parse_list, "dictionary": parse_dictionary, "item": parse_item}


@functools.cache
def vectors() -> list[Any]:
    cases = []
    for path in sorted(VECTORS.glob("*.json")):
        for case in json.loads(path.read_text()):
            cases.append(pytest.param(case, id=f"{path.stem}: {case['name']}"))
    return cases


def bare(value: Any) -> Any:
    """A parsed bare item in the vectors' JSON form, tagged with its type."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, Date):
        return ("date", int(value))
    if isinstance(value, int):
        return ("integer", value)
    if isinstance(value, float):
        return ("decimal", value)
    if isinstance(value, Token):
        return ("token", str(value))
    if isinstance(value, DisplayString):
        return ("displaystring", str(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, bytes):
        return ("binary", base64.b32encode(value).decode())
    raise AssertionError(f"not a bare item: {value!r}")


def expected_bare(value: Any) -> Any:
    """An expected bare item of a vector, tagged the same way."""
    if isinstance(value, dict):
        if value["__type"] == "binary":  # base32, padding as the vectors write it
            return ("binary", base64.b32encode(base64.b32decode(value["value"])).decode())
        return (value["__type"], value["value"])
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int):
        return ("integer", value)
    if isinstance(value, float):
        return ("decimal", value)
    return ("string", value)


def member(parsed: Member) -> Any:
    params = [[name, bare(value)] for name, value in parsed.params.items()]
    if isinstance(parsed.value, tuple):
        return [[member(item) for item in parsed.value], params]
    return [bare(parsed.value), params]


def expected_member(value: list[Any]) -> Any:
    item, params = value
    params = [[name, expected_bare(v)] for name, v in params]
    if isinstance(item, list):
        return [[expected_member(i) for i in item], params]
    return [expected_bare(item), params]


def as_vector(kind: str, parsed: Any) -> Any:
    if kind == "list":
        return [member(m) for m in parsed]
    if kind == "dictionary":
        return [[name, member(m)] for name, m in parsed.items()]
    return member(parsed)


def expected_vector(kind: str, expected: Any) -> Any:
    if kind == "list":
        return [expected_member(m) for m in expected]
    if kind == "dictionary":
        return [[name, expected_member(m)] for name, m in expected]
    return expected_member(expected)


def test_the_vectors_are_here_with_their_licence():
    """The files (with LICENSE.md) are in the repository, and hold every header type."""
    assert (VECTORS / "LICENSE.md").read_text().startswith("Copyright (c) 2018- IETF Trust")
    kinds = {case.values[0]["header_type"] for case in vectors()}
    assert kinds == set(PARSERS)
    assert len(vectors()) > 1500


@pytest.mark.parametrize("case", vectors())
def test_vector(case):
    """One vector: parse its field lines (joined with ", ") as its header type."""
    parse = PARSERS[case["header_type"]]
    text = ", ".join(case["raw"])
    if case.get("must_fail"):
        with pytest.raises(ParseError):
            parse(text)
        return
    try:
        parsed = parse(text)
    except ParseError:
        assert case.get("can_fail"), "failed to parse a valid field"
        return
    assert as_vector(case["header_type"], parsed) == expected_vector(
        case["header_type"], case["expected"]
    )
