"""``insert_row_parts`` (a row given as a dict) builds the same INSERT parts as ``insert_parts``
of the model instance made of that dict, for each model the hot path inserts that way."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from idempotency.services import insert_parts, insert_row_parts
from payments.models import PaymentEvent, PaymentEventType, PaymentStatus

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def plain(parts: tuple[str, str, list[object]]) -> tuple[str, str, list[str]]:
    """The parts with each parameter as its repr (psycopg's Jsonb wrapper has no equality)."""
    columns, values, params = parts
    return columns, values, [repr(getattr(p, "obj", p)) + type(p).__name__ for p in params]


@pytest.mark.parametrize(
    "row",
    [
        {"payment_id": "pay_1", "type": PaymentEventType.PAYMENT_CREATED,
         "from_status": PaymentStatus.PROCESSING, "to_status": PaymentStatus.PROCESSING,
         "data": {}, "created_at": NOW, "request_id": "req_1"},
        {"payment_id": "pay_2", "type": PaymentEventType.ACQUIRER_ATTEMPT,
         "from_status": "processing", "to_status": "succeeded",
         "data": {"outcome": "approved", "attempt_log": [{"attempt": 1}]}, "created_at": NOW,
         "request_id": None},
    ],
)  # fmt: skip
def test_the_same_parts_as_the_instance(row: dict) -> None:
    assert plain(insert_row_parts(PaymentEvent, row)) == plain(insert_parts(PaymentEvent(**row)))
    columns, _, _ = insert_row_parts(PaymentEvent, row)
    assert '"id"' not in columns.split(", ")  # the automatic id is the sequence's


def test_a_missing_field_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="request_id"):
        insert_row_parts(PaymentEvent, {"payment_id": "pay_1", "type": "payment_created",
                                        "from_status": "processing", "to_status": "processing",
                                        "data": {}, "created_at": NOW})  # fmt: skip
