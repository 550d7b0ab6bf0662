"""The merchant API: thin views over ``services``, ``lifecycle_services`` and ``selectors``.

``POST /payments`` (idempotent, see README), ``GET /payments``, ``GET /payments/{id}``,
``POST /payments/{id}/capture``, ``POST /payments/{id}/void``, ``POST /payments/{id}/refunds``
(idempotent), ``GET /payments/{id}/refunds``, ``GET /refunds/{id}``, ``GET /healthz``. Every
error is an RFC 9457 problem (``payments.api.problems``). Every merchant request is counted against
the merchant's request rate, and the POSTs that may call the acquirer hold one of its in-flight
slots (``payments.api.limits``), both before the idempotency key is claimed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import (
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView

from idempotency.keys import parse_idempotency_key
from merchants.authentication import bearer_token_cached
from merchants.models import Merchant
from payments.api.card_data import (
    KEY_REFUSAL,
    QUERY_REFUSAL,
    card_data_refusal,
    looks_like_card_number,
    query_card_data_fields,
)
from payments.api.limits import (
    ConcurrencyLimited,
    authentication_failures_refusal,
    client_address,
    payment_slot,
    rate_limited,
    request_rate_check,
    request_rate_refund,
)
from payments.api.openapi import idempotency_key_parameter
from payments.api.parsers import request_json
from payments.api.problems import CONFLICT_TITLES, Problem
from payments.api.responses import create_answer, operation_answer
from payments.api.serializers import (
    CaptureInputSerializer,
    PaymentCreateInputSerializer,
    PaymentListQuerySerializer,
    PaymentListSerializer,
    RefundInputSerializer,
    RefundListQuerySerializer,
    RefundListSerializer,
    VoidInputSerializer,
    payment_create_validated,
)
from payments.authorization.create import NoAcquirerForPayment, payment_create
from payments.core.answers import CreateResult, json_bytes
from payments.core.documents import PaymentSerializer, RefundSerializer
from payments.core.operation_states import OperationConflict
from payments.core.selectors import (
    PaymentNotFound,
    RefundNotFound,
    payment_get,
    payment_list,
    refund_get,
    refund_list,
)
from payments.operations.flows import payment_capture, payment_void, refund_create

#: The ``Idempotency-Key`` header of every POST that may reach the acquirer: required.
IDEMPOTENCY_KEY_HEADER = idempotency_key_parameter(required=True)


def not_found_problem(noun: str) -> Problem:
    """The 404 problem for a ``noun`` (payment, refund) the merchant does not have."""
    return Problem(f"No {noun} with this id.", code="not_found", title="Not found", status_code=404)


def _no_acquirer_problem(exc: NoAcquirerForPayment) -> Problem:
    """The ``400 validation_error`` of a payment no configured acquirer can take, naming the
    field to change: ``payment_method`` when no acquirer charges its family at all (ADR 0051),
    else ``currency`` (no acquirer of that family takes the currency with the capture
    method). Echoes no value."""
    if exc.payment_method:
        field, reason = "payment_method", "payment_method_not_supported"
        message = "No acquirer of this service can charge this kind of payment method."
    else:
        field, reason = "currency", "currency_not_supported"
        message = "No acquirer of this service takes this currency with this capture method."
    return Problem(
        message,
        code="validation_error",
        title="The request body is invalid",
        errors=[{"field": field, "code": reason, "message": message}],
    )


def json_answer(document: object) -> HttpResponse:
    """A 200 ``application/json`` answer of ``document`` (a serializer's data)."""
    return HttpResponse(json_bytes(document), content_type="application/json")


def idempotency_key_header(request: Request) -> str:
    raw = request.headers.get("idempotency-key")
    # Checked as sent, before parsing: a key holding a card number anywhere, in any form, would
    # be stored and shown to operators; a malformed one must not be named in another refusal.
    if raw is not None and looks_like_card_number(raw):
        raise card_data_refusal(["Idempotency-Key"], detail=KEY_REFUSAL)
    return parse_idempotency_key(raw)


class MerchantApi(APIView):
    """The base of every merchant API view. Once the request is authenticated (and permitted),
    it is counted against the merchant's request rate (a refusal is ``429 rate_limited``), then
    query parameters (names and values) holding card data are refused with ``400
    card_data_not_accepted`` before any view reads them. Every answer to a counted request
    carries ``RateLimit-Policy`` and ``RateLimit``; a payment POST refused by the in-flight cap
    (``429 concurrency_limited``) gives its count back, and its ``RateLimit`` says so. Before
    that, a client with too many failed authentications is refused ``429`` before its key is
    looked up (:func:`~payments.api.limits.authentication_failures_refusal`)."""

    def perform_authentication(self, request: Request) -> None:
        """Authenticate, counting each failure (a missing or invalid key) against the
        client's address; a client over its limit is refused before the key's look-up,
        unless the key is one this process already trusts (no query)."""
        limited = settings.API_AUTH_FAILURE_LIMIT > 0
        if limited and not bearer_token_cached(request):  # a trusted key costs nothing more
            refusal = authentication_failures_refusal(client_address(request), count=False)
            if refusal is not None:
                raise refusal
        try:
            user = request.user
        except exceptions.AuthenticationFailed:
            refusal = authentication_failures_refusal(client_address(request), count=True)
            if refusal is not None:
                raise refusal from None
            raise
        if not isinstance(user, Merchant):  # no Authorization header: 401 follows
            refusal = authentication_failures_refusal(client_address(request), count=True)
            if refusal is not None:
                raise refusal

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authentication and permissions first
        if isinstance(request.user, Merchant):
            decision = request_rate_check(request.user)
            request.rate_decision = decision
            if decision is not None and not decision.allowed:
                raise rate_limited(decision)
        fields = query_card_data_fields(request.query_params)
        if fields:
            raise card_data_refusal(fields, detail=QUERY_REFUSAL)

    def handle_exception(self, exc: Exception) -> HttpResponse:
        """DRF's answer to ``exc``; a :class:`~payments.api.limits.ConcurrencyLimited` refusal
        first gives back the rate count its request took (``RateLimit`` then shows it)."""
        decision = getattr(self.request, "rate_decision", None)
        if isinstance(exc, ConcurrencyLimited) and decision is not None:
            self.request.rate_decision = request_rate_refund(self.request.user, decision)
        return super().handle_exception(exc)

    def finalize_response(
        self, request: Request, response: HttpResponse, *args: Any, **kwargs: Any
    ) -> HttpResponse:
        response = super().finalize_response(request, response, *args, **kwargs)
        decision = getattr(request, "rate_decision", None)
        if decision is not None:
            for name, value in decision.headers().items():
                response[name] = value
        return response


#: What a query parameter may not be, each with its message: a name the list does not know,
#: an empty value (``?status=`` would otherwise read as "no filter"), or a name given twice
#: (``?status=a&status=b``: which one applies is a guess).
_PARAMETER_REFUSALS = {
    "unknown_parameter": "Unknown parameter.",
    "blank": "The value may not be empty: leave the parameter out instead.",
    "repeated": "Give the parameter once.",
}


def _refuse_malformed_parameters(request: Request, serializer: type) -> None:
    known = set(serializer().fields)
    errors = []
    for name in sorted(request.query_params):
        values = request.query_params.getlist(name)
        if name not in known:
            code = "unknown_parameter"
        elif len(values) > 1:
            code = "repeated"
        elif values[0] == "":
            code = "blank"
        else:
            continue
        errors.append({"field": name, "code": code, "message": _PARAMETER_REFUSALS[code]})
    if errors:
        raise Problem(
            "The query has a parameter that is unknown, empty or repeated.",
            code="validation_error",
            title="The query is invalid",
            errors=errors,
        )


def list_answer(
    request: Request,
    query_serializer: type,
    fetch: Callable[[dict], tuple[Sequence[object], bool]],
    item_serializer: type,
    *,
    cursor_not_found: type[Exception],
    cursor_detail: str,
    cursor_message: str,
) -> HttpResponse:
    """A list GET: refuse unknown, empty and repeated parameters, validate the query,
    ``fetch`` one page (items, has_more) and answer ``{"object": "list", "data": [...],
    "has_more": ...}``. A
    ``starting_after`` that ``fetch`` does not find (``cursor_not_found``) is a 400 problem
    saying ``cursor_detail`` and ``cursor_message``."""
    _refuse_malformed_parameters(request, query_serializer)
    query = query_serializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    try:
        items, has_more = fetch(dict(query.validated_data))
    except cursor_not_found as exc:
        raise Problem(
            cursor_detail,
            code="validation_error",
            title="The query is invalid",
            errors=[{"field": "starting_after", "code": "not_found", "message": cursor_message}],
        ) from exc
    document = {
        "object": "list",
        "data": item_serializer(items, many=True).data,
        "has_more": has_more,
    }
    return json_answer(document)


class OperationApi(MerchantApi):
    """The POST of an operation after the authorization (capture, void, refund), idempotent:
    validate the body (an empty body is ``{}``), run the service under the request's
    idempotency key and answer; 404 and the 409 conflicts as problems.

    A subclass names its ``operation_service`` (``payments.operations.flows``), its
    ``operation_body`` serializer, and its OpenAPI entry: ``openapi_id``, ``openapi_summary``
    and ``openapi_answer`` (the status of the final answer and its serializer; a pending
    operation is a 202 of the same shape).
    """

    operation_service: ClassVar[Callable[..., CreateResult]]
    operation_body: ClassVar[type]
    openapi_id: ClassVar[str]
    openapi_summary: ClassVar[str]
    openapi_answer: ClassVar[tuple[int, type]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ok, answer = cls.openapi_answer
        schema = extend_schema(
            operation_id=cls.openapi_id,
            summary=cls.openapi_summary,
            request=cls.operation_body,
            parameters=[IDEMPOTENCY_KEY_HEADER],
            responses={ok: answer, 202: answer},
        )
        extend_schema_view(post=schema)(cls)

    def post(self, request: Request, payment_id: str) -> HttpResponse:
        # Empty is decided from the bytes read: RequestBodyMiddleware refused any body that
        # could not be read in full (chunked, cut short).
        body = self.operation_body(data=request_json(request) if request.body else {})
        body.is_valid(raise_exception=True)
        key = idempotency_key_header(request)
        try:
            with payment_slot(request.user):
                result = self.operation_service(
                    merchant=request.user,
                    payment_id=payment_id,
                    idempotency_key=key,
                    **body.validated_data,
                )
        except PaymentNotFound as exc:
            raise not_found_problem("payment") from exc
        except OperationConflict as exc:
            raise Problem(
                exc.detail, code=exc.code, title=CONFLICT_TITLES[exc.code], status_code=409
            ) from exc
        return operation_answer(result)


class PaymentListCreateApi(MerchantApi):
    """``GET /payments`` (list) and ``POST /payments`` (create, idempotent)."""

    @extend_schema(
        operation_id="payments_create",
        summary="Create and authorize a payment",
        request=PaymentCreateInputSerializer,
        parameters=[IDEMPOTENCY_KEY_HEADER],
        responses={201: PaymentSerializer, 202: PaymentSerializer},
    )
    def post(self, request: Request) -> HttpResponse:
        key = idempotency_key_header(request)
        # A valid body passes plain checks; anything else gets the serializer's answer.
        fields = payment_create_validated(request_json(request))
        try:
            with payment_slot(request.user):
                result = payment_create(merchant=request.user, idempotency_key=key, **fields)
        except NoAcquirerForPayment as exc:
            raise _no_acquirer_problem(exc) from exc
        return create_answer(result)

    @extend_schema(
        operation_id="payments_list",
        summary="List payments, newest first",
        parameters=[PaymentListQuerySerializer],
        responses={200: PaymentListSerializer},
    )
    def get(self, request: Request) -> HttpResponse:
        def fetch(query: dict) -> tuple[Sequence[object], bool]:
            page = payment_list(merchant=request.user, **query)
            return page.payments, page.has_more

        return list_answer(
            request,
            PaymentListQuerySerializer,
            fetch,
            PaymentSerializer,
            cursor_not_found=PaymentNotFound,
            cursor_detail="starting_after is not the id of one of your payments.",
            cursor_message="No such payment.",
        )


class PaymentDetailApi(MerchantApi):
    """``GET /payments/{id}``: another merchant's payment answers 404."""

    @extend_schema(
        operation_id="payments_retrieve",
        summary="Retrieve a payment",
        responses={200: PaymentSerializer},
    )
    def get(self, request: Request, payment_id: str) -> HttpResponse:
        try:
            payment = payment_get(merchant=request.user, payment_id=payment_id)
        except PaymentNotFound as exc:
            raise not_found_problem("payment") from exc
        return json_answer(PaymentSerializer(payment).data)


class PaymentCaptureApi(OperationApi):
    """``POST /payments/{id}/capture``: capture a ``requires_capture`` payment, idempotent."""

    operation_service = staticmethod(payment_capture)
    operation_body = CaptureInputSerializer
    openapi_id = "payments_capture"
    openapi_summary = "Capture an authorized payment (all of it, or a part: the rest is released)"
    openapi_answer = (200, PaymentSerializer)


class PaymentVoidApi(OperationApi):
    """``POST /payments/{id}/void``: release a ``requires_capture`` payment, idempotent."""

    operation_service = staticmethod(payment_void)
    operation_body = VoidInputSerializer
    openapi_id = "payments_void"
    openapi_summary = "Void an authorized, uncaptured payment"
    openapi_answer = (200, PaymentSerializer)


class PaymentRefundsApi(OperationApi):
    """``POST /payments/{id}/refunds`` (idempotent) and ``GET /payments/{id}/refunds``."""

    operation_service = staticmethod(refund_create)
    operation_body = RefundInputSerializer
    openapi_id = "refunds_create"
    openapi_summary = "Refund a succeeded payment (all that remains, or a part)"
    openapi_answer = (201, RefundSerializer)

    @extend_schema(
        operation_id="refunds_list",
        summary="List a payment's refunds, newest first",
        parameters=[RefundListQuerySerializer],
        responses={200: RefundListSerializer},
    )
    def get(self, request: Request, payment_id: str) -> HttpResponse:
        def fetch(query: dict) -> tuple[Sequence[object], bool]:
            try:
                payment = payment_get(merchant=request.user, payment_id=payment_id)
            except PaymentNotFound as exc:
                raise not_found_problem("payment") from exc
            page = refund_list(payment=payment, **query)
            return page.refunds, page.has_more

        return list_answer(
            request,
            RefundListQuerySerializer,
            fetch,
            RefundSerializer,
            cursor_not_found=RefundNotFound,
            cursor_detail="starting_after is not the id of one of this payment's refunds.",
            cursor_message="No such refund.",
        )


class RefundDetailApi(MerchantApi):
    """``GET /refunds/{id}``: another merchant's refund answers 404."""

    @extend_schema(
        operation_id="refunds_retrieve",
        summary="Retrieve a refund",
        responses={200: RefundSerializer},
    )
    def get(self, request: Request, refund_id: str) -> HttpResponse:
        try:
            refund = refund_get(merchant=request.user, refund_id=refund_id)
        except RefundNotFound as exc:
            raise not_found_problem("refund") from exc
        return json_answer(RefundSerializer(refund).data)


def healthz(request) -> JsonResponse:
    """``GET /healthz``: 200 while the process is up (no database or acquirer check)."""
    return JsonResponse({"status": "ok"})
