"""The project's Schemathesis checks, for the fuzz campaign
(``SCHEMATHESIS_HOOKS=campaigns.schemathesis_hooks`` in the environment) and the suite's run
(tests/support/schemathesis_run.py): every error answer an RFC 9457 problem served as
``application/problem+json``, with a ``code`` its operation documents for that status; every
valid request accepted, or refused by its state or a rule the document lists beyond the schema
(ADR 0043). Also the generator of the document's ``format: printable``."""

from __future__ import annotations

import json

import schemathesis
from hypothesis import strategies as st

#: The document's ``format: printable`` (payments/api/openapi.py): drawn by Unicode category,
#: as Python's ``str.isprintable`` reads them (the pattern beside it filters, and decides).
schemathesis.openapi.format(
    "printable",
    st.text(
        st.characters(
            exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"),
            include_characters=" ",
        )
    ),
)


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


def _documented_response(case, status: int) -> dict:
    responses = case.operation.definition.raw.get("responses", {})
    return responses.get(str(status)) or responses.get(f"{str(status)[0]}XX") or {}


def _problem(response) -> dict:
    try:
        document = json.loads(response.content)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


@schemathesis.check
def problem_code_is_documented(ctx, response, case):
    """A problem's ``code`` is one the operation documents for that status (``x-problem-codes``
    of the response, payments/api/openapi_answers.py): no undocumented refusal."""
    if response.status_code < 400 or case.method.upper() != case.operation.method.upper():
        return None
    codes = _documented_response(case, response.status_code).get("x-problem-codes")
    code = _problem(response).get("code")
    if codes is not None and code not in codes:
        raise AssertionError(
            f"{case.operation.label}: {response.status_code} {code!r} is not among the "
            f"documented codes {codes}"
        )
    return None


#: The answers to a request the schema says is valid that depend on state, not on the request:
#: no such object (404), the object's state (409), the key used before for another body (422).
STATE_DEPENDENT = (404, 409, 422)


@schemathesis.check
def valid_requests_are_accepted(ctx, response, case):
    """A request generated as valid (positive mode) is accepted (2xx), answered with a
    state-dependent 4xx (:data:`STATE_DEPENDENT`), or refused with a 400 for a rule the
    operation lists in ``x-refusals-beyond-schema`` (with its field codes)."""
    meta = getattr(case, "meta", None)
    generation = getattr(meta, "generation", None)
    if generation is None or not generation.mode.is_positive:
        return None
    if case.method.upper() != case.operation.method.upper():
        return None
    status = response.status_code
    if status < 400 or status in STATE_DEPENDENT or status >= 500:
        return None
    problem = _problem(response)
    beyond = case.operation.definition.raw.get("x-refusals-beyond-schema", [])
    field_codes = {code for rule in beyond for code in rule["field_codes"]}
    allowed = {rule["code"] for rule in beyond}
    errors = problem.get("errors") or []
    if (
        status == 400
        and problem.get("code") in allowed
        and (
            problem.get("code") != "validation_error"
            or (errors and all(error.get("code") in field_codes for error in errors))
        )
    ):
        return None
    raise AssertionError(
        f"{case.operation.label}: a valid request was answered {status} "
        f"{problem.get('code')!r} {errors}"
    )
