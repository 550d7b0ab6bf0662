"""The shapes of the webhooks API: the endpoint object, the event object, their lists.

:func:`endpoint_document` and :func:`event_document` build every answer (and every delivery's
body) once; the DRF serializers below describe the same shapes for the OpenAPI document.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers

from webhooks.events import EVENT_TYPES
from webhooks.models import EndpointStatus, Event, WebhookEndpoint

__all__ = [
    "EndpointDeletedSerializer",
    "EndpointListSerializer",
    "EndpointSerializer",
    "EndpointWithSecretSerializer",
    "EventListSerializer",
    "EventSerializer",
    "endpoint_document",
    "event_body",
    "event_document",
    "rfc3339",
]


def rfc3339(value: datetime) -> str:
    """``value`` as RFC 3339 in UTC with a ``Z`` (the API's timestamps)."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def endpoint_document(endpoint: WebhookEndpoint, *, secret: str | None = None) -> dict[str, Any]:
    """The ``webhook_endpoint`` object; ``secret`` only in the answers that create it
    (creation, rotation)."""
    document: dict[str, Any] = {
        "id": endpoint.id,
        "object": "webhook_endpoint",
        "url": endpoint.url,
        "enabled_events": list(endpoint.enabled_events),
        "status": endpoint.status,
        "disabled_reason": endpoint.disabled_reason,
        "description": endpoint.description,
        "created_at": rfc3339(endpoint.created_at),
    }
    if secret is not None:
        document["secret"] = secret
    return document


def event_document(event: Event) -> dict[str, Any]:
    """The ``event`` object: ``id``, ``object``, ``type``, ``created_at`` and ``data`` (``{"object":
    <the payment or refund as the API showed it when the event was written>}``)."""
    return {
        "id": event.id,
        "object": "event",
        "type": event.type,
        "created_at": rfc3339(event.created_at),
        "data": json.loads(event.data),
    }


def event_body(event: Event) -> bytes:
    """The body of every delivery of ``event``: :func:`event_document` as compact UTF-8 JSON
    (the same bytes on every attempt)."""
    return json.dumps(event_document(event), ensure_ascii=False, separators=(",", ":")).encode()


class EndpointSerializer(serializers.Serializer):
    """The endpoint object (rendered by :func:`endpoint_document`; the fields describe it for
    the OpenAPI document)."""

    id = serializers.CharField()
    object = serializers.CharField(default="webhook_endpoint")
    url = serializers.CharField()
    enabled_events = serializers.ListField(child=serializers.CharField())
    status = serializers.ChoiceField(choices=EndpointStatus.choices)
    disabled_reason = serializers.CharField(allow_null=True)
    description = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()

    def to_representation(self, instance: WebhookEndpoint) -> dict[str, Any]:
        return endpoint_document(instance)


class EndpointWithSecretSerializer(EndpointSerializer):
    """The endpoint object with its new ``secret`` (``whsec_...``), shown in this answer only."""

    secret = serializers.CharField()


class EndpointDeletedSerializer(serializers.Serializer):
    """The answer to ``DELETE /webhook_endpoints/{id}`` (``webhooks.services.endpoint_delete``)."""

    id = serializers.CharField()
    object = serializers.CharField(default="webhook_endpoint")
    deleted = serializers.BooleanField()


class EndpointListSerializer(serializers.Serializer):
    object = serializers.CharField(default="list")
    data = EndpointSerializer(many=True)
    has_more = serializers.BooleanField()


class EventSerializer(serializers.Serializer):
    """The event object (rendered by :func:`event_document`; the fields describe it for the
    OpenAPI document)."""

    id = serializers.CharField()
    object = serializers.CharField(default="event")
    type = serializers.ChoiceField(choices=sorted(EVENT_TYPES))
    created_at = serializers.DateTimeField()
    data = serializers.DictField(help_text='{"object": <the payment or refund>}')

    def to_representation(self, instance: Event) -> dict[str, Any]:
        return event_document(instance)


class EventListSerializer(serializers.Serializer):
    object = serializers.CharField(default="list")
    data = EventSerializer(many=True)
    has_more = serializers.BooleanField()
