"""The payment and refund objects of every answer (the stored answers render them)."""

from __future__ import annotations

from datetime import UTC

from rest_framework import serializers

from payments.models import (
    OperationStatus,
    Payment,
    PaymentOperation,
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
            "created_at",
            "updated_at",
        ]

    def get_object(self, payment: Payment) -> str:
        return "payment"


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
