"""The endpoint's work for one notification: verify, store first, enqueue (ADR 0046).

1. The connector of the named acquirer (none: 404, nothing read further).
2. The body, read in full by the view and at most ``MAX_NOTIFICATION_BYTES``; verified on
   those exact bytes, then parsed. A refusal changes nothing: it is counted
   (``payments_acquirer_notifications_rejected_total``) and logged with its reason only.
3. Each item stored as an :class:`~payments.models.AcquirerNotification` (the raw body, any
   card number in it redacted before it is parsed or stored), unique by
   ``(acquirer, event_id)``: a redelivery, a replay or a duplicate inserts nothing and is
   answered as accepted (the provider stops retrying).
4. The apply task enqueued when the row is committed; if that message is lost, the beat's
   sweep finds the row (``next_attempt_at``).

The provider gets what it expects once the rows are committed (``connector.acknowledgement``),
so an accepted notification is never lost: if we die before the commit, the provider retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from card_data import redact_card_numbers
from gateway_client import (
    MAX_NOTIFICATION_BYTES,
    NotificationConnector,
    NotificationRejected,
    ProviderNotification,
)
from payments.models import AcquirerNotification
from payments.monitoring.metrics import record_notification, record_notification_rejected
from payments.notifications.connectors import notification_connector

__all__ = ["Intake", "NotificationEndpointUnknown", "notification_receive"]

logger = logging.getLogger(__name__)


class NotificationEndpointUnknown(LookupError):
    """No acquirer of that name is configured, or it takes no notifications."""


@dataclass(frozen=True, slots=True)
class Intake:
    """What the endpoint answers: ``status``, ``body``, ``content_type`` (the provider's
    expectation), and the ids of the notifications stored now (``stored``) and already
    stored before (``duplicates``: event ids)."""

    status: int
    body: bytes
    content_type: str
    stored: tuple[int, ...] = ()
    duplicates: tuple[str, ...] = ()


def notification_receive(
    acquirer: str,
    raw: bytes,
    headers: dict[str, str],
    *,
    now: datetime | None = None,
    clock: Callable[[], float] | None = None,
    enqueue: Callable[[int], None] | None = None,
) -> Intake:
    """Verify, store and enqueue one notification request of ``acquirer`` (see the module
    docstring). ``headers``: lower-case names. ``enqueue(notification id)`` runs after the
    commit (None: nothing enqueued; the beat's sweep finds the rows). Raises
    :class:`NotificationEndpointUnknown`, and ``NotificationRejected`` (already counted) for a
    request that is not the provider's."""
    connector = (
        notification_connector(acquirer)
        if clock is None
        else notification_connector(acquirer, clock=clock)
    )
    if connector is None:
        raise NotificationEndpointUnknown(acquirer)
    try:
        body, items = _verified(connector, raw, headers)
    except NotificationRejected as exc:
        record_notification_rejected(acquirer, exc.reason)
        logger.warning("notification refused for acquirer %s: %s", acquirer, exc.reason)
        raise
    now = now or timezone.now()
    stored: list[int] = []
    duplicates: list[str] = []
    with transaction.atomic():
        for item in items:
            try:
                with transaction.atomic():
                    row = AcquirerNotification.objects.create(
                        acquirer=acquirer,
                        event_id=item.event_id,
                        event_type=item.event_type[:100],
                        subject=item.subject,
                        body=body,
                        received_at=now,
                        next_attempt_at=now,
                    )
            except IntegrityError:
                duplicates.append(item.event_id)
                record_notification(acquirer, "duplicate")
                continue
            stored.append(row.pk)
            record_notification(acquirer, "stored")
        if enqueue is not None:
            for pk in stored:
                transaction.on_commit(lambda pk=pk: enqueue(pk), robust=True)
    status, answer, content_type = connector.acknowledgement()
    return Intake(status, answer, content_type, tuple(stored), tuple(duplicates))


def _verified(
    connector: NotificationConnector, raw: bytes, headers: dict[str, str]
) -> tuple[str, list[ProviderNotification]]:
    """The body to store and its items, once ``raw`` passed verification. Raises
    ``NotificationRejected``."""
    if len(raw) > MAX_NOTIFICATION_BYTES:
        raise NotificationRejected("too_large", "the notification body is too large")
    connector.verify(raw, headers)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotificationRejected("malformed", "the body is not UTF-8") from None
    if "\x00" in text:
        raise NotificationRejected("malformed", "the body holds a NUL character")
    # The card-data rule (docs/card-data.md): what is stored, and every value parsed from it
    # (now and by the apply task), is the body with any card number redacted.
    body = redact_card_numbers(text)
    return body, connector.parse(body.encode("utf-8"))
