"""Parsing the ``Idempotency-Key`` request header.

Format (draft-ietf-httpapi-idempotency-key-header-07 section 2.1, an RFC 8941 sf-string, and
the bare form that Stripe-style clients send): the key is 1 to 255 characters of %x21-7E.
It may arrive bare (``abc``) or as a quoted sf-string (``"abc"``, with ``\\"`` and ``\\\\``
escapes); both forms name the same key. Surrounding SP/HTAB is not part of the value. Keys are
case-sensitive. A bare key may not contain ``,``: HTTP joins repeated fields with commas
(RFC 9110 section 5.3), so two ``Idempotency-Key`` fields arrive as ``a,b`` and name no one
key; a key with a comma must be quoted (``"a,b"``), and two quoted ones (``"a","b"``) are a
malformed string. Under WSGI a non-ASCII header arrives latin-1 decoded: it is rejected, so no
mojibake is ever stored.
"""

from __future__ import annotations

from idempotency.errors import IdempotencyKeyInvalid, IdempotencyKeyMissing

MAX_KEY_LENGTH = 255

#: What :func:`parse_idempotency_key` accepts, as one regular expression valid in Python and in
#: ECMA-262 (an OpenAPI ``pattern``): optional SP/HTAB around either a bare key (%x21-7E
#: without ``,``, not starting with ``"``) or an sf-string whose content is %x21-7E with ``"``
#: and ``\`` escaped; 1 to :data:`MAX_KEY_LENGTH` characters of key either way. ``(?![\s\S])``
#: ends the string (``$`` would also match before a final newline in Python).
#: tests/unit/test_openapi_contract.py proves it equal to the parser on a generated corpus.
IDEMPOTENCY_KEY_PATTERN = (
    r"^[ \t]*(?:"
    rf"[!#-+\--~][!-+\--~]{{0,{MAX_KEY_LENGTH - 1}}}"
    rf'|"(?:[!#-\[\]-~]|\\["\\]){{1,{MAX_KEY_LENGTH}}}"'
    r")[ \t]*(?![\s\S])"
)


def _is_visible_ascii(text: str) -> bool:
    return all("\x21" <= ch <= "\x7e" for ch in text)


def _unquote_sf_string(value: str) -> str | None:
    """Return the content of an RFC 8941 sf-string (section 3.3.3), or None when malformed."""
    if len(value) < 2 or not value.endswith('"'):
        return None
    out: list[str] = []
    chars = iter(value[1:-1])
    for ch in chars:
        if ch == "\\":
            escaped = next(chars, None)
            if escaped not in ('"', "\\"):
                return None
            out.append(escaped)
        elif ch == '"' or not ("\x20" <= ch <= "\x7e"):
            return None
        else:
            out.append(ch)
    return "".join(out)


def parse_idempotency_key(header_value: str | None) -> str:
    """Return the key named by an ``Idempotency-Key`` header value.

    ``None`` (header absent) raises :class:`IdempotencyKeyMissing`; an empty value, a value
    with characters outside %x21-7E, a bare value with a comma (repeated fields), a malformed
    quoted string, or more than 255 characters raises :class:`IdempotencyKeyInvalid`. Both
    are 400 answers that store nothing.
    """
    if header_value is None:
        raise IdempotencyKeyMissing()
    value = header_value.strip(" \t")
    if value.startswith('"'):
        key = _unquote_sf_string(value)
        if key is None:
            raise IdempotencyKeyInvalid(
                "The quoted Idempotency-Key is not a valid RFC 8941 string."
            )
    elif "," in value:
        raise IdempotencyKeyInvalid(
            "Send one Idempotency-Key: repeated fields, or a list, name no single key "
            "(quote a key that contains a comma)."
        )
    else:
        key = value
    if not key:
        raise IdempotencyKeyInvalid("The Idempotency-Key is empty.")
    if len(key) > MAX_KEY_LENGTH:
        raise IdempotencyKeyInvalid(
            f"The Idempotency-Key is longer than {MAX_KEY_LENGTH} characters."
        )
    if not _is_visible_ascii(key):
        raise IdempotencyKeyInvalid(
            "The Idempotency-Key may only contain printable ASCII characters without spaces."
        )
    return key
