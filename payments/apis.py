"""The merchant API: thin views over ``services``, ``lifecycle_services`` and ``selectors``.

``POST /payments`` (idempotent, see README), ``GET /payments``, ``GET /payments/{id}``,
``POST /payments/{id}/capture``, ``POST /payments/{id}/void``, ``POST /payments/{id}/refunds``
(idempotent), ``GET /payments/{id}/refunds``, ``GET /refunds/{id}``, ``GET /healthz``. Every
error is an RFC 9457 problem (``payments.problems``).
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
from payments.lifecycle import OperationConflict
from payments.lifecycle_services import payment_capture, payment_void, refund_create
from payments.parsers import request_json
from payments.problems import Problem
from payments.responses import create_answer, json_bytes, operation_answer
from payments.selectors import (
    PaymentNotFound,
    RefundNotFound,
    payment_get,
    payment_list,
    refund_get,
    refund_list,
)
from payments.serializers import (
    CaptureInputSerializer,
    PaymentCreateInputSerializer,
    PaymentListQuerySerializer,
    PaymentListSerializer,
    PaymentSerializer,
    ProblemSerializer,
    RefundInputSerializer,
    RefundListQuerySerializer,
    RefundListSerializer,
    RefundSerializer,
    VoidInputSerializer,
)
from payments.services import payment_create

PROBLEM = "application/problem+json"


def problems(*statuses: int) -> dict:
    """OpenAPI responses for error ``statuses``: RFC 9457 ``application/problem+json``."""
    return {
        (status, PROBLEM): OpenApiResponse(ProblemSerializer, description="RFC 9457 problem")
        for status in statuses
    }


IDEMPOTENCY_KEY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=True,
    description="1-255 printable ASCII characters, unique per request.",
)

#: The 409 state conflicts of the operations: never stored, the key stays free.
CONFLICT_TITLES = {
    "invalid_payment_state": "The payment's status does not allow this",
    "amount_exceeds_capturable": "The amount is more than can be captured",
    "amount_exceeds_refundable": "The amount is more than can be refunded",
}


def _payment_not_found(exc: Exception) -> Problem:
    return Problem("No payment with this id.", code="not_found", title="Not found", status_code=404)


def _idempotency_key(request: Request) -> str:
    key = parse_idempotency_key(request.headers.get("idempotency-key"))
    if is_card_number(key):  # it would be stored and shown to operators
        raise card_data_refusal(["Idempotency-Key"], detail=KEY_REFUSAL)
    return key


def _operation_body(request: Request, serializer: type) -> dict:
    """The validated body of an operation's POST; an empty body is ``{}``."""
    empty = request.headers.get("content-length") in (None, "", "0")
    data = {} if empty else request_json(request)
    body = serializer(data=data)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


def _operate(service, request: Request, payment_id: str, **body) -> HttpResponse:
    """Run an operation's service and answer; 404 and the 409 conflicts as problems."""
    key = _idempotency_key(request)
    try:
        result = service(
            merchant=request.user,
            payment_id=payment_id,
            idempotency_key=key,
            client=acquirer_client(),
            **body,
        )
    except PaymentNotFound as exc:
        raise _payment_not_found(exc) from exc
    except OperationConflict as exc:
        raise Problem(
            exc.detail, code=exc.code, title=CONFLICT_TITLES[exc.code], status_code=409
        ) from exc
    return operation_answer(result)


class PaymentListCreateApi(APIView):
    """``GET /payments`` (list) and ``POST /payments`` (create, idempotent)."""

    @extend_schema(
        operation_id="payments_create",
        summary="Create and authorize a payment",
        request=PaymentCreateInputSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={
            201: PaymentSerializer,
            202: PaymentSerializer,
            **problems(400, 401, 409, 422, 502, 503),
        },
    )
    def post(self, request: Request) -> HttpResponse:
        key = _idempotency_key(request)
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
        _refuse_unknown_parameters(request, PaymentListQuerySerializer)
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
            raise _payment_not_found(exc) from exc
        return HttpResponse(
            json_bytes(PaymentSerializer(payment).data), content_type="application/json"
        )


class PaymentCaptureApi(APIView):
    """``POST /payments/{id}/capture``: capture a ``requires_capture`` payment, idempotent."""

    @extend_schema(
        operation_id="payments_capture",
        summary="Capture an authorized payment (all of it, or a part: the rest is released)",
        request=CaptureInputSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={
            200: PaymentSerializer,
            202: PaymentSerializer,
            **problems(400, 401, 404, 409, 422, 502, 503),
        },
    )
    def post(self, request: Request, payment_id: str) -> HttpResponse:
        body = _operation_body(request, CaptureInputSerializer)
        return _operate(payment_capture, request, payment_id, **body)


class PaymentVoidApi(APIView):
    """``POST /payments/{id}/void``: release a ``requires_capture`` payment, idempotent."""

    @extend_schema(
        operation_id="payments_void",
        summary="Void an authorized, uncaptured payment",
        request=VoidInputSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={
            200: PaymentSerializer,
            202: PaymentSerializer,
            **problems(400, 401, 404, 409, 422, 502, 503),
        },
    )
    def post(self, request: Request, payment_id: str) -> HttpResponse:
        _operation_body(request, VoidInputSerializer)
        return _operate(payment_void, request, payment_id)


class PaymentRefundsApi(APIView):
    """``POST /payments/{id}/refunds`` (idempotent) and ``GET /payments/{id}/refunds``."""

    @extend_schema(
        operation_id="refunds_create",
        summary="Refund a succeeded payment (all that remains, or a part)",
        request=RefundInputSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={
            201: RefundSerializer,
            202: RefundSerializer,
            **problems(400, 401, 404, 409, 422, 502, 503),
        },
    )
    def post(self, request: Request, payment_id: str) -> HttpResponse:
        body = _operation_body(request, RefundInputSerializer)
        return _operate(refund_create, request, payment_id, **body)

    @extend_schema(
        operation_id="refunds_list",
        summary="List a payment's refunds, newest first",
        parameters=[RefundListQuerySerializer],
        responses={200: RefundListSerializer, **problems(400, 401, 404)},
    )
    def get(self, request: Request, payment_id: str) -> HttpResponse:
        _refuse_unknown_parameters(request, RefundListQuerySerializer)
        query = RefundListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            payment = payment_get(merchant=request.user, payment_id=payment_id)
        except PaymentNotFound as exc:
            raise _payment_not_found(exc) from exc
        try:
            page = refund_list(payment=payment, **query.validated_data)
        except RefundNotFound as exc:
            raise Problem(
                "starting_after is not the id of one of this payment's refunds.",
                code="validation_error",
                title="The query is invalid",
                errors=[
                    {"field": "starting_after", "code": "not_found", "message": "No such refund."}
                ],
            ) from exc
        document = {
            "object": "list",
            "data": RefundSerializer(page.refunds, many=True).data,
            "has_more": page.has_more,
        }
        return HttpResponse(json_bytes(document), content_type="application/json")


class RefundDetailApi(APIView):
    """``GET /refunds/{id}``: another merchant's refund answers 404."""

    @extend_schema(
        operation_id="refunds_retrieve",
        summary="Retrieve a refund",
        responses={200: RefundSerializer, **problems(401, 404)},
    )
    def get(self, request: Request, refund_id: str) -> HttpResponse:
        try:
            refund = refund_get(merchant=request.user, refund_id=refund_id)
        except RefundNotFound as exc:
            raise Problem(
                "No refund with this id.", code="not_found", title="Not found", status_code=404
            ) from exc
        return HttpResponse(
            json_bytes(RefundSerializer(refund).data), content_type="application/json"
        )


def _refuse_unknown_parameters(request: Request, serializer: type) -> None:
    unknown = sorted(set(request.query_params) - set(serializer().fields))
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


def healthz(request) -> JsonResponse:
    """``GET /healthz``: 200 while the process is up (no database or acquirer check)."""
    return JsonResponse({"status": "ok"})
