"""The OpenAPI document (``/openapi.json``, drf-spectacular) as the API's contract (ADR 0043).

Two halves:

- **What a request may be**, read from the validating code itself, so the document cannot
  drift from it: drf-spectacular extensions map each strict field from its own attributes
  (:class:`~payments.api.serializers.StrictStringField`'s ``max_length``, ``pattern`` and
  ``choices``, :class:`~payments.api.serializers.StrictIntegerField`'s bounds, ...), every
  strict body gets ``additionalProperties: false``, the ``Idempotency-Key`` header the
  parser's own :data:`~idempotency.keys.IDEMPOTENCY_KEY_PATTERN`, and "printable" is the
  character class of every character ``str.isprintable`` refuses (:data:`PRINTABLE_TEXT`).
- **What an answer may be**, from the tables below (:func:`postprocess`, a drf-spectacular
  post-processing hook): every problem ``code`` an operation can answer with its status (one
  shared RFC 9457 ``Problem`` schema, an example per code, the codes under
  ``x-problem-codes``), the response headers, the links from each create to its reads and
  actions, and the rules no JSON Schema can state under ``x-refusals-beyond-schema`` (also in
  the operation's description).

``tests/unit/test_openapi_contract.py`` proves both halves: a generated corpus judged by the
document and by the API's validation, every code the table names raised somewhere; Schemathesis
(``tests/integration/test_openapi_schemathesis.py``, ``make campaign-openapi``) sends what the
document says and checks every answer against it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.plumbing import ResolvedComponent, build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from idempotency.keys import IDEMPOTENCY_KEY_PATTERN, MAX_KEY_LENGTH
from payments.api.problems import CONFLICT_TITLES

PROBLEM_MEDIA_TYPE = "application/problem+json"


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


#: Text ``str.isprintable`` accepts (the rule of every strict string field), as a class.
PRINTABLE_TEXT = f"[^{_not_printable_class()}]"


def anchored(pattern: str) -> str:
    """``pattern`` (Python syntax that is also ECMA-262's) matching a whole string, for an
    OpenAPI ``pattern`` (which searches): ``(?![\\s\\S])`` ends it, as ``$`` would also
    match before a final newline in Python."""
    return f"^(?:{pattern})(?![\\s\\S])"


class StrictStringFieldSchema(OpenApiSerializerFieldExtension):
    """:class:`~payments.api.serializers.StrictStringField`: ``enum`` of its ``choices``, or
    1..``max_length`` characters matching its ``pattern`` (or printable text); a subclass may
    name its own pattern and format (``openapi_pattern()``, ``openapi_format``)."""

    target_class = "payments.api.serializers.StrictStringField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        field = self.target
        if field.choices is not None:
            return {"type": "string", "enum": list(field.choices)}
        schema = {"type": "string", "minLength": 1, "maxLength": field.max_length}
        if hasattr(field, "openapi_pattern"):
            return {**schema, "format": field.openapi_format, "pattern": field.openapi_pattern()}
        if field.pattern is not None:
            return {**schema, "pattern": anchored(field.pattern.pattern)}
        # The printable class once, as a component (~12 kB), and each field's lengths beside it.
        component = ResolvedComponent(
            name="PrintableText",
            type=ResolvedComponent.SCHEMA,
            object="PrintableText",
            schema={
                "type": "string",
                "description": "Characters Python's str.isprintable accepts, each one: no "
                "control, format, line or paragraph separator, no space other than U+0020, no "
                "surrogate, private-use or unassigned code point.",
                "pattern": anchored(f"{PRINTABLE_TEXT}*"),
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


# --- Answers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Code:
    """A problem ``code`` with its HTTP status and title."""

    status: int
    title: str


#: Every problem code the API answers, with its status and title (payments.api.problems and the
#: modules raising them; tests/unit/test_openapi_contract.py checks each is raised somewhere).
CODES: dict[str, Code] = {
    "authentication_required": Code(401, "Authentication is required"),
    "authentication_failed": Code(401, "Authentication failed"),
    "rate_limited": Code(429, "Too many requests"),
    "concurrency_limited": Code(429, "Too many payments in flight"),
    "card_data_not_accepted": Code(400, "Card data is not accepted"),
    "service_unavailable": Code(503, "Service temporarily unavailable"),
    "invalid_content_length": Code(400, "The Content-Length header is invalid"),
    "body_incomplete": Code(400, "The body ended early"),
    "length_required": Code(411, "The body needs a Content-Length"),
    "validation_error": Code(400, "The request is invalid"),
    "not_found": Code(404, "Not found"),
    "invalid_json": Code(400, "The body is not valid JSON"),
    "duplicate_key": Code(400, "The body is not valid JSON"),
    "json_too_deep": Code(400, "The body is not valid JSON"),
    "unsupported_media_type": Code(400, "The body must be application/json"),
    "body_too_large": Code(400, "The body is too large"),
    "idempotency_key_missing": Code(400, "Idempotency-Key is missing"),
    "idempotency_key_invalid": Code(400, "Idempotency-Key is invalid"),
    "idempotency_key_in_use": Code(409, "A request is outstanding for this Idempotency-Key"),
    "idempotency_key_reused": Code(422, "Idempotency-Key is already used"),
    "acquirer_error": Code(502, "The acquirer refused the request"),
    "acquirer_unavailable": Code(503, "No acquirer can take the request now"),
    "invalid_payment_state": Code(409, CONFLICT_TITLES["invalid_payment_state"]),
    "amount_exceeds_capturable": Code(409, CONFLICT_TITLES["amount_exceeds_capturable"]),
    "amount_exceeds_refundable": Code(409, CONFLICT_TITLES["amount_exceeds_refundable"]),
    "webhook_endpoint_limit_reached": Code(400, "Too many webhook endpoints"),
}

#: The codes of every merchant request (authentication, limits, card data, framing, database).
_EVERY = (
    "authentication_required", "authentication_failed", "rate_limited",
    "card_data_not_accepted", "service_unavailable", "invalid_content_length",
    "body_incomplete", "length_required",
)  # fmt: skip
_LIST = ("validation_error",)
_ONE = ("not_found",)
_BODY = (
    "validation_error", "invalid_json", "duplicate_key", "json_too_deep",
    "unsupported_media_type", "body_too_large",
)  # fmt: skip
_KEY = ("idempotency_key_invalid", "idempotency_key_in_use", "idempotency_key_reused")
_ACQUIRER = ("concurrency_limited", "acquirer_error", "acquirer_unavailable")
#: A capture, void or refund: a payment's id, a body, a required key, the acquirer.
_OPERATION = (*_EVERY, *_ONE, *_BODY, "idempotency_key_missing", *_KEY, *_ACQUIRER)

#: Rules a request can break that no JSON Schema states: (code, where, the rule).
_CARD_DATA = (
    "card_data_not_accepted",
    "any body value or key, query parameter or the Idempotency-Key",
    "holds a card number (a Luhn-valid 13-19 digit run of a card network's issuer range, any "
    "separators, Unicode digits or escapes; docs/card-data.md): tokenise the card",
)
_JSON = (
    "duplicate_key / json_too_deep / invalid_json",
    "body",
    "the same member twice, nesting deeper than 8 levels, or an escaped lone surrogate",
)
_QUERY = (
    "validation_error",
    "query",
    "a parameter the operation does not define, or one given twice (field codes "
    "unknown_parameter, repeated)",
)
_CURSOR = (
    "validation_error",
    "starting_after",
    "names no object of this list (field code not_found): depends on what exists",
)


@dataclass(frozen=True)
class Operation:
    """What the document adds to one operation: its problem codes, its links (response status
    -> {link name: (operationId, {parameter: runtime expression})}), and its rules beyond the
    schema."""

    codes: tuple[str, ...]
    links: dict[int, dict[str, tuple[str, dict[str, str]]]]
    beyond_schema: tuple[tuple[str, str, str], ...] = (_CARD_DATA,)
    idempotent: bool = False


_PAYMENT = {"payment_id": "$response.body#/id"}
_PAYMENT_LINKS = {
    "capture": ("payments_capture", _PAYMENT),
    "void": ("payments_void", _PAYMENT),
    "refund": ("refunds_create", _PAYMENT),
    "refunds": ("refunds_list", _PAYMENT),
    "get": ("payments_retrieve", _PAYMENT),
}
_REFUND_LINKS = {
    "get": ("refunds_retrieve", {"refund_id": "$response.body#/id"}),
    "payment": ("payments_retrieve", {"payment_id": "$response.body#/payment"}),
}
_ENDPOINT = {"endpoint_id": "$response.body#/id"}
_ENDPOINT_LINKS = {
    "get": ("webhook_endpoints_retrieve", _ENDPOINT),
    "delete": ("webhook_endpoints_delete", _ENDPOINT),
    "rotate_secret": ("webhook_endpoints_rotate_secret", _ENDPOINT),
}
_FIRST = "$response.body#/data/0/id"

OPERATIONS: dict[str, Operation] = {
    "payments_create": Operation(
        (*_EVERY, *_BODY, "idempotency_key_missing", *_KEY, *_ACQUIRER),
        {201: _PAYMENT_LINKS, 202: _PAYMENT_LINKS},
        (
            _CARD_DATA,
            _JSON,
            (
                "validation_error",
                "currency",
                "no configured acquirer takes the currency with the capture method (field "
                "code currency_not_supported): depends on the service's ACQUIRERS",
            ),
        ),
        idempotent=True,
    ),
    "payments_list": Operation(
        (*_EVERY, *_LIST),
        {200: {"first": ("payments_retrieve", {"payment_id": _FIRST})}},
        (_CARD_DATA, _QUERY, _CURSOR),
    ),
    "payments_retrieve": Operation((*_EVERY, *_ONE), {200: {"refunds": _PAYMENT_LINKS["refunds"]}}),
    "payments_capture": Operation(
        (
            *_OPERATION,
            "invalid_payment_state",
            "amount_exceeds_capturable",
        ),
        {200: {"refund": _PAYMENT_LINKS["refund"], "get": _PAYMENT_LINKS["get"]}},
        (_CARD_DATA, _JSON),
        idempotent=True,
    ),
    "payments_void": Operation(
        (
            *_OPERATION,
            "invalid_payment_state",
        ),
        {200: {"get": _PAYMENT_LINKS["get"]}},
        (_CARD_DATA, _JSON),
        idempotent=True,
    ),
    "refunds_create": Operation(
        (
            *_OPERATION,
            "invalid_payment_state",
            "amount_exceeds_refundable",
        ),
        {201: _REFUND_LINKS, 202: _REFUND_LINKS},
        (_CARD_DATA, _JSON),
        idempotent=True,
    ),
    "refunds_list": Operation(
        (*_EVERY, *_ONE, *_LIST),
        {200: {"first": ("refunds_retrieve", {"refund_id": _FIRST})}},
        (_CARD_DATA, _QUERY, _CURSOR),
    ),
    "refunds_retrieve": Operation((*_EVERY, *_ONE), {200: {"payment": _REFUND_LINKS["payment"]}}),
    "webhook_endpoints_create": Operation(
        (*_EVERY, *_BODY, *_KEY, "webhook_endpoint_limit_reached"),
        {201: _ENDPOINT_LINKS},
        (
            _CARD_DATA,
            _JSON,
            (
                "validation_error",
                "url",
                "the host does not resolve, or resolves to a loopback, private, link-local or "
                "reserved address (field codes unresolvable, forbidden_address); http to "
                "anything but a loopback receiver (insecure_scheme): depends on DNS",
            ),
            (
                "webhook_endpoint_limit_reached",
                "body",
                "the merchant already has the most endpoints allowed: depends on what exists",
            ),
        ),
        idempotent=True,
    ),
    "webhook_endpoints_list": Operation(
        (*_EVERY, *_LIST),
        {200: {"first": ("webhook_endpoints_retrieve", {"endpoint_id": _FIRST})}},
        (_CARD_DATA, _QUERY, _CURSOR),
    ),
    "webhook_endpoints_retrieve": Operation(
        (*_EVERY, *_ONE), {200: {"rotate_secret": _ENDPOINT_LINKS["rotate_secret"]}}
    ),
    "webhook_endpoints_delete": Operation((*_EVERY, *_ONE), {}),
    "webhook_endpoints_rotate_secret": Operation(
        (*_EVERY, *_ONE, *_BODY, *_KEY),
        {200: {"get": _ENDPOINT_LINKS["get"]}},
        (_CARD_DATA, _JSON),
        idempotent=True,
    ),
    "events_list": Operation(
        (*_EVERY, *_LIST),
        {200: {"first": ("events_retrieve", {"event_id": _FIRST})}},
        (_CARD_DATA, _QUERY, _CURSOR),
    ),
    "events_retrieve": Operation((*_EVERY, *_ONE), {}),
}

#: Response headers (components/headers), and on which answers each is sent.
HEADERS: dict[str, dict[str, Any]] = {
    "Request-Id": {
        "description": "This request's id (the client's X-Request-Id when it is valid): quote "
        "it to support. On every answer.",
        "schema": {"type": "string"},
    },
    "RateLimit-Policy": {
        "description": "The merchant's request quota (draft-ietf-httpapi-ratelimit-headers-10):"
        ' "merchant";q=<requests>;w=<seconds>. Sent when a request rate limit applies.',
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": 'What is left of it: "merchant";r=<remaining>;t=<seconds to the '
        "window's end>. Sent when a request rate limit applies.",
        "schema": {"type": "string"},
    },
    "Retry-After": {
        "description": "Whole seconds to wait before retrying (RFC 9110 section 10.2.3).",
        "schema": {"type": "integer", "minimum": 0},
    },
    "Idempotent-Replayed": {
        "description": "true when this answer is the stored answer of an earlier request "
        "with the same Idempotency-Key (nothing was done again).",
        "schema": {"type": "string", "enum": ["true"]},
    },
    "Location": {
        "description": "The created object's path.",
        "schema": {"type": "string", "format": "uri-reference"},
    },
    "WWW-Authenticate": {
        "description": "The scheme to authenticate with (RFC 9110 section 11.6.1).",
        "schema": {"type": "string"},
    },
}


def _headers_for(status: int, operation: Operation) -> list[str]:
    names = ["Request-Id", "RateLimit-Policy", "RateLimit"]
    if status in (202, 409, 429, 503):
        names.append("Retry-After")
    if status == 401:
        names.append("WWW-Authenticate")
    if operation.idempotent and (status < 300 or status == 502):
        names.append("Idempotent-Replayed")
    if operation.idempotent and status in (201, 202, 502):
        names.append("Location")
    return names


def _problem_example(code: str) -> dict[str, Any]:
    """components/examples/<code>: a problem document of ``code``."""
    return {
        "summary": CODES[code].title,
        "value": {
            "type": f"/problems/{code}",
            "title": CODES[code].title,
            "status": CODES[code].status,
            "detail": CODES[code].title + ".",
            "code": code,
        },
    }


def _problem_response(codes: list[str]) -> dict[str, Any]:
    """The response of one status: the shared Problem schema, an example per code."""
    return {
        "description": "RFC 9457 problem; code: " + ", ".join(codes) + ".",
        "content": {
            PROBLEM_MEDIA_TYPE: {
                "schema": {"$ref": "#/components/schemas/Problem"},
                "examples": {code: {"$ref": f"#/components/examples/{code}"} for code in codes},
            }
        },
        "x-problem-codes": codes,
    }


def _describe_beyond_schema(rules: tuple[tuple[str, str, str], ...]) -> str:
    lines = [f"- `{code}` ({where}): {rule}" for code, where, rule in rules]
    return "\n\nRefused beyond this schema (`x-refusals-beyond-schema`):\n" + "\n".join(lines)


def _complete(operation_id: str, entry: dict[str, Any]) -> None:
    """Add one operation's problems, headers, links and rules beyond the schema."""
    operation = OPERATIONS[operation_id]
    responses = entry["responses"]
    for status in [s for s in responses if int(s) >= 400]:
        del responses[status]
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(operation.codes):
        by_status.setdefault(CODES[code].status, []).append(code)
    for status, codes in sorted(by_status.items()):
        responses[str(status)] = _problem_response(codes)
    for status, response in responses.items():
        response.setdefault("description", "")
        if not response["description"]:
            response["description"] = "OK"
        response["headers"] = {
            name: {"$ref": f"#/components/headers/{name}"}
            for name in _headers_for(int(status), operation)
        }
    for status, links in operation.links.items():
        responses[str(status)]["links"] = {
            name: {"operationId": target, "parameters": parameters}
            for name, (target, parameters) in links.items()
        }
    entry["x-refusals-beyond-schema"] = [
        {"code": code, "where": where, "rule": rule}
        for code, where, rule in operation.beyond_schema
    ]
    entry["description"] = entry.get("description", "") + _describe_beyond_schema(
        operation.beyond_schema
    )


def postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict:
    """drf-spectacular ``POSTPROCESSING_HOOKS`` entry: every operation of :data:`OPERATIONS`
    completed (an operation missing from it is a ``KeyError``: a new route must say what it
    answers), the shared headers, and the Problem schema's RFC 9457 details."""
    for path in result.get("paths", {}).values():
        for method, entry in path.items():
            if method in ("get", "post", "put", "patch", "delete"):
                _complete(entry["operationId"], entry)
    components = result.setdefault("components", {})
    components["headers"] = HEADERS
    components["examples"] = {code: _problem_example(code) for code in CODES}
    components.setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    return result


#: The one error document of the API (RFC 9457; payments.core.problem_format builds it).
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "An RFC 9457 problem document. More members may come (extension members, "
    "such as payment_id on a 502 acquirer_error).",
    "properties": {
        "type": {
            "type": "string",
            "format": "uri-reference",
            "description": "A relative URI reference: /problems/<code>.",
        },
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "code": {
            "type": "string",
            "description": "Stable machine-readable code (each response lists its own under "
            "x-problem-codes).",
        },
        "errors": {
            "type": "array",
            "description": "The fields at fault: field (dotted path, or the parameter or header "
            "name), code, message (never the value).",
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                },
                "required": ["field", "code", "message"],
            },
        },
    },
    "required": ["type", "title", "status", "detail", "code"],
}
