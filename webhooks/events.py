"""The catalog of event types a merchant may subscribe to (``enabled_events``).

One event per state change of a payment or a refund into one of these states, and of a
dispute (created, updated, closed) (the pending
states ``processing``, ``capture_pending`` and ``void_pending`` have none: the answer of the
call that caused them says so). ``*`` subscribes to every type, present and future.
"""

from __future__ import annotations

__all__ = ["ALL_EVENTS", "EVENT_TYPES", "subscribed_sql", "validate_event_types"]

#: Every event type, with what it means (docs/webhooks.md lists the same).
EVENT_TYPES: dict[str, str] = {
    "payment.succeeded": "authorized and captured (automatic), or captured (manual)",
    "payment.requires_capture": "authorized and held (manual), or a capture or void failed",
    "payment.declined": "the acquirer declined the authorization",
    "payment.failed": "certainly not authorized (unreachable acquirer, refused request)",
    "payment.canceled": "the authorization was voided",
    "payment.needs_review": "reconciliation gave up; an operator resolves it",
    "payment.requires_action": "the acquirer holds it for the shopper (next_action: 3-D Secure)",
    "refund.succeeded": "the acquirer refunded",
    "refund.failed": "the refund was not applied",
    "refund.needs_review": "reconciliation gave up on the refund; an operator resolves it",
    "dispute.created": "the acquirer reported a dispute (a chargeback or an inquiry) of a payment",
    "dispute.updated": "an open dispute changed (its status, amount or deadline)",
    "dispute.closed": "the dispute was won or lost (final)",
}

#: ``enabled_events: ["*"]``: every type.
ALL_EVENTS = "*"


def subscribed_sql(event_type: str = "%s::text") -> str:
    """Whether a row of the endpoints' table wants an event, as an SQL condition: its
    ``enabled_events`` holds the type or :data:`ALL_EVENTS`. ``event_type`` is the SQL of the
    type (default: one text parameter; or a column)."""
    return (
        f"(enabled_events @> '[\"{ALL_EVENTS}\"]'::jsonb "
        f"OR enabled_events @> jsonb_build_array({event_type}))"
    )


def validate_event_types(values: list[str]) -> list[str]:
    """The unknown names among ``values`` (each must be a key of :data:`EVENT_TYPES`, or
    :data:`ALL_EVENTS` alone), in their order; empty when all are known."""
    if values == [ALL_EVENTS]:
        return []
    return [value for value in values if value not in EVENT_TYPES]
