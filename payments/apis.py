"""The merchant API: thin views over ``services`` and ``selectors``.

``POST /payments`` (idempotent, see README), ``GET /payments``, ``GET /payments/{id}``,
``GET /healthz``. Every error is an RFC 9457 problem (``payments.problems``).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from idempotency.errors import IdempotencyKeyInUse, IdempotencyKeyReused
from idempotency.keys import parse_idempotency_key
from idempotency.responses import replay_response
from payments.acquirer.client import acquirer_client
from payments.card_data import card_data_fields, is_card_number
from payments.metrics import (
    record_idempotency_key_in_use,
    record_idempotency_key_reused,
    record_idempotency_replay,
)
from payments.problems import Problem
from payments.responses import json_bytes
from payments.selectors import PaymentNotFound, payment_get, payment_list
from payments.serializers import (
    PaymentCreateInputSerializer,
    PaymentListQuerySerializer,
    PaymentListSerializer,
    PaymentSerializer,
    ProblemSerializer,
)
from payments.services import Outcome, StoredResponse, payment_create

PROBLEM = "application/problem+json"


def problems(*statuses: int) -> dict:
    """OpenAPI responses for error ``statuses``: RFC 9457 ``application/problem+json``."""
    return {
        (status, PROBLEM): OpenApiResponse(ProblemSerializer, description="RFC 9457 problem")
        for status in statuses
    }


def _to_http(stored: StoredResponse) -> HttpResponse:
    response = HttpResponse(stored.body, status=stored.status_code)
    for name, value in stored.headers.items():
        response[name] = value
    return response


class PaymentListCreateApi(APIView):
    """``GET /payments`` (list) and ``POST /payments`` (create, idempotent)."""

    @extend_schema(
        operation_id="payments_create",
        summary="Create and authorize a payment",
        request=PaymentCreateInputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=True,
                description="1-255 printable ASCII characters, unique per payment attempt.",
            )
        ],
        responses={
            201: PaymentSerializer,
            202: PaymentSerializer,
            **problems(400, 401, 409, 422, 502, 503),
        },
    )
    def post(self, request: Request) -> HttpResponse:
        key = parse_idempotency_key(request.META.get("HTTP_IDEMPOTENCY_KEY"))
        if is_card_number(key):  # it would be stored and shown to operators
            raise Problem(
                "Card numbers are not accepted, in the Idempotency-Key header either.",
                code="card_data_not_accepted",
                title="Card data is not accepted",
                errors=[
                    {
                        "field": "Idempotency-Key",
                        "code": "card_data_not_accepted",
                        "message": "Looks like a card number.",
                    }
                ],
            )
        if request.content_type.split(";")[0].strip().lower() != "application/json":
            raise Problem(
                "Send the body as JSON with 'Content-Type: application/json'.",
                code="unsupported_media_type",
                title="The body must be application/json",
            )
        data = request.data
        card_fields = card_data_fields(data)
        if card_fields:
            raise Problem(
                "Card numbers are not accepted. Tokenise the card and send payment_method.",
                code="card_data_not_accepted",
                title="Card data is not accepted",
                errors=[
                    {
                        "field": name,
                        "code": "card_data_not_accepted",
                        "message": "Looks like a card number.",
                    }
                    for name in card_fields
                ],
            )
        serializer = PaymentCreateInputSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        try:
            result = payment_create(
                merchant=request.user,
                idempotency_key=key,
                data=serializer.validated_data,
                client=acquirer_client(),
            )
        except IdempotencyKeyInUse:
            record_idempotency_key_in_use()
            raise
        except IdempotencyKeyReused:
            record_idempotency_key_reused()
            raise
        if result.replay_of is not None:
            record_idempotency_replay()
            return replay_response(result.replay_of)
        if result.outcome in (Outcome.NOT_SENT, Outcome.CIRCUIT_OPEN):
            raise Problem(
                "The acquirer could not be reached; the payment was not sent and nothing was "
                "charged. Retry later, with the same Idempotency-Key if you wish.",
                code="acquirer_unavailable",
                title="The acquirer is unavailable",
                status_code=503,
                retry_after=result.retry_after or settings.PAYMENTS_UNAVAILABLE_RETRY_AFTER_SECONDS,
            )
        return _to_http(result.response)

    @extend_schema(
        operation_id="payments_list",
        summary="List payments, newest first",
        parameters=[PaymentListQuerySerializer],
        responses={200: PaymentListSerializer, **problems(400, 401)},
    )
    def get(self, request: Request) -> HttpResponse:
        unknown = sorted(set(request.query_params) - set(PaymentListQuerySerializer().fields))
        if unknown:
            raise Problem(
                "Unknown query parameter.",
                code="validation_error",
                title="The query is invalid",
                errors=[
                    {"field": n, "code": "unknown_parameter", "message": "Unknown parameter."}
                    for n in unknown
                ],
            )
        query = PaymentListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            page = payment_list(merchant=request.user, **query.validated_data)
        except PaymentNotFound as exc:
            raise Problem(
                "starting_after is not the id of one of your payments.",
                code="validation_error",
                title="The query is invalid",
                errors=[
                    {"field": "starting_after", "code": "not_found", "message": "No such payment."}
                ],
            ) from exc
        document = {
            "object": "list",
            "data": PaymentSerializer(page.payments, many=True).data,
            "has_more": page.has_more,
        }
        return HttpResponse(json_bytes(document), content_type="application/json")


class PaymentDetailApi(APIView):
    """``GET /payments/{id}``: another merchant's payment answers 404."""

    @extend_schema(
        operation_id="payments_retrieve",
        summary="Retrieve a payment",
        responses={200: PaymentSerializer, **problems(401, 404)},
    )
    def get(self, request: Request, payment_id: str) -> HttpResponse:
        try:
            payment = payment_get(merchant=request.user, payment_id=payment_id)
        except PaymentNotFound as exc:
            raise Problem(
                "No payment with this id.", code="not_found", title="Not found", status_code=404
            ) from exc
        return HttpResponse(
            json_bytes(PaymentSerializer(payment).data), content_type="application/json"
        )


def healthz(request) -> JsonResponse:
    """``GET /healthz``: 200 while the process is up (no database or acquirer check)."""
    return JsonResponse({"status": "ok"})
