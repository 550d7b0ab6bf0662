"""The merchant API: thin views over ``services`` and ``selectors``.

``POST /payments`` (idempotent, see README), ``GET /payments``, ``GET /payments/{id}``,
``GET /healthz``. Every error is an RFC 9457 problem (``payments.problems``).
"""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from idempotency.keys import parse_idempotency_key
from payments.acquirer.client import acquirer_client
from payments.card_data import KEY_REFUSAL, card_data_refusal, is_card_number
from payments.parsers import request_json
from payments.problems import Problem
from payments.responses import create_answer, json_bytes
from payments.selectors import PaymentNotFound, payment_get, payment_list
from payments.serializers import (
    PaymentCreateInputSerializer,
    PaymentListQuerySerializer,
    PaymentListSerializer,
    PaymentSerializer,
    ProblemSerializer,
)
from payments.services import payment_create

PROBLEM = "application/problem+json"


def problems(*statuses: int) -> dict:
    """OpenAPI responses for error ``statuses``: RFC 9457 ``application/problem+json``."""
    return {
        (status, PROBLEM): OpenApiResponse(ProblemSerializer, description="RFC 9457 problem")
        for status in statuses
    }


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
        key = parse_idempotency_key(request.headers.get("idempotency-key"))
        if is_card_number(key):  # it would be stored and shown to operators
            raise card_data_refusal(["Idempotency-Key"], detail=KEY_REFUSAL)
        body = PaymentCreateInputSerializer(data=request_json(request))
        body.is_valid(raise_exception=True)
        result = payment_create(
            merchant=request.user,
            idempotency_key=key,
            client=acquirer_client(),
            **body.validated_data,
        )
        return create_answer(result)

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
