"""Turning a completed idempotency key back into an HTTP response (the replay)."""

from __future__ import annotations

from django.http import HttpResponse

from idempotency.models import IdempotencyKey

#: Header that marks a replayed answer (Stripe's name).
REPLAYED_HEADER = "Idempotent-Replayed"


def replay_response(record: IdempotencyKey) -> HttpResponse:
    """Return the stored answer of a completed key: same status, byte-identical body, the kept
    headers (Content-Type, Location, Retry-After) and ``Idempotent-Replayed: true``.

    Raises ``ValueError`` when ``record`` holds no response.
    """
    if record.response_status is None or record.response_body is None:
        raise ValueError("This idempotency key has no stored response.")
    response = HttpResponse(
        bytes(record.response_body),
        status=record.response_status,
        content_type=record.response_headers.get("Content-Type", "application/json"),
    )
    for name, value in record.response_headers.items():
        if name != "Content-Type":
            response[name] = value
    response[REPLAYED_HEADER] = "true"
    return response
