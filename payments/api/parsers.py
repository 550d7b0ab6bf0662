"""A strict JSON parser for request bodies (DRF parser class).

Rejects, each as a 400 problem with its own ``code``: bodies over the size limit
(``body_too_large``), invalid UTF-8 or JSON, ``NaN``/``Infinity``, an escaped lone surrogate
(``invalid_json``), duplicate
object keys (``duplicate_key``: which one would win is parser-dependent, a classic smuggling
vector) and nesting deeper than :data:`MAX_DEPTH` (``json_too_deep``). Error messages never
quote the body.

:func:`request_json` reads a view's JSON body, refusing any other ``Content-Type`` with DRF's
``UnsupportedMediaType`` (answered by ``payments.api.problems``) for an empty body too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

from payments.api.problems import Problem

#: Deepest nesting accepted. POST /payments bodies are flat objects.
MAX_DEPTH = 8
_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject_constant(name: str) -> Any:
    raise ValueError("non-finite number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise Problem(
                "The JSON object has the same key twice.",
                code="duplicate_key",
                title="The body is not valid JSON",
            )
        result[key] = value
    return result


def json_depth(value: Any) -> int:
    """Return the nesting depth of a parsed JSON value (a scalar is 0), without recursion."""
    depth, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
            depth = max(depth, level + 1)
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
            depth = max(depth, level + 1)
    return depth


def _holds_lone_surrogate(value: Any) -> bool:
    """Whether any string of a parsed JSON value, member names included, holds a code point
    of U+D800-U+DFFF (``json.loads`` pairs a valid escaped pair into one character, so any
    left is lone). Iterative, like :func:`json_depth`."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class StrictJSONParser(BaseParser):
    """Parse ``application/json`` bodies strictly; raises :class:`Problem` (400) on bad input."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise Problem(
                f"The body is larger than {limit} bytes.",
                code="body_too_large",
                title="The body is too large",
            )
        try:
            text = raw.decode("utf-8")
            data = json.loads(
                text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates
            )
        except RecursionError as exc:  # nested past the interpreter's limit: deeper still
            raise Problem(
                f"The JSON document is nested more than {MAX_DEPTH} levels deep.",
                code="json_too_deep",
                title="The body is not valid JSON",
            ) from exc
        except (UnicodeDecodeError, ValueError) as exc:
            raise Problem(
                "The body must be a JSON document encoded as UTF-8.",
                code="invalid_json",
                title="The body is not valid JSON",
            ) from exc
        # A lone surrogate can only come from a \\u escape (UTF-8 cannot encode one): I-JSON
        # (RFC 7493 section 2.1) refuses it, and no later step could encode it for an answer,
        # a log line or PostgreSQL.
        if b"\\u" in raw and _holds_lone_surrogate(data):
            raise Problem(
                "The JSON document holds an escaped lone surrogate (\\uD800-\\uDFFF).",
                code="invalid_json",
                title="The body is not valid JSON",
            )
        if json_depth(data) > MAX_DEPTH:
            raise Problem(
                f"The JSON document is nested more than {MAX_DEPTH} levels deep.",
                code="json_too_deep",
                title="The body is not valid JSON",
            )
        return data


def request_json(request: Request) -> Any:
    """The parsed JSON body of ``request`` (``request.data``, through :class:`StrictJSONParser`).

    Raises ``UnsupportedMediaType`` unless the ``Content-Type`` is ``application/json``: DRF
    raises it itself for a body no parser accepts, but parses nothing (and raises nothing) when
    the body is empty, so the check is made here for every body. The problem handler answers
    it 400 ``unsupported_media_type``.
    """
    media_type = request.content_type.split(";")[0].strip().lower()
    if media_type != StrictJSONParser.media_type:
        raise UnsupportedMediaType(request.content_type)
    return request.data
