"""The OpenAPI document (``/openapi.json``, drf-spectacular) as the API's contract (ADR 0043).

Two halves:

- **What a request may be**, read from the validating code itself, so the document cannot
  drift from it: drf-spectacular extensions map each strict field from its own attributes
  (:class:`~payments.api.serializers.StrictStringField`'s ``max_length``, ``pattern`` and
  ``choices``, :class:`~payments.api.serializers.StrictIntegerField`'s bounds, ...), every
  strict body gets ``additionalProperties: false``, the ``Idempotency-Key`` header the
  parser's own :data:`~idempotency.keys.IDEMPOTENCY_KEY_PATTERN`, and "printable" is the
  character class of every character ``str.isprintable`` refuses (:func:`printable_text`).
- **What an answer may be**, from the tables of ``payments.api.openapi_answers`` (its
  ``postprocess``, a drf-spectacular post-processing hook): each operation's problem codes,
  response headers, links, and the rules no JSON Schema can state.

``tests/unit/test_openapi_contract.py`` proves both halves: a generated corpus judged by the
document and by the API's validation, every code the table names raised somewhere; Schemathesis
(``tests/integration/test_openapi_schemathesis.py``, ``make campaign-openapi``) sends what the
document says and checks every answer against it.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.plumbing import ResolvedComponent, build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from idempotency.keys import IDEMPOTENCY_KEY_PATTERN, MAX_KEY_LENGTH


def _not_printable_class() -> str:
    """A regular-expression class (Python and ECMA-262 with the ``u`` flag) of every code point
    ``str.isprintable`` refuses on this interpreter: BMP ones as ``\\uXXXX`` escapes, the
    others as themselves (no escape is valid in both languages)."""
    ranges: list[tuple[int, int]] = []
    start: int | None = None
    for code in range(sys.maxunicode + 2):
        refused = code <= sys.maxunicode and not chr(code).isprintable()
        if refused and start is None:
            start = code
        elif not refused and start is not None:
            ranges.append((start, code - 1))
            start = None

    def one(code: int) -> str:
        return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)

    return "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in ranges)


#: The ``format`` of printable text (``PrintableText``): a name, defined by its pattern.
PRINTABLE_FORMAT = "printable"


@cache
def printable_text() -> str:
    """Text ``str.isprintable`` accepts (the rule of every strict string field), as a class;
    built when the document is (a scan of every code point, not at every process's start)."""
    return f"[^{_not_printable_class()}]"


def anchored(pattern: str) -> str:
    """``pattern`` (Python syntax that is also ECMA-262's) matching a whole string, for an
    OpenAPI ``pattern`` (which searches): ``(?![\\s\\S])`` ends it, as ``$`` would also
    match before a final newline in Python."""
    return f"^(?:{pattern})(?![\\s\\S])"


class StrictStringFieldSchema(OpenApiSerializerFieldExtension):
    """:class:`~payments.api.serializers.StrictStringField`: ``enum`` of its ``choices``, or
    1..``max_length`` characters matching its ``pattern`` (or printable text); a subclass may
    name its own pattern (``openapi_pattern()``)."""

    target_class = "payments.api.serializers.StrictStringField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        field = self.target
        if field.choices is not None:
            return {"type": "string", "enum": list(field.choices)}
        schema = {"type": "string", "minLength": 1, "maxLength": field.max_length}
        if hasattr(field, "openapi_pattern"):
            return {**schema, "pattern": field.openapi_pattern()}
        if field.pattern is not None:
            return {**schema, "pattern": anchored(field.pattern.pattern)}
        # The printable class once, as a component (~12 kB), and each field's lengths beside it.
        component = ResolvedComponent(
            name="PrintableText",
            type=ResolvedComponent.SCHEMA,
            object="PrintableText",
            schema={
                "type": "string",
                # A name for generators (Schemathesis draws it by Unicode category: the class
                # below is too large for a regular-expression strategy); the pattern decides.
                "format": PRINTABLE_FORMAT,
                "description": "Characters Python's str.isprintable accepts, each one: no "
                "control, format, line or paragraph separator, no space other than U+0020, no "
                "surrogate, private-use or unassigned code point.",
                "pattern": anchored(f"{printable_text()}*"),
            },
        )
        auto_schema.registry.register_on_missing(component)
        return {"allOf": [component.ref], **schema}


class _BoundedIntegerSchema(OpenApiSerializerFieldExtension):
    """A field with ``min_value`` and ``max_value``: an ``integer`` within them."""

    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {
            "type": "integer",
            "format": "int64",
            "minimum": self.target.min_value,
            "maximum": self.target.max_value,
        }


class StrictIntegerFieldSchema(_BoundedIntegerSchema):
    target_class = "payments.api.serializers.StrictIntegerField"


class QueryIntegerFieldSchema(_BoundedIntegerSchema):
    target_class = "payments.api.serializers.QueryIntegerField"


class StrictBooleanFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "payments.api.serializers.StrictBooleanField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        return {"type": "boolean"}


class EnabledEventsFieldSchema(OpenApiSerializerFieldExtension):
    """:class:`~payments.api.webhook_serializers.EnabledEventsField`: event types (1 to its
    ``max_length``), or ``["*"]`` alone."""

    target_class = "payments.api.webhook_serializers.EnabledEventsField"

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        field = self.target
        return {
            "oneOf": [
                {
                    "type": "array",
                    "items": {"type": "string", "enum": list(field.event_types)},
                    "minItems": field.min_length,
                    "maxItems": field.max_length,
                },
                {
                    "type": "array",
                    "items": {"type": "string", "enum": [field.all_events]},
                    "minItems": 1,
                    "maxItems": 1,
                },
            ]
        }


class StrictBodySchema(OpenApiSerializerExtension):
    """Every :class:`~payments.api.serializers.StrictBodySerializer`: an object with its
    fields only (``additionalProperties: false``: an unknown member is a 400)."""

    target_class = "payments.api.serializers.StrictBodySerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return {**schema, "additionalProperties": False}


def idempotency_key_parameter(*, required: bool) -> OpenApiParameter:
    """The ``Idempotency-Key`` request header, with the parser's own pattern and bounds."""
    schema = build_basic_type(OpenApiTypes.STR)
    schema.update(
        {"minLength": 1, "maxLength": 2 * MAX_KEY_LENGTH + 2, "pattern": IDEMPOTENCY_KEY_PATTERN}
    )
    what = (
        "One key per logical request (draft-ietf-httpapi-idempotency-key-header): a retry "
        "with the same key and body replays the first answer (Idempotent-Replayed: true); "
        "the same key with another body is 422 idempotency_key_reused. 1-255 visible ASCII "
        "characters (%x21-7E), bare, or an RFC 8941 quoted string (for a key with a comma or "
        "a quote). The field twice, or a bare key with a comma, is a 400."
    )
    return OpenApiParameter(
        "Idempotency-Key",
        schema,
        OpenApiParameter.HEADER,
        required=required,
        description=what if required else f"Optional. {what}",
    )
