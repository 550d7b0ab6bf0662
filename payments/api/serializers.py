"""Input and output shapes of the payments API.

Input fields are strict: JSON types are not coerced (``"1000"`` and ``1000.0`` are not
integers, ``true`` is not a number, ``123`` is not a string), unknown fields are refused, and no
error message echoes the value it refuses.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from django.conf import settings
from rest_framework import serializers

from payments.api.card_data import card_data_fields, card_data_refusal
from payments.core.documents import PaymentSerializer, RefundSerializer
from payments.core.money import CURRENCY_EXPONENTS, MAX_AMOUNT, MIN_AMOUNT
from payments.models import (
    CaptureMethod,
    PaymentStatus,
    RefundReason,
)
from webhooks.url_safety import MAX_URL_LENGTH, UnsafeUrl, check_url, url_pattern

#: A payment method token of one of the families (``acquirers.specs.PAYMENT_METHOD_FAMILIES``,
#: ADR 0051): the sandbox's (``tok_...``), a Stripe PaymentMethod id (``pm_...``, made by
#: Stripe.js on the merchant's page) or an Adyen stored payment method (``spm_`` + its
#: ``storedPaymentMethodId``); routing sends it only to an acquirer of its family.
PAYMENT_METHOD_PATTERN = re.compile(r"(?:tok|pm|spm)_[A-Za-z0-9_]{1,64}")
#: The longest value of each string field of ``POST /payments`` (characters).
CREATE_MAX_LENGTHS = {
    "currency": 3,
    "payment_method": 68,
    "reference": 128,
    "description": 255,
    "capture_method": 16,
}


class StrictIntegerField(serializers.Field):
    """A JSON integer (not a float, string or boolean) within [min_value, max_value]. Its
    OpenAPI schema (``integer``, ``minimum``, ``maximum``) is read from the same attributes
    (``payments.api.openapi``)."""

    default_error_messages = {
        "invalid": "Must be a JSON integer.",
        "min_value": "Must be at least {min_value}.",
        "max_value": "Must be at most {max_value}.",
    }

    def __init__(self, *, min_value: int, max_value: int, **kwargs: Any) -> None:
        self.min_value, self.max_value = min_value, max_value
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if type(data) is not int:
            self.fail("invalid")
        if data < self.min_value:
            self.fail("min_value", min_value=self.min_value)
        if data > self.max_value:
            self.fail("max_value", max_value=self.max_value)
        return data

    def to_representation(self, value: int) -> int:
        return value


class StrictStringField(serializers.Field):
    """A JSON string of 1..max_length printable characters (``str.isprintable``), matching
    ``pattern`` in full when one is given (a pattern must match printable text only), and one
    of ``choices`` when they are given (refused with the error ``choice_error``, a key of
    ``error_messages`` and the field error's code). Its OpenAPI schema (``minLength``,
    ``maxLength``, ``pattern``, ``enum``) is read from the same attributes
    (``payments.api.openapi``), so the document states exactly what is accepted."""

    default_error_messages = {
        "invalid": "Must be a JSON string.",
        "blank": "Must not be empty.",
        "max_length": "Must be at most {max_length} characters.",
        "not_printable": "Must contain printable characters only.",
        "pattern": "Has an invalid format.",
        "invalid_choice": "Must be one of: {choices}.",
    }

    def __init__(
        self,
        *,
        max_length: int,
        pattern: re.Pattern[str] | None = None,
        choices: Collection[str] | None = None,
        choice_error: str = "invalid_choice",
        **kwargs: Any,
    ):
        self.max_length, self.pattern, self.choice_error = max_length, pattern, choice_error
        self.choices = None if choices is None else tuple(choices)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if not data:
            self.fail("blank")
        if len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        if not data.isprintable():
            self.fail("not_printable")
        if self.pattern is not None and not self.pattern.fullmatch(data):
            self.fail("pattern")
        if self.choices is not None and data not in self.choices:
            self.fail(self.choice_error, choices=", ".join(self.choices))
        return data

    def to_representation(self, value: str) -> str:
        return value


class StrictBooleanField(serializers.Field):
    """A JSON boolean: ``true`` or ``false`` only (not ``1``, ``"true"``, ``"yes"`` or ``null``)."""

    default_error_messages = {"invalid": "Must be a JSON boolean."}

    def to_internal_value(self, data: Any) -> bool:
        if type(data) is not bool:
            self.fail("invalid")
        return data

    def to_representation(self, value: bool) -> bool:
        return value


class StrictBodySerializer(serializers.Serializer):
    """A strict JSON object body: card data anywhere (a 13-19 digit run in any value or key)
    is refused first, with the 400 problem ``card_data_not_accepted`` (``payments.api.card_data``),
    before any other check can echo a field's name next to its value; then anything but a JSON
    object, and unknown fields, are refused."""

    default_error_messages = {"unknown_field": "Unknown field."}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        card_fields = card_data_fields(data)
        if card_fields:
            raise card_data_refusal(card_fields)
        if not isinstance(data, dict) or hasattr(data, "getlist"):
            raise serializers.ValidationError(
                {"non_field_errors": ["The body must be a JSON object."]}, code="invalid"
            )
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {
                    name: [serializers.ErrorDetail("Unknown field.", code="unknown_field")]
                    for name in unknown
                }
            )
        return super().to_internal_value(data)


class ReturnUrlField(StrictStringField):
    """``return_url`` of ``POST /payments``: checked exactly as a webhook endpoint's URL is
    (``webhooks.url_safety.check_url``: https on 443 or 8443 to public addresses; in
    development and tests also ``http://127.0.0.1``, ``WEBHOOK_ALLOW_LOCAL_URLS``); its
    OpenAPI ``pattern`` is ``url_safety.url_pattern`` under the same setting."""

    def openapi_pattern(self) -> str:
        return url_pattern(allow_local=settings.WEBHOOK_ALLOW_LOCAL_URLS)


class PaymentCreateInputSerializer(StrictBodySerializer):
    """Body of ``POST /payments`` (strict, see :class:`StrictBodySerializer`)."""

    amount = StrictIntegerField(
        min_value=MIN_AMOUNT,
        max_value=MAX_AMOUNT,
        help_text="Amount in minor units of the currency (1999 EUR = 19.99 EUR).",
    )
    currency = StrictStringField(
        max_length=CREATE_MAX_LENGTHS["currency"],
        choices=sorted(CURRENCY_EXPONENTS),
        choice_error="unknown_currency",
        error_messages={
            "unknown_currency": "Must be a supported ISO 4217 currency code in upper case."
        },
        help_text="ISO 4217 alphabetic code, upper case, for example EUR or JPY.",
    )
    payment_method = StrictStringField(
        max_length=CREATE_MAX_LENGTHS["payment_method"],
        pattern=PAYMENT_METHOD_PATTERN,
        help_text="A payment method token: the sandbox's ('tok_...'), a Stripe PaymentMethod id "
        "('pm_...') or an Adyen stored payment method ('spm_' + its storedPaymentMethodId). "
        "Only acquirers that can charge its kind are tried; none: 400 "
        "payment_method_not_supported. Card numbers are refused.",
    )
    reference = StrictStringField(
        max_length=CREATE_MAX_LENGTHS["reference"],
        required=False,
        help_text="Your order reference (printable, <= 128).",
    )
    description = StrictStringField(
        max_length=CREATE_MAX_LENGTHS["description"],
        required=False,
        help_text="Free text (printable, <= 255).",
    )
    capture_method = StrictStringField(
        max_length=CREATE_MAX_LENGTHS["capture_method"],
        choices=CaptureMethod.values,
        required=False,
        help_text="'automatic' (default: authorize and capture in one call) or 'manual' "
        "(authorize only: capture or void later).",
    )
    allow_deferred = StrictBooleanField(
        required=False,
        help_text="true: when no acquirer can take the payment now, answer 202 with the payment "
        "'deferred' (not sent anywhere yet, sent at not_before or later) instead of 503. For "
        "merchant-initiated payments nobody waits for (renewals). Default false.",
    )
    return_url = ReturnUrlField(
        max_length=MAX_URL_LENGTH,
        required=False,
        help_text="Your page the shopper comes back to after a customer action (3-D Secure), "
        "with payment_id added to its query. Absolute https URL on port 443 or 8443 resolving "
        "to public addresses, as a webhook endpoint's. Without it, a payment that needs the "
        "shopper is declined shopper_action_required.",
    )

    def validate_return_url(self, value: str) -> str:
        if not settings.PUBLIC_BASE_URL:
            raise serializers.ValidationError(
                "Customer actions are off on this service (no PUBLIC_BASE_URL).",
                code="customer_actions_off",
            )
        try:
            return check_url(value, allow_local=settings.WEBHOOK_ALLOW_LOCAL_URLS)
        except UnsafeUrl as exc:
            raise serializers.ValidationError(exc.message, code=exc.code) from exc


#: The fields of ``POST /payments``: the ones it needs, and all it knows.
CREATE_REQUIRED_FIELDS = frozenset({"amount", "currency", "payment_method"})
CREATE_FIELDS = frozenset(PaymentCreateInputSerializer._declared_fields)
_CAPTURE_METHODS = frozenset(CaptureMethod.values)


def _plain_text(value: Any, field: str) -> bool:
    """A :class:`StrictStringField` value of ``field``: a JSON string, 1 to its maximum length,
    printable."""
    return (
        type(value) is str and 0 < len(value) <= CREATE_MAX_LENGTHS[field] and value.isprintable()
    )


def payment_create_input(data: Any) -> dict[str, Any] | None:
    """The validated body of ``POST /payments`` when :class:`PaymentCreateInputSerializer`
    certainly accepts ``data`` (the parsed JSON body), else None.

    Plain checks, no DRF: the hot path of a fresh payment (ADR 0029); a ``return_url`` is
    judged by the webhooks' URL check, as the serializer does (it resolves the host). The dict
    returned equals the serializer's ``validated_data`` (the fields sent, values unchanged:
    ``amount`` an int, ``allow_deferred`` a bool, the others str). None says nothing about
    why: the caller then
    runs the serializer, whose answer (the card-data refusal, the field errors) is the one
    the merchant gets, so this function may refuse more than the serializer, never less
    (``tests/unit/test_payment_create_input.py`` proves both on a generated corpus).
    """
    if type(data) is not dict or not CREATE_REQUIRED_FIELDS <= data.keys() <= CREATE_FIELDS:
        return None
    amount = data["amount"]
    if type(amount) is not int or not MIN_AMOUNT <= amount <= MAX_AMOUNT:
        return None
    currency = data["currency"]
    if not _plain_text(currency, "currency") or currency not in CURRENCY_EXPONENTS:
        return None
    method = data["payment_method"]
    if not _plain_text(method, "payment_method") or not PAYMENT_METHOD_PATTERN.fullmatch(method):
        return None
    for field in ("reference", "description"):
        if field in data and not _plain_text(data[field], field):
            return None
    if "capture_method" in data and (
        not _plain_text(data["capture_method"], "capture_method")
        or data["capture_method"] not in _CAPTURE_METHODS
    ):
        return None
    if "allow_deferred" in data and type(data["allow_deferred"]) is not bool:
        return None
    if "return_url" in data and not _return_url_accepted(data["return_url"]):
        return None
    if card_data_fields(data):  # last: the dearest check, on a body valid in every other way
        return None
    return dict(data)


def _return_url_accepted(value: Any) -> bool:
    """What :class:`ReturnUrlField` and ``validate_return_url`` accept, as a plain check."""
    if type(value) is not str or not 0 < len(value) <= MAX_URL_LENGTH or not value.isprintable():
        return False
    if not settings.PUBLIC_BASE_URL:
        return False
    try:
        check_url(value, allow_local=settings.WEBHOOK_ALLOW_LOCAL_URLS)
    except UnsafeUrl:
        return False
    return True


def payment_create_validated(data: Any) -> dict[str, Any]:
    """The validated body of ``POST /payments`` (``data``: the parsed JSON body): the plain
    checks of :func:`payment_create_input` for a valid body, else
    :class:`PaymentCreateInputSerializer`, which refuses it. Raises DRF's ``ValidationError``
    (the 400 problem with its field errors, or the card-data refusal)."""
    fields = payment_create_input(data)
    if fields is None:
        body = PaymentCreateInputSerializer(data=data)
        body.is_valid(raise_exception=True)
        fields = dict(body.validated_data)
    return fields


class CaptureInputSerializer(StrictBodySerializer):
    """Body of ``POST /payments/{id}/capture``: ``{}`` or ``{"amount": N}``."""

    amount = StrictIntegerField(
        min_value=MIN_AMOUNT,
        max_value=MAX_AMOUNT,
        required=False,
        help_text="Minor units to capture (default the authorized amount; at most it). "
        "One capture per payment: a partial capture releases the rest.",
    )


class VoidInputSerializer(StrictBodySerializer):
    """Body of ``POST /payments/{id}/void``: ``{}``."""


class RefundInputSerializer(StrictBodySerializer):
    """Body of ``POST /payments/{id}/refunds``: ``amount`` and ``reason``, both optional."""

    amount = StrictIntegerField(
        min_value=MIN_AMOUNT,
        max_value=MAX_AMOUNT,
        required=False,
        help_text="Minor units to refund (default what remains refundable).",
    )
    reason = StrictStringField(
        max_length=32,
        choices=RefundReason.values,
        required=False,
        help_text="Why the money goes back.",
    )


class QueryIntegerField(serializers.Field):
    """A query parameter holding a whole number in ASCII decimal digits, no sign, no leading
    zero (``20``; not ``+20``, ``020``, `` 20``, ``20.0`` or other scripts' digits), within
    [min_value, max_value]. Its OpenAPI schema (``integer``, ``minimum``, ``maximum``) is read
    from the same attributes (``payments.api.openapi``)."""

    default_error_messages = {
        "invalid": "Must be a whole number in decimal digits.",
        "min_value": "Must be at least {min_value}.",
        "max_value": "Must be at most {max_value}.",
    }
    _DIGITS = re.compile(r"0|[1-9][0-9]{0,17}")

    def __init__(self, *, min_value: int, max_value: int, **kwargs: Any) -> None:
        self.min_value, self.max_value = min_value, max_value
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, str) or not self._DIGITS.fullmatch(data):
            self.fail("invalid")
        value = int(data)
        if value < self.min_value:
            self.fail("min_value", min_value=self.min_value)
        if value > self.max_value:
            self.fail("max_value", max_value=self.max_value)
        return value

    def to_representation(self, value: int) -> int:
        return value


#: ``limit`` of every list: 1-100 objects a page, 20 when absent.
LIST_LIMIT = {"min_value": 1, "max_value": 100}
#: ``starting_after`` of every list: an object's id (the page starts after it).
CURSOR_MAX_LENGTH = 32


class ListQuerySerializer(serializers.Serializer):
    """The query parameters of every list: ``limit`` (1-100, default 20) and the keyset cursor
    ``starting_after`` (the id of an object of the list: one that is not is a 400 problem
    ``validation_error`` with the field error ``not_found``)."""

    limit = QueryIntegerField(**LIST_LIMIT, default=20, help_text="Objects a page, 1-100.")
    starting_after = StrictStringField(
        max_length=CURSOR_MAX_LENGTH,
        required=False,
        help_text="The id of the last object of the previous page.",
    )


class RefundListQuerySerializer(ListQuerySerializer):
    """Query parameters of ``GET /payments/{id}/refunds``."""


class RefundListSerializer(serializers.Serializer):
    """``{"object": "list", "data": [refund, ...], "has_more": bool}``."""

    object = serializers.CharField(default="list")
    data = RefundSerializer(many=True)
    has_more = serializers.BooleanField()


class PaymentListQuerySerializer(ListQuerySerializer):
    """Query parameters of ``GET /payments``."""

    status = StrictStringField(
        max_length=32,
        choices=PaymentStatus.values,
        required=False,
        error_messages={"invalid_choice": "Must be one of the payment statuses."},
    )
    reference = StrictStringField(
        max_length=CREATE_MAX_LENGTHS["reference"], required=False, help_text="Exact reference."
    )


class PaymentListSerializer(serializers.Serializer):
    """``{"object": "list", "data": [...], "has_more": bool}``."""

    object = serializers.CharField(default="list")
    data = PaymentSerializer(many=True)
    has_more = serializers.BooleanField()
