"""Errors of the Idempotency-Key contract, as DRF exceptions rendered as RFC 9457 problems.

Each carries a stable ``code`` and a ``title`` (the draft's titles where it has one,
draft-ietf-httpapi-idempotency-key-header-07 section 2.7). None of these answers is stored:
after one of them the key is still free (or still held by the request that owns it).
"""

from __future__ import annotations

from rest_framework import status
from rest_framework.exceptions import APIException

__all__ = [
    "IdempotencyError",
    "IdempotencyKeyInUse",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyMissing",
    "IdempotencyKeyReused",
]


class IdempotencyError(APIException):
    """Base class: ``status_code``, ``default_code`` (the problem ``code``) and ``title``."""

    title = "Idempotency-Key error"


class IdempotencyKeyMissing(IdempotencyError):
    """400: the endpoint requires an ``Idempotency-Key`` header and none was sent."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "idempotency_key_missing"
    title = "Idempotency-Key is missing"
    default_detail = (
        "This endpoint requires an Idempotency-Key header (1-255 printable ASCII characters)."
    )


class IdempotencyKeyInvalid(IdempotencyError):
    """400: the header is present but is not 1-255 characters of %x21-7E (bare or sf-string)."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "idempotency_key_invalid"
    title = "Idempotency-Key is invalid"
    default_detail = (
        "The Idempotency-Key must be 1-255 printable ASCII characters without spaces, "
        "bare or as a quoted string (RFC 8941)."
    )


class IdempotencyKeyReused(IdempotencyError):
    """422: the key was used before with a different request (body, method or route).

    Deliberately not 409: generic clients retry 409 automatically, and this error is permanent.
    """

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"
    title = "Idempotency-Key is already used"
    default_detail = (
        "This Idempotency-Key was already used with a different request. "
        "Use a new key for a new request."
    )


class IdempotencyKeyInUse(IdempotencyError):
    """409: a request with this key is still being processed; retry after ``Retry-After`` s."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "idempotency_key_in_use"
    title = "A request is outstanding for this Idempotency-Key"
    default_detail = "A request with this Idempotency-Key is being processed. Retry shortly."
    retry_after_seconds = 1
