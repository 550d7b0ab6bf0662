"""Idempotency keys for tests: unique per call, so no two tests (nor two xdist workers sharing a
Redis or a sandbox) ever meet on one key unless a test reuses a key on purpose."""

from __future__ import annotations

import uuid


def idempotency_key(prefix: str = "") -> str:
    """A new ``Idempotency-Key`` value: ``prefix`` then 32 hex digits (``uuid4``).

    Within the API's limits (printable ASCII, at most 255 characters) for a ``prefix`` of at
    most 200 such characters; ``idempotency_key("acq_")`` gives an acquirer-side key.
    """
    return f"{prefix}{uuid.uuid4().hex}"
