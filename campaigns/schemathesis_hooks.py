"""Schemathesis hooks of the fuzz campaign
(``SCHEMATHESIS_HOOKS=campaigns.schemathesis_hooks`` in the environment): every error
answer must be an RFC 9457 problem, served as ``application/problem+json``."""

from __future__ import annotations

import json

import schemathesis


@schemathesis.check
def error_is_problem_json(ctx, response, case):
    """A 4xx or 5xx answer is application/problem+json with type, title, status and code."""
    if response.status_code < 400:
        return None
    values = response.headers.get("content-type") or [""]
    content_type = values[0].split(";")[0].strip().lower()
    if content_type != "application/problem+json":
        raise AssertionError(
            f"{response.status_code} answered with Content-Type {content_type!r}, "
            "not application/problem+json"
        )
    try:
        problem = json.loads(response.content)
    except ValueError as exc:
        raise AssertionError(f"{response.status_code} problem body is not JSON") from exc
    missing = [name for name in ("type", "title", "status", "code") if name not in problem]
    if missing:
        raise AssertionError(f"{response.status_code} problem lacks {', '.join(missing)}")
    if problem["status"] != response.status_code:
        raise AssertionError(
            f"problem status {problem['status']} differs from the HTTP status "
            f"{response.status_code}"
        )
    return None


#: With CAMPAIGN_SCHEMA=contract, the schema Schemathesis generates from is tightened to the
#: contract of docs/api.md (the served one is looser: see the campaign's findings), so that "valid"
#: requests are valid and reach the payment flow with fuzzed references and descriptions. The
#: service is unchanged; only what is generated differs.
CONTRACT_CURRENCIES = ["EUR", "USD", "GBP", "CHF", "SEK", "JPY", "KWD", "BHD"]


@schemathesis.hook
def before_load_schema(context, raw_schema):
    import os

    if os.environ.get("CAMPAIGN_SCHEMA") != "contract":
        return
    post = raw_schema["paths"]["/payments"]["post"]
    for parameter in post.get("parameters", []):
        if parameter.get("name") == "Idempotency-Key":
            # Bare keys: visible ASCII without the comma (a list) and the quote (a string).
            parameter["schema"] = {"type": "string", "pattern": "^[!#-+\\--~]{1,255}$"}
    body = raw_schema["components"]["schemas"].get("PaymentCreateInputRequest")
    if body:
        props = body["properties"]
        props["currency"] = {"type": "string", "enum": CONTRACT_CURRENCIES}
        props["payment_method"] = {"type": "string", "pattern": "^tok_[A-Za-z0-9_]{1,64}$"}
        props["reference"] = {"type": "string", "minLength": 1, "maxLength": 128}
        props["description"] = {"type": "string", "minLength": 1, "maxLength": 255}
        body["additionalProperties"] = False
