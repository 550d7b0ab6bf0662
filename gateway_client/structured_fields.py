"""
A parser for RFC 8941 / RFC 9651 structured field Lists, enough for the IETF RateLimit headers.

    RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400;pk=:cHsxMjM0NTY3ODk=:
    RateLimit: "default";r=0;t=30

`parse_list(text)` returns a list of `Member(value, params)`; an inner list is a `Member` whose
`value` is a tuple of `Member`s. Bare items read as: Integer -> int, Decimal -> float,
String -> str, Token -> `Token` (a str subclass), Byte Sequence -> bytes, Boolean -> bool,
Date (RFC 9651 `@...`) -> int. Any deviation from the grammar raises `ParseError`, and the
caller ignores the whole field, as RFC 8941 section 4.2 requires ("fail parsing").
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

__all__ = ["Member", "ParseError", "Token", "parse_list"]

_DIGITS = frozenset("0123456789")
_LCALPHA = frozenset("abcdefghijklmnopqrstuvwxyz")
_KEY_CHARS = _LCALPHA | _DIGITS | frozenset("_-.*")
_TCHAR = frozenset("!#$%&'*+-.^_`|~") | _DIGITS | _LCALPHA | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TOKEN_CHARS = _TCHAR | frozenset(":/")
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")


class ParseError(ValueError):
    """The field is not a valid structured field List; ignore the whole field."""


class Token(str):
    """A structured field Token (an unquoted identifier such as `default`)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Member:
    """One list member: a bare item (or a tuple of Members for an inner list) and its parameters."""

    value: Any
    params: dict[str, Any]


def parse_list(text: str) -> list[Member]:
    """Parse a structured field List (RFC 8941 section 4.2.1); raises ParseError if invalid."""
    if not isinstance(text, str) or not text.isascii():
        raise ParseError("not an ASCII string")
    parser = _Parser(text.strip(" "))
    members: list[Member] = []
    while not parser.done():
        members.append(parser.member())
        parser.skip_ows()
        if parser.done():
            return members
        parser.expect(",")
        parser.skip_ows()
        if parser.done():
            raise ParseError("trailing comma")
    return members


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
            params[key] = value  # a repeated key overwrites (RFC 8941 4.2.3.2)
        return params

    def key(self) -> str:
        char = self.peek()
        if not (char in _LCALPHA or char == "*"):
            raise ParseError("bad key")
        start = self.pos
        while not self.done() and self.peek() in _KEY_CHARS:
            self.pos += 1
        return self.text[start : self.pos]

    def bare_item(self) -> Any:
        char = self.peek()
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
            return value
        if char == "*" or char.isalpha():
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
        if char not in ("0", "1"):
            raise ParseError("bad boolean")
        self.pos += 1
        return char == "1"
