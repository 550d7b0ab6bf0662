"""Reads of the webhooks app. Every read is scoped to one merchant."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from merchants.models import Merchant
from webhooks.models import Event, WebhookEndpoint

__all__ = [
    "EndpointNotFound",
    "EndpointPage",
    "EventNotFound",
    "EventPage",
    "endpoint_get",
    "endpoint_list",
    "event_get",
    "event_list",
]


class EventNotFound(Exception):
    """No event with this id belongs to the merchant."""


class EndpointNotFound(Exception):
    """No live endpoint with this id belongs to the merchant (another merchant's included)."""


def endpoint_get(*, merchant: Merchant, endpoint_id: str) -> WebhookEndpoint:
    """The merchant's live endpoint ``endpoint_id``. Raises :class:`EndpointNotFound`."""
    endpoint = WebhookEndpoint.objects.filter(
        merchant=merchant, pk=endpoint_id, deleted_at__isnull=True
    ).first()
    if endpoint is None:
        raise EndpointNotFound(endpoint_id)
    return endpoint


@dataclass(frozen=True)
class EndpointPage:
    """One page of a merchant's live endpoints, newest first; ``has_more``: older ones exist."""

    endpoints: list[WebhookEndpoint]
    has_more: bool


def endpoint_list(
    *, merchant: Merchant, limit: int = 20, starting_after: str | None = None
) -> EndpointPage:
    """Up to ``limit`` (1-100) of the merchant's live endpoints, newest first (``created_at``,
    then ``id``); ``starting_after``: the id of the last endpoint of the previous page (a keyset
    cursor, as ``GET /events``). Raises :class:`EndpointNotFound` when that id is not one of
    the merchant's live endpoints."""
    queryset = WebhookEndpoint.objects.filter(merchant=merchant, deleted_at__isnull=True)
    if starting_after:
        cursor = endpoint_get(merchant=merchant, endpoint_id=starting_after)
        queryset = queryset.filter(
            Q(created_at__lt=cursor.created_at) | Q(created_at=cursor.created_at, id__lt=cursor.id)
        )
    rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
    return EndpointPage(endpoints=rows[:limit], has_more=len(rows) > limit)


def event_get(*, merchant: Merchant, event_id: str) -> Event:
    """The merchant's event ``event_id``. Raises :class:`EventNotFound`."""
    event = Event.objects.filter(merchant=merchant, pk=event_id).first()
    if event is None:
        raise EventNotFound(event_id)
    return event


@dataclass(frozen=True)
class EventPage:
    """One page of events, newest first; ``has_more``: older ones exist."""

    events: list[Event]
    has_more: bool


def event_list(
    *,
    merchant: Merchant,
    limit: int = 20,
    type: str | None = None,
    starting_after: str | None = None,
) -> EventPage:
    """Up to ``limit`` (1-100) events, newest first (``created_at``, then ``id``), of one
    ``type`` when given; ``starting_after``: the id of the last event of the previous page (a
    keyset cursor). Raises :class:`EventNotFound` when that id is not the merchant's."""
    queryset = Event.objects.filter(merchant=merchant)
    if type:
        queryset = queryset.filter(type=type)
    if starting_after:
        cursor = event_get(merchant=merchant, event_id=starting_after)
        queryset = queryset.filter(
            Q(created_at__lt=cursor.created_at) | Q(created_at=cursor.created_at, id__lt=cursor.id)
        )
    rows = list(queryset.order_by("-created_at", "-id")[: limit + 1])
    return EventPage(events=rows[:limit], has_more=len(rows) > limit)
