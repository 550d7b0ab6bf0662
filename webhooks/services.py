"""Writes of the webhooks app: the merchant's endpoints, and the operators' audited actions.

* :func:`endpoint_create` and :func:`endpoint_rotate_secret`, idempotent under an optional
  merchant ``Idempotency-Key`` through the ``idempotency`` layer: the key is claimed, the row
  written and the answer stored in **one** transaction (no network call happens), so a replay
  returns the first answer byte for byte (its secret included: a merchant who lost the answer
  gets it again; the idempotency admin redacts it), another body under the key is a 422, and a
  concurrent duplicate waits for the first to commit and replays it.
* :func:`endpoint_delete`: the endpoint stops receiving (its pending deliveries are canceled);
  the row stays for the operators' history.
* :func:`endpoint_enable` and :func:`event_redeliver`: operator actions, each recorded as an
  :class:`~webhooks.models.OperatorAction` with the operator and a required note.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from card_data import contains_card_number
from idempotency.fingerprint import request_fingerprint
from idempotency.models import IdempotencyKey
from idempotency.services import ClaimOutcome, idempotency_key_claim, idempotency_key_complete
from merchants.models import Merchant
from webhooks.delivery import endpoint_breaker
from webhooks.models import (
    Delivery,
    DeliveryStatus,
    EndpointStatus,
    Event,
    OperatorAction,
    WebhookEndpoint,
)
from webhooks.selectors import EndpointNotFound
from webhooks.serializers import endpoint_document
from webhooks.signing import new_secret
from webhooks.tasks import deliver_event_task

__all__ = [
    "ENDPOINTS_ROUTE",
    "ActionRefused",
    "Answer",
    "EndpointLimitReached",
    "EndpointNotFound",
    "Replay",
    "endpoint_create",
    "endpoint_delete",
    "endpoint_enable",
    "endpoint_rotate_secret",
    "event_redeliver",
]

ENDPOINTS_ROUTE = "/webhook_endpoints"


class ActionRefused(Exception):
    """An operator's action does not apply (no note, or nothing to do)."""


@dataclass(frozen=True)
class Answer:
    """An answer as stored for replay: status code, headers, body bytes."""

    status_code: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Replay:
    """The key already holds an answer: ``record`` is the completed key to replay."""

    record: IdempotencyKey


def _json(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def _idempotent(
    merchant: Merchant,
    idempotency_key: str | None,
    route: str,
    body: dict[str, Any],
    now: datetime,
    write: Callable[[], Answer],
) -> Answer | Replay:
    """Run ``write`` (which returns the answer) under the merchant's ``idempotency_key`` for
    ``POST route`` with ``body``, in one transaction with the claim and the stored answer.
    Raises ``IdempotencyKeyReused`` (422) and ``IdempotencyKeyInUse`` (409)."""
    with transaction.atomic():
        if idempotency_key is None:
            return write()
        claim = idempotency_key_claim(
            merchant_id=merchant.pk,
            key=idempotency_key,
            method="POST",
            route=route,
            fingerprint=request_fingerprint("POST", route, body),
            now=now,
            retention=timedelta(seconds=settings.IDEMPOTENCY_KEY_RETENTION_SECONDS),
            lock_timeout=timedelta(seconds=settings.IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS),
        )
        if claim.outcome is ClaimOutcome.COMPLETED:
            return Replay(claim.record)
        answer = write()
        idempotency_key_complete(
            record=claim.record,
            status_code=answer.status_code,
            headers=answer.headers,
            body=answer.body,
            now=now,
        )
        return answer


class EndpointLimitReached(Exception):
    """The merchant has ``limit`` live endpoints already (``WEBHOOK_MAX_ENDPOINTS``): delete
    one first. Nothing was created and the idempotency key was released."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"at most {limit} webhook endpoints")


def endpoint_create(
    *,
    merchant: Merchant,
    url: str,
    enabled_events: list[str],
    description: str | None = None,
    idempotency_key: str | None = None,
    clock: Callable[[], datetime] = timezone.now,
) -> Answer | Replay:
    """Create an endpoint (checked input: the URL already passed ``webhooks.url_safety``, the
    event types ``webhooks.events``) with a new secret. Returns the ``201`` answer with the
    endpoint and its ``secret`` (the only answer that shows it), or the :class:`Replay`.
    Raises :class:`EndpointLimitReached` when the merchant has ``WEBHOOK_MAX_ENDPOINTS`` live
    endpoints (16 by default, as Stripe allows), so one event never fans out to more."""
    now = clock()
    body = {"url": url, "enabled_events": enabled_events}
    if description is not None:
        body["description"] = description

    def write() -> Answer:
        # Under the merchant's row lock, so two creations cannot both pass the count.
        Merchant.objects.select_for_update().filter(pk=merchant.pk).first()
        live = WebhookEndpoint.objects.filter(merchant=merchant, deleted_at__isnull=True)
        if live.count() >= settings.WEBHOOK_MAX_ENDPOINTS:
            raise EndpointLimitReached(settings.WEBHOOK_MAX_ENDPOINTS)
        secret = new_secret()
        endpoint = WebhookEndpoint.objects.create(
            merchant=merchant,
            url=url,
            enabled_events=list(enabled_events),
            description=description,
            secret=secret,
            created_at=now,
            updated_at=now,
        )
        return Answer(
            201,
            {"Content-Type": "application/json", "Location": f"{ENDPOINTS_ROUTE}/{endpoint.id}"},
            _json(endpoint_document(endpoint, secret=secret)),
        )

    return _idempotent(merchant, idempotency_key, ENDPOINTS_ROUTE, body, now, write)


def _live(merchant: Merchant, endpoint_id: str) -> WebhookEndpoint:
    endpoint = (
        WebhookEndpoint.objects.select_for_update(no_key=True)
        .filter(merchant=merchant, pk=endpoint_id, deleted_at__isnull=True)
        .first()
    )
    if endpoint is None:
        raise EndpointNotFound(endpoint_id)
    return endpoint


def endpoint_rotate_secret(
    *,
    merchant: Merchant,
    endpoint_id: str,
    idempotency_key: str | None = None,
    clock: Callable[[], datetime] = timezone.now,
) -> Answer | Replay:
    """Give the endpoint a new secret; the current one keeps signing alongside for
    ``WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS`` (24 h; a secret older than that is dropped).
    Returns the ``200`` answer with the new ``secret`` (shown once), or the :class:`Replay`.
    Raises :class:`EndpointNotFound`."""
    now = clock()
    route = f"{ENDPOINTS_ROUTE}/{endpoint_id}/rotate_secret"
    if not WebhookEndpoint.objects.filter(
        merchant=merchant, pk=endpoint_id, deleted_at__isnull=True
    ).exists():
        raise EndpointNotFound(endpoint_id)

    def write() -> Answer:
        endpoint = _live(merchant, endpoint_id)
        secret = new_secret()
        endpoint.previous_secret = endpoint.secret
        endpoint.previous_secret_expires_at = now + timedelta(
            seconds=settings.WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS
        )
        endpoint.secret = secret
        endpoint.updated_at = now
        endpoint.save()
        return Answer(
            200,
            {"Content-Type": "application/json"},
            _json(endpoint_document(endpoint, secret=secret)),
        )

    return _idempotent(merchant, idempotency_key, route, {}, now, write)


def endpoint_delete(
    *, merchant: Merchant, endpoint_id: str, clock: Callable[[], datetime] = timezone.now
) -> dict[str, Any]:
    """Delete the endpoint: nothing more is sent to it (its pending deliveries are canceled).
    Returns ``{"id", "object", "deleted": true}``. Raises :class:`EndpointNotFound`."""
    now = clock()
    with transaction.atomic():
        endpoint = _live(merchant, endpoint_id)
        endpoint.deleted_at = now
        endpoint.updated_at = now
        endpoint.save(update_fields=["deleted_at", "updated_at"])
        Delivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.PENDING).update(
            status=DeliveryStatus.CANCELED, next_attempt_at=None, lease_until=None
        )
    return {"id": endpoint.id, "object": "webhook_endpoint", "deleted": True}


def _note(operator: str, note: str) -> str:
    note = (note or "").strip()
    if not operator or not note:
        raise ActionRefused("The operator and a note are required.")
    if contains_card_number(note):
        raise ActionRefused("A note must not hold a card number.")
    return note[:1000]


def endpoint_enable(
    *,
    endpoint_id: str,
    operator: str,
    note: str,
    clock: Callable[[], datetime] = timezone.now,
) -> int:
    """Enable a disabled endpoint again (audited): its breaker is reset, and its pending
    deliveries still inside their retry window are due at once (the others are ``failed``).
    Returns how many are due. Raises :class:`ActionRefused` (no note, not disabled)."""
    note = _note(operator, note)
    now = clock()
    window = timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS)
    with transaction.atomic():
        endpoint = (
            WebhookEndpoint.objects.select_for_update(no_key=True)
            .filter(pk=endpoint_id, deleted_at__isnull=True)
            .first()
        )
        if endpoint is None or endpoint.status != EndpointStatus.DISABLED:
            raise ActionRefused("Only a disabled endpoint can be enabled.")
        endpoint.status = EndpointStatus.ENABLED
        endpoint.disabled_reason = None
        endpoint.disabled_at = None
        endpoint.failing_since = None
        endpoint.updated_at = now
        endpoint.save()
        pending = Delivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.PENDING)
        pending.filter(window_started_at__lte=now - window).update(
            status=DeliveryStatus.FAILED, next_attempt_at=None, lease_until=None
        )
        due = pending.filter(window_started_at__gt=now - window).update(
            next_attempt_at=now, lease_until=None, lease_token=None
        )
        OperatorAction.objects.create(
            operator=operator, action="enable_endpoint", endpoint=endpoint, note=note,
            created_at=now,
        )  # fmt: skip
        event_ids = list(
            Delivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.PENDING)
            .values_list("event_id", flat=True)
            .distinct()[:100]
        )
        transaction.on_commit(
            lambda: [deliver_event_task.delay(event_id) for event_id in event_ids], robust=True
        )
    endpoint_breaker(endpoint_id).reset(actor=operator, reason="endpoint enabled again")
    return due


def event_redeliver(
    *,
    event_id: str,
    operator: str,
    note: str,
    clock: Callable[[], datetime] = timezone.now,
) -> int:
    """Send the event again to each endpoint it was for (audited), whatever happened before:
    each delivery is ``pending``, due now, with a new retry window. A disabled endpoint's
    delivery waits for it to be enabled. Returns how many deliveries are due."""
    note = _note(operator, note)
    now = clock()
    with transaction.atomic():
        event = Event.objects.select_for_update().filter(pk=event_id).first()
        if event is None:
            raise ActionRefused("No such event.")
        due = (
            Delivery.objects.filter(event=event, endpoint__deleted_at__isnull=True)
            .exclude(status=DeliveryStatus.CANCELED)
            .update(
                status=DeliveryStatus.PENDING,
                next_attempt_at=now,
                window_started_at=now,
                lease_until=None,
                lease_token=None,
            )
        )
        if not due:
            raise ActionRefused("The event has no delivery to a live endpoint.")
        OperatorAction.objects.create(
            operator=operator, action="redeliver_event", event=event, note=note, created_at=now
        )
        transaction.on_commit(lambda: deliver_event_task.delay(event_id), robust=True)
    return due
