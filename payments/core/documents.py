"""The payment and refund objects of every answer (the stored answers render them)."""

from __future__ import annotations

from datetime import UTC, datetime

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from payments.models import (
    OperationStatus,
    Payment,
    PaymentOperation,
    PaymentStatus,
)

#: ``next_action.type`` of a payment held for the shopper: send the shopper's browser to
#: ``next_action.url`` (3-D Secure by redirect, ADR 0049).
REDIRECT_TO_URL = "redirect_to_url"


def rfc3339(value: datetime | None) -> str | None:
    """``value`` (aware) in UTC as DRF's ``DateTimeField(format="iso-8601")`` writes it."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text


def next_action_document(payment: Payment) -> dict[str, object] | None:
    """The payment's ``next_action``: ``{"type": "redirect_to_url", "url": <the acquirer's
    page where the shopper authenticates>, "expires_at": <RFC 3339 UTC>}`` while it is
    ``requires_action``; None in every other status."""
    if payment.status != PaymentStatus.REQUIRES_ACTION or not payment.action_url:
        return None
    return {
        "type": REDIRECT_TO_URL,
        "url": payment.action_url,
        "expires_at": rfc3339(payment.action_expires_at),
    }


class NextActionSerializer(serializers.Serializer):
    """``next_action`` of a ``requires_action`` payment (the OpenAPI document's shape)."""

    type = serializers.ChoiceField(
        choices=[REDIRECT_TO_URL], help_text="Send the shopper's browser to url."
    )
    url = serializers.CharField(
        help_text="The acquirer's page where the shopper authenticates (3-D Secure)."
    )
    expires_at = serializers.DateTimeField(
        format="iso-8601",
        default_timezone=UTC,
        help_text="Not finished by then, the payment is voided and ends canceled.",
    )


class PaymentSerializer(serializers.ModelSerializer):
    """The payment object of every answer. Timestamps are RFC 3339 in UTC."""

    created_at = serializers.DateTimeField(format="iso-8601", default_timezone=UTC)
    updated_at = serializers.DateTimeField(format="iso-8601", default_timezone=UTC)
    not_before = serializers.DateTimeField(
        format="iso-8601",
        default_timezone=UTC,
        allow_null=True,
        help_text="A deferred payment is sent at this time or later; null in every other status.",
    )
    object = serializers.SerializerMethodField()
    next_action = serializers.SerializerMethodField(
        help_text="What the shopper must do while the payment is requires_action; else null."
    )

    class Meta:
        model = Payment
        fields = [
            "id",
            "object",
            "status",
            "amount",
            "currency",
            "payment_method",
            "reference",
            "description",
            "decline_code",
            "failure_code",
            "acquirer_reference",
            "capture_method",
            "amount_captured",
            "amount_refunded",
            "amount_disputed",
            "not_before",
            "acquirer",
            "return_url",
            "next_action",
            "created_at",
            "updated_at",
        ]

    def get_object(self, payment: Payment) -> str:
        return "payment"

    @extend_schema_field(NextActionSerializer(allow_null=True))
    def get_next_action(self, payment: Payment) -> dict[str, object] | None:
        return next_action_document(payment)


class RefundSerializer(serializers.ModelSerializer):
    """The refund object: a ``refund`` :class:`~payments.models.PaymentOperation`. Amounts in
    minor units of ``currency`` (the payment's); timestamps RFC 3339 in UTC."""

    object = serializers.SerializerMethodField()
    payment = serializers.CharField(source="payment_id")
    currency = serializers.CharField(source="payment.currency")
    status = serializers.ChoiceField(choices=OperationStatus.choices)
    created_at = serializers.DateTimeField(format="iso-8601", default_timezone=UTC)
    updated_at = serializers.DateTimeField(format="iso-8601", default_timezone=UTC)

    class Meta:
        model = PaymentOperation
        fields = [
            "id",
            "object",
            "payment",
            "amount",
            "currency",
            "status",
            "reason",
            "failure_code",
            "acquirer_reference",
            "created_at",
            "updated_at",
        ]

    def get_object(self, operation: PaymentOperation) -> str:
        return "refund"
