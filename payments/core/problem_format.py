"""The bytes of an RFC 9457 problem document (``application/problem+json``): the stored 502
answers and the API's error answers (:mod:`payments.api.problems`) are made with
:func:`problem_body`.
"""

from __future__ import annotations

import json
from typing import Any

PROBLEM_CONTENT_TYPE = "application/problem+json"


def problem_body(
    *, status_code: int, code: str, title: str, detail: str, errors: list | None = None
) -> bytes:
    """Serialise a problem document to UTF-8 JSON bytes (keys in a fixed order)."""
    document: dict[str, Any] = {
        "type": f"/problems/{code.replace('_', '-')}",
        "title": title,
        "status": status_code,
        "detail": detail,
        "code": code,
    }
    if errors:
        document["errors"] = errors
    return json.dumps(document, ensure_ascii=False).encode("utf-8")
