"""An operation's outcome as the acquirer notified it (Adyen's CAPTURE, CAPTURE_FAILED,
CANCELLATION, REFUND, REFUND_FAILED), recorded once.

A capture, void or refund the acquirer answered ``received`` stays ``pending`` with the
acquirer's id of the modification (``PaymentOperation.acquirer_reference``); the notification
that names that id settles it through the same state machine as an answer or a look-up
(:func:`~payments.core.operation_states.operation_settle`): a capture that failed moves the
payment back to ``requires_capture`` (a ``capture_failed`` event and the merchant's
``payment.requires_capture`` webhook event), a refund that failed frees its amount.

The endpoint verifies and stores each item (``gateway_client.AdyenNotifications``); the apply
task (``payments.notifications.apply``, ADR 0047) finds the operation by our reference, checks
the provider's id of the modification, and calls :func:`operation_notified`; a repeated
notification (Adyen delivers at least once) finds the operation settled and changes nothing.
"""

from __future__ import annotations

import enum
import logging
from datetime import datetime

from django.db import transaction

from payments.core.operation_states import (
    operation_answer_store,
    operation_lock_with_key,
    operation_settle,
)
from payments.models import OperationStatus, PaymentOperation

__all__ = ["Notified", "operation_notified"]

logger = logging.getLogger(__name__)


class Notified(enum.Enum):
    """What a notification did to our books."""

    SETTLED = "settled"  #: the operation's outcome is now recorded.
    ALREADY_SETTLED = "already_settled"  #: recorded before (a repeated notification).
    UNKNOWN = "unknown"  #: no operation of ours carries that id at that acquirer.
    MISMATCH = "mismatch"  #: the operation is of another kind: recorded nowhere, logged.


def operation_notified(
    *,
    acquirer: str,
    kind: str,
    acquirer_reference: str,
    applied: bool,
    failure_code: str | None,
    amount: int | None,
    now: datetime,
) -> tuple[Notified, PaymentOperation | None]:
    """Record the outcome the acquirer ``acquirer`` notified for the modification
    ``acquirer_reference`` (its id of our capture, void or refund, as its ``received``
    answer gave it): ``applied`` True settles the operation succeeded (for ``amount`` minor
    units when given), False failed with ``failure_code``. ``kind``: the operation the
    notification is about (``capture``, ``void``, ``refund``), checked against ours.

    In one transaction under the payment's, the operation's and its key's locks; the answer a
    replay of the merchant's request returns is refreshed. A pending or ``needs_review``
    operation is settled; a settled one is left alone (``ALREADY_SETTLED``). Returns what was
    done and the operation (None when unknown).
    """
    operation_id = (
        PaymentOperation.objects.filter(
            payment__acquirer=acquirer, acquirer_reference=acquirer_reference
        )
        .values_list("id", flat=True)
        .first()
    )
    if operation_id is None:
        return Notified.UNKNOWN, None
    with transaction.atomic():
        payment, operation, key = operation_lock_with_key(operation_id)
        if operation.kind != kind:
            logger.error(
                "operation %s is a %s; a %s notification names it", operation.id,
                operation.kind, kind,
            )  # fmt: skip
            return Notified.MISMATCH, operation
        if operation.status not in (OperationStatus.PENDING, OperationStatus.NEEDS_REVIEW):
            return Notified.ALREADY_SETTLED, operation
        operation_settle(
            payment=payment,
            operation=operation,
            succeeded=applied,
            now=now,
            data={"how": "notification"},
            failure_code=None if applied else (failure_code or "acquirer_failed"),
            amount=amount if applied else None,
        )
        operation_answer_store(payment, operation, key=key, now=now)
    logger.info("operation %s settled by notification: %s", operation.id, operation.status)
    return Notified.SETTLED, operation
