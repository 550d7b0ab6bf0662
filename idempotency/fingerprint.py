"""The request fingerprint stored with each idempotency key.

SHA-256 over the method, the route and a canonical JSON serialisation of the *validated* body:
object keys sorted, no insignificant whitespace, UTF-8 (RFC 8785 style; for bodies of strings
and integers, as here, the output is the RFC 8785 form). The same JSON sent with another key
order or other spacing therefore has the same fingerprint and replays instead of failing 422.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Serialise ``value`` with sorted keys and no whitespace, as UTF-8 bytes.

    Raises ``TypeError`` for values JSON cannot represent and ``ValueError`` for NaN/Infinity.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def request_fingerprint(method: str, route: str, body: Mapping[str, Any]) -> str:
    """Return the 64-character hex SHA-256 of ``METHOD\\nroute\\n`` + canonical JSON of ``body``."""
    digest = hashlib.sha256()
    digest.update(method.upper().encode("ascii") + b"\n" + route.encode("utf-8") + b"\n")
    digest.update(canonical_json(body))
    return digest.hexdigest()
