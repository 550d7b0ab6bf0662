"""The answers half of the OpenAPI document (ADR 0043; the inputs half is
``payments.api.openapi``): every problem ``code`` an operation can answer with its status (one
shared RFC 9457 ``Problem`` schema, an example per code under ``components/examples``, the codes
of each response under ``x-problem-codes``), the response headers, the links from each create to
its reads and actions, and the rules no JSON Schema can state (``x-refusals-beyond-schema``, also
in the operation's description). :func:`postprocess` is drf-spectacular's post-processing hook
(``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from payments.api.problems import CONFLICT_TITLES

PROBLEM_MEDIA_TYPE = "application/problem+json"


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
    "authentication_rate_limited": Code(429, "Too many failed authentications"),
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
    "authentication_rate_limited", "card_data_not_accepted", "service_unavailable",
    "invalid_content_length", "body_incomplete", "length_required",
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


@dataclass(frozen=True)
class Beyond:
    """A rule a request can break that no JSON Schema states: the problem ``code`` it is
    answered with, the field error codes under ``errors`` (none: the problem says it all),
    where it applies, and the rule."""

    code: str
    field_codes: tuple[str, ...]
    where: str
    rule: str


_CARD_DATA = Beyond(
    "card_data_not_accepted",
    ("card_data_not_accepted",),
    "any body value or key, query parameter or the Idempotency-Key",
    "holds a card number (a Luhn-valid 13-19 digit run of a card network's issuer range, any "
    "separators, Unicode digits or escapes; docs/card-data.md): tokenise the card",
)
_JSON = Beyond(
    "invalid_json",
    (),
    "body",
    "an escaped lone surrogate (also duplicate_key: the same member twice; json_too_deep: "
    "nesting deeper than 8 levels)",
)
_QUERY = Beyond(
    "validation_error",
    ("unknown_parameter", "repeated"),
    "query",
    "a parameter the operation does not define, or one given twice",
)
_CURSOR = Beyond(
    "validation_error",
    ("not_found",),
    "starting_after",
    "names no object of this list: depends on what exists",
)


@dataclass(frozen=True)
class Operation:
    """What the document adds to one operation: its problem codes, its links (response status
    -> {link name: (operationId, {parameter: runtime expression}[, request body])}), and its
    rules beyond the schema."""

    codes: tuple[str, ...]
    links: dict[int, dict[str, tuple[Any, ...]]]
    beyond_schema: tuple[Beyond, ...] = (_CARD_DATA,)
    idempotent: bool = False


_PAYMENT = {"payment_id": "$response.body#/id"}
_PAYMENT_LINKS = {
    # Capture what was authorized: the link's body names the amount (a generated one would
    # mostly exceed it).
    "capture": ("payments_capture", _PAYMENT, {"amount": "$response.body#/amount"}),
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
            Beyond(
                "validation_error",
                ("currency_not_supported",),
                "currency",
                "no configured acquirer that can charge the payment method takes the currency "
                "with the capture method: depends on the service's ACQUIRERS",
            ),
            Beyond(
                "validation_error",
                ("payment_method_not_supported",),
                "payment_method",
                "no configured acquirer charges the payment method's family (tok_: the sandbox, "
                "pm_: Stripe, spm_: Adyen; docs/connectors.md): depends on the service's "
                "ACQUIRERS",
            ),
            Beyond(
                "validation_error",
                ("unresolvable", "forbidden_address", "insecure_scheme", "customer_actions_off"),
                "return_url",
                "the host does not resolve, or resolves to a loopback, private, link-local or "
                "reserved address; http to anything but a loopback page: depends on DNS (the "
                "webhook URL rules); customer actions off: the service has no PUBLIC_BASE_URL",
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
            Beyond(
                "validation_error",
                ("unresolvable", "forbidden_address", "insecure_scheme"),
                "url",
                "the host does not resolve, or resolves to a loopback, private, link-local or "
                "reserved address; http to anything but a loopback receiver: depends on DNS",
            ),
            Beyond(
                "webhook_endpoint_limit_reached",
                (),
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


def _describe_beyond_schema(rules: tuple[Beyond, ...]) -> str:
    lines = [
        f"- `{rule.code}`"
        + (f" ({', '.join(rule.field_codes)})" if rule.field_codes else "")
        + f", {rule.where}: {rule.rule}"
        for rule in rules
    ]
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
            name: {"operationId": link[0], "parameters": link[1]}
            | ({"requestBody": link[2]} if len(link) > 2 else {})
            for name, link in links.items()
        }
    entry["x-refusals-beyond-schema"] = [
        {"code": rule.code, "field_codes": list(rule.field_codes), "where": rule.where,
         "rule": rule.rule}
        for rule in operation.beyond_schema
    ]  # fmt: skip
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
