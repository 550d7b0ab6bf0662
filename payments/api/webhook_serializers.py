"""Input shapes of the webhooks API (``payments.api.webhook_views``): strict like every body of the
API, card data refused first (``payments.api.card_data`` through :class:`StrictBodySerializer`),
the URL checked by ``webhooks.url_safety`` and the event types by ``webhooks.events``. No
message repeats the value it refuses."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from payments.api.serializers import StrictBodySerializer, StrictStringField
from webhooks.events import ALL_EVENTS, EVENT_TYPES, validate_event_types
from webhooks.url_safety import MAX_URL_LENGTH, UnsafeUrl, check_url

__all__ = ["RotateSecretInputSerializer", "WebhookEndpointInputSerializer"]


class WebhookEndpointInputSerializer(StrictBodySerializer):
    """Body of ``POST /webhook_endpoints``: ``url`` (https; in development also
    ``http://127.0.0.1``), ``enabled_events`` (event types, or ``["*"]``), optional
    ``description`` (free text, 1-255 printable characters, never card data)."""

    url = StrictStringField(max_length=MAX_URL_LENGTH)
    enabled_events = serializers.ListField(
        child=StrictStringField(max_length=64), min_length=1, max_length=len(EVENT_TYPES) + 1
    )
    description = StrictStringField(max_length=255, required=False)

    def validate_url(self, value: str) -> str:
        try:
            return check_url(value, allow_local=settings.WEBHOOK_ALLOW_LOCAL_URLS)
        except UnsafeUrl as exc:
            raise serializers.ValidationError(exc.message, code=exc.code) from exc

    def validate_enabled_events(self, value: list[str]) -> list[str]:
        if validate_event_types(value):
            raise serializers.ValidationError(
                'Unknown event type: one of the documented types, or ["*"] alone.',
                code="unknown_event_type",
            )
        if ALL_EVENTS in value and len(value) > 1:
            raise serializers.ValidationError('"*" stands alone.', code="invalid")
        return list(dict.fromkeys(value))


class RotateSecretInputSerializer(StrictBodySerializer):
    """Body of ``POST /webhook_endpoints/{id}/rotate_secret``: empty or ``{}``. The overlap is
    the service's (``WEBHOOK_SECRET_ROTATION_OVERLAP_SECONDS``); a member asking for another
    one is refused like any unknown member, never silently ignored."""
