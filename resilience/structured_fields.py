"""
A parser for RFC 9651 structured fields (which obsoletes RFC 8941): Lists, Dictionaries and
Items, with every bare type, enough for the IETF RateLimit headers and checked against the HTTP
working group's test vectors (tests/data/structured-field-tests, run by
tests/lib/test_gateway_sf_vectors.py).

    RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400;pk=:cHsxMjM0NTY3ODk=:
    RateLimit: "default";r=0;t=30

`parse_list(text)` returns a list of `Member(value, params)`; an inner list is a `Member` whose
`value` is a tuple of `Member`s. `parse_dictionary(text)` returns a dict of member name ->
`Member`; `parse_item(text)` one `Member`. Bare items read as: Integer -> int, Decimal ->
float, String -> str, Token -> `Token` (a str subclass), Byte Sequence -> bytes, Boolean ->
bool, Date -> `Date` (an int subclass), Display String -> `DisplayString` (a str subclass).
Parameters are a dict in the order received (a repeated key keeps its first place and takes the
last value, RFC 9651 section 4.2.3.2). Any deviation from the grammar raises `ParseError`, and
the caller ignores the whole field, as RFC 9651 section 4.2 requires ("fail parsing").

Field values combined from several field lines are joined with ", " by the caller (RFC 9110
section 5.3) before parsing.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Date",
    "DisplayString",
    "Member",
    "ParseError",
    "Token",
    "parse_dictionary",
    "parse_item",
    "parse_list",
]

_DIGITS = frozenset("0123456789")
_LCALPHA = frozenset("abcdefghijklmnopqrstuvwxyz")
_ALPHA = _LCALPHA | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_KEY_CHARS = _LCALPHA | _DIGITS | frozenset("_-.*")
_TCHAR = frozenset("!#$%&'*+-.^_`|~") | _DIGITS | _ALPHA
_TOKEN_CHARS = _TCHAR | frozenset(":/")
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_LCHEX = frozenset("0123456789abcdef")


class ParseError(ValueError):
    """The field is not a valid structured field; ignore the whole field."""


class Token(str):
    """A structured field Token (an unquoted identifier such as `default`)."""

    __slots__ = ()


class DisplayString(str):
    """A structured field Display String (RFC 9651 section 3.3.8): Unicode text, `%"..."`."""

    __slots__ = ()


class Date(int):
    """A structured field Date (RFC 9651 section 3.3.7): Unix seconds, `@1659578233`."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Member:
    """One list or dictionary member, or an item: a bare item (or a tuple of Members for an
    inner list) and its parameters."""

    value: Any
    params: dict[str, Any]


def _field(text: str) -> _Parser:
    """A parser over ``text`` with its leading spaces discarded (RFC 9651 section 4.2)."""
    if not isinstance(text, str) or not text.isascii():
        raise ParseError("not an ASCII string")
    parser = _Parser(text)
    parser.skip_sp()
    return parser


def _finish(parser: _Parser) -> None:
    parser.skip_sp()
    if not parser.done():
        raise ParseError(f"unexpected {parser.peek()!r} at {parser.pos}")


def _comma_separated(parser: _Parser, read: Callable[[], None]) -> None:
    """Call ``read`` for each member of a List or Dictionary (members separated by a comma and
    optional whitespace, no trailing comma), then check nothing is left."""
    while not parser.done():
        read()
        parser.skip_ows()
        if parser.done():
            break
        parser.expect(",")
        parser.skip_ows()
        if parser.done():
            raise ParseError("trailing comma")
    _finish(parser)


def parse_list(text: str) -> list[Member]:
    """Parse a structured field List (RFC 9651 section 4.2.1); raises ParseError if invalid.
    An empty field is an empty list."""
    parser = _field(text)
    members: list[Member] = []
    _comma_separated(parser, lambda: members.append(parser.member()))
    return members


def parse_dictionary(text: str) -> dict[str, Member]:
    """Parse a structured field Dictionary (RFC 9651 section 4.2.2); raises ParseError if
    invalid. A member without a value is `True` with its parameters; a repeated name keeps its
    first place and takes the last value. An empty field is an empty dict."""
    parser = _field(text)
    members: dict[str, Member] = {}

    def read() -> None:
        name = parser.key()
        if parser.peek() == "=":
            parser.pos += 1
            members[name] = parser.member()
        else:
            members[name] = Member(True, parser.parameters())

    _comma_separated(parser, read)
    return members


def parse_item(text: str) -> Member:
    """Parse a structured field Item (RFC 9651 section 4.2.3); raises ParseError if invalid."""
    parser = _field(text)
    value = parser.bare_item()
    item = Member(value, parser.parameters())
    _finish(parser)
    return item


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def done(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise ParseError(f"expected {char!r} at {self.pos}")
        self.pos += 1

    def skip_ows(self) -> None:
        while self.peek() in (" ", "\t") and not self.done():
            self.pos += 1

    def skip_sp(self) -> None:
        while self.peek() == " " and not self.done():
            self.pos += 1

    def member(self) -> Member:
        if self.peek() == "(":
            return self.inner_list()
        value = self.bare_item()
        return Member(value, self.parameters())

    def inner_list(self) -> Member:
        self.expect("(")
        items: list[Member] = []
        while not self.done():
            self.skip_sp()
            if self.peek() == ")":
                self.pos += 1
                return Member(tuple(items), self.parameters())
            value = self.bare_item()
            items.append(Member(value, self.parameters()))
            if self.peek() not in (" ", ")"):
                raise ParseError("bad inner list")
        raise ParseError("unterminated inner list")

    def parameters(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        while self.peek() == ";":
            self.pos += 1
            self.skip_sp()
            key = self.key()
            value: Any = True
            if self.peek() == "=":
                self.pos += 1
                value = self.bare_item()
            params[key] = value  # a repeated key overwrites, in its first place (4.2.3.2)
        return params

    def key(self) -> str:
        char = self.peek()
        if not (char in _LCALPHA or char == "*") or self.done():
            raise ParseError("bad key")
        start = self.pos
        while not self.done() and self.peek() in _KEY_CHARS:
            self.pos += 1
        return self.text[start : self.pos]

    def bare_item(self) -> Any:
        char = self.peek()
        if self.done():
            raise ParseError("an item is missing")
        if char == "-" or char in _DIGITS:
            return self.number()
        if char == '"':
            return self.string()
        if char == ":":
            return self.byte_sequence()
        if char == "?":
            return self.boolean()
        if char == "@":
            self.pos += 1
            value = self.number()
            if not isinstance(value, int):
                raise ParseError("a date is an integer")
            return Date(value)
        if char == "%":
            return self.display_string()
        if char == "*" or char in _ALPHA:
            return self.token()
        raise ParseError(f"unexpected {char!r} at {self.pos}")

    def number(self) -> int | float:
        sign = 1
        if self.peek() == "-":
            sign = -1
            self.pos += 1
        start = self.pos
        if self.peek() not in _DIGITS or self.done():
            raise ParseError("a number needs a digit")
        while not self.done() and self.peek() in _DIGITS:
            self.pos += 1
        integer = self.text[start : self.pos]
        if self.peek() != ".":
            if len(integer) > 15:
                raise ParseError("integer too long")
            return sign * int(integer)
        if len(integer) > 12:
            raise ParseError("decimal too long")
        self.pos += 1
        fraction_start = self.pos
        while not self.done() and self.peek() in _DIGITS:
            self.pos += 1
        fraction = self.text[fraction_start : self.pos]
        if not 1 <= len(fraction) <= 3:
            raise ParseError("a decimal has 1 to 3 fractional digits")
        return sign * float(f"{integer}.{fraction}")

    def string(self) -> str:
        self.expect('"')
        chars: list[str] = []
        while not self.done():
            char = self.text[self.pos]
            self.pos += 1
            if char == "\\":
                escaped = self.peek()
                if escaped not in ('"', "\\") or self.done():
                    raise ParseError("bad escape")
                chars.append(escaped)
                self.pos += 1
            elif char == '"':
                return "".join(chars)
            elif not " " <= char <= "~":
                raise ParseError("bad string character")
            else:
                chars.append(char)
        raise ParseError("unterminated string")

    def display_string(self) -> DisplayString:
        """RFC 9651 section 4.2.10: `%"` then printable ASCII, `%` + two lower-case hex digits
        for each byte of the UTF-8 encoding outside it, then `"`; invalid UTF-8 fails."""
        self.expect("%")
        self.expect('"')
        encoded = bytearray()
        while not self.done():
            char = self.text[self.pos]
            self.pos += 1
            if not " " <= char <= "~":
                raise ParseError("bad display string character")
            if char == "%":
                pair = self.text[self.pos : self.pos + 2]
                if len(pair) != 2 or any(c not in _LCHEX for c in pair):
                    raise ParseError("bad percent-encoding in a display string")
                encoded.append(int(pair, 16))
                self.pos += 2
            elif char == '"':
                try:
                    return DisplayString(encoded.decode("utf-8"))
                except UnicodeDecodeError:
                    raise ParseError("a display string is not UTF-8") from None
            else:
                encoded.append(ord(char))
        raise ParseError("unterminated display string")

    def token(self) -> Token:
        start = self.pos
        self.pos += 1
        while not self.done() and self.peek() in _TOKEN_CHARS:
            self.pos += 1
        return Token(self.text[start : self.pos])

    def byte_sequence(self) -> bytes:
        self.expect(":")
        end = self.text.find(":", self.pos)
        if end < 0:
            raise ParseError("unterminated byte sequence")
        encoded = self.text[self.pos : end]
        self.pos = end + 1
        if any(char not in _BASE64 for char in encoded):
            raise ParseError("bad base64")
        try:
            return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ParseError("bad base64") from None

    def boolean(self) -> bool:
        self.expect("?")
        char = self.peek()
        if char not in ("0", "1") or self.done():
            raise ParseError("bad boolean")
        self.pos += 1
        return char == "1"
