"""Input shapes of the webhooks API (``payments.api.webhook_views``): strict like every body of the
API, card data refused first (``payments.api.card_data`` through :class:`StrictBodySerializer`),
the URL checked by ``webhooks.url_safety`` and the event types by ``webhooks.events``. No
message repeats the value it refuses."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from payments.api.serializers import ListQuerySerializer, StrictBodySerializer, StrictStringField
from webhooks.events import ALL_EVENTS, EVENT_TYPES, validate_event_types
from webhooks.url_safety import MAX_URL_LENGTH, UnsafeUrl, check_url, url_pattern

__all__ = [
    "EnabledEventsField",
    "EndpointListQuerySerializer",
    "EventListQuerySerializer",
    "RotateSecretInputSerializer",
    "WebhookEndpointInputSerializer",
    "WebhookUrlField",
]


class WebhookUrlField(StrictStringField):
    """An endpoint's ``url``: checked by ``webhooks.url_safety.check_url`` (the serializer's
    ``validate_url``); its OpenAPI ``pattern`` is ``url_safety.url_pattern`` under this
    process's ``WEBHOOK_ALLOW_LOCAL_URLS``."""

    def openapi_pattern(self) -> str:
        return url_pattern(allow_local=settings.WEBHOOK_ALLOW_LOCAL_URLS)


class EnabledEventsField(serializers.ListField):
    """``enabled_events``: 1 to ``len(EVENT_TYPES) + 1`` event types (repeats are dropped), or
    ``["*"]`` alone (every type). Its OpenAPI schema (``oneOf`` the two lists, with their
    ``enum``) is read from the same constants (``payments.api.openapi``)."""

    event_types = tuple(sorted(EVENT_TYPES))
    all_events = ALL_EVENTS

    def __init__(self, **kwargs) -> None:
        super().__init__(
            child=StrictStringField(max_length=64),
            min_length=1,
            max_length=len(EVENT_TYPES) + 1,
            **kwargs,
        )

    def to_internal_value(self, data):
        # The list as sent is bounded, not what is left once repeats are dropped.
        if isinstance(data, list) and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        value = super().to_internal_value(data)
        if validate_event_types(value):
            raise serializers.ValidationError(
                'Unknown event type: one of the documented types, or ["*"] alone.',
                code="unknown_event_type",
            )
        if ALL_EVENTS in value and len(value) > 1:
            raise serializers.ValidationError('"*" stands alone.', code="invalid")
        return list(dict.fromkeys(value))


class WebhookEndpointInputSerializer(StrictBodySerializer):
    """Body of ``POST /webhook_endpoints``: ``url`` (https; in development also
    ``http://127.0.0.1``), ``enabled_events`` (event types, or ``["*"]``), optional
    ``description`` (free text, 1-255 printable characters, never card data)."""

    url = WebhookUrlField(
        max_length=MAX_URL_LENGTH,
        help_text="Absolute https URL on port 443 or 8443, no user name, password or fragment; "
        "its host must resolve to public addresses only (checked again before every delivery).",
    )
    enabled_events = EnabledEventsField()
    description = StrictStringField(max_length=255, required=False)

    def validate_url(self, value: str) -> str:
        try:
            return check_url(value, allow_local=settings.WEBHOOK_ALLOW_LOCAL_URLS)
        except UnsafeUrl as exc:
            raise serializers.ValidationError(exc.message, code=exc.code) from exc


class RotateSecretInputSerializer(StrictBodySerializer):
    """Body of ``POST /webhook_endpoints/{id}/rotate_secret``: empty or ``{}``. The overlap is
    the service's (``WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS``); a member asking for another
    one is refused like any unknown member, never silently ignored."""


class EndpointListQuerySerializer(ListQuerySerializer):
    """Query parameters of ``GET /webhook_endpoints``: ``limit`` and ``starting_after`` (an
    endpoint id)."""


class EventListQuerySerializer(ListQuerySerializer):
    """Query parameters of ``GET /events``: ``type``, ``limit``, ``starting_after``."""

    type = StrictStringField(
        max_length=64,
        choices=sorted(EVENT_TYPES),
        required=False,
        error_messages={"invalid_choice": "Must be one of the event types."},
    )
